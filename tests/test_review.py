"""The blind review page in a real browser (headless Chromium through selenium): every item answered by
keyboard, the answers exported as a download and tallied to what was pressed, a hostile document shown as
text and running nothing, the page opened again keeping the answers. The tally's statistics from hand-computed values,
and the refusals of a choices file that does not belong to the review."""

import json
import shutil
from pathlib import Path

import pytest
from helpers import wait_until

from nlq.eval import review

HOSTILE = [
    "<script>window.pwned = 1</script>",
    '<img src=x onerror="window.pwned = 2">',
    "</script><script>window.pwned = 3</script>",
    "<svg onload=window.pwned=4>&amp; &lt;b&gt; \u2028 end",
]


def items(n=6):
    out = []
    for i in range(n):
        out.append({
            "id": f"item-{i + 1}",
            "prompt": f"Opening {i}: " + HOSTILE[i % len(HOSTILE)],
            "truth": f"true continuation {i}",
            "linear": f"one continuation {i} " + HOSTILE[(i + 1) % len(HOSTILE)],
            "nlq": f"another continuation {i}",
        })  # fmt: skip
    return out


@pytest.fixture
def browser(tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        pytest.skip("no Chromium and chromedriver on this machine (Debian: apt-get install chromium chromium-driver)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed: pip install -r requirements-dev.txt")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-dev-shm-usage"):  # fmt: skip
        options.add_argument(flag)
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    options.add_experimental_option("prefs", {"download.default_directory": str(downloads)})
    b = webdriver.Chrome(options=options, service=Service(executable_path=driver))
    b.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    b.downloads = downloads
    yield b
    b.quit()


def press(b, key):
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(b).send_keys(key).perform()


def stored(b, rid: str) -> dict:
    """The answers the page has saved in localStorage for the review rid."""
    return json.loads(b.execute_script(f"return localStorage.getItem('blind-review-{rid}')") or "{}")


def reopened(b) -> tuple[str, str]:
    """(status, prompt) of the page opened again in a new tab, read once it has restored its answers; the first
    tab comes back. A reload of the same tab is left out: on a busy machine Chromium lost a page's localStorage
    writes across it (0 answered after the page's own store held 3, in 5 of 20 tries beside a running suite),
    which no page can prevent; the page says to export before a reload."""
    first, url = b.current_window_handle, b.current_url
    b.switch_to.new_window("tab")
    b.get(url)
    out = shown(b, "status"), shown(b, "prompt")
    b.close()
    b.switch_to.window(first)
    return out


def shown(b, part):
    return b.execute_script(f"return document.getElementById({part!r}).textContent")


def test_the_page_answered_by_keyboard_exports_what_was_pressed_and_runs_no_document(browser, tmp_path):
    given = items()
    given[5]["nlq"] = given[5]["linear"]  # a pair whose two continuations are the same text
    rid = review.write(tmp_path, given, ("linear", "nlq"), seed=3, title="<b>title</b>")
    key = json.loads((tmp_path / "review_key.json").read_text())
    browser.get((tmp_path / "review.html").as_uri())
    keys = ["a", "B", "t", "b", "A", "a"]  # a capital letter is taken as its letter
    for i, k in enumerate(keys):
        item, order = given[i], key["items"][given[i]["id"]]
        same = browser.execute_script("return document.getElementById('same').hidden") is False
        assert same == (i == 5), i  # the page says when A and B are the same text
        assert shown(browser, "prompt") == item["prompt"]  # the document as text, tags and all
        assert shown(browser, "A") == item[order["A"]] and shown(browser, "B") == item[order["B"]]
        assert shown(browser, "truth") == item["truth"]
        press(browser, k)
        # the page's own store holds the answer before anything reads it again: a key event is handled after
        # send_keys returns, and a reload that came first lost answers on a busy machine
        wait_until(lambda n=i + 1: len(stored(browser, rid)) == n, f"answer {i + 1} in localStorage")
        if i == 2:  # the page opened again keeps the answers and opens at the first unanswered item
            status, prompt = reopened(browser)
            assert "(3 answered)" in status and prompt == given[3]["prompt"]
    assert browser.execute_script("return window.pwned") is None
    assert browser.find_elements("tag name", "img") == [] and browser.find_elements("tag name", "svg") == []
    assert shown(browser, "title") == "<b>title</b>"
    press(browser, "e")
    exported = browser.downloads / f"choices-{rid}.json"
    wait_until(exported.exists, "exported file")
    assert shown(browser, "saved") == f"exported 6 answer(s) to choices-{rid}.json (your downloads folder)"
    answers = review.read_choices(exported, key)
    expected = {g["id"]: {"a": "A", "b": "B", "t": "tie"}[k.lower()] for g, k in zip(given, keys)}
    assert answers == expected
    wins = {"linear": 0, "nlq": 0}
    for item, choice in expected.items():
        if choice != "tie":
            wins[key["items"][item][choice]] += 1
    result = review.tally(answers, key)
    assert result["wins"] == wins and result["ties"] == 1 and result["answered"] == 6


def test_the_page_holds_no_arm_name_and_no_raw_tag_of_a_document(tmp_path):
    review.write(tmp_path, items(), ("linear", "nlq"), seed=0, title="t")
    page = (tmp_path / "review.html").read_text()
    assert "linear" not in page and "nlq" not in page and "another continuation 5" in page  # texts, no names
    data = page.split('id="data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in data and ">" not in data and "&" not in data  # nothing in the data block can close it


def test_the_tally_against_hand_computed_values():
    key = {"review": "r", "arms": ["linear", "nlq"], "items": {f"i{k}": {"A": "nlq", "B": "linear"} for k in range(10)}}
    answers = {f"i{k}": "A" for k in range(7)} | {"i7": "B", "i8": "tie"}
    result = review.tally(answers, key)
    assert result["wins"] == {"linear": 1, "nlq": 7} and result["ties"] == 1 and result["items"] == 10
    # two-sided sign test of 7 against 1: 2 x (C(8,0) + C(8,1)) / 2^8 = 18 / 256
    assert result["sign_test_p"] == pytest.approx(18 / 256)
    # Wilson's interval of 7 / 8 at z = 1.96: (0.5291, 0.9776)
    low, high = result["win_rate"]["nlq"]["interval"]
    assert low == pytest.approx(0.5291, abs=1e-4) and high == pytest.approx(0.9776, abs=1e-4)
    assert review.sign_test(0, 0) is None and review.sign_test(3, 3) == 1.0


@pytest.mark.parametrize(
    "content, words",
    [
        ("not json", "cannot be read as JSON"),
        ('{"review": "r", "answers": {"i1": "maybe"}}', "is not a review's answers"),
        ('{"review": "r", "answers": ["A"]}', "is not a review's answers"),
        ('{"review": "other", "answers": {"i1": "A"}}', "not to this report's 'r'"),
        (
            '{"review": "r", "answers": {"i1": "A"}, "note": 1}',
            r"holds 'note', which the page never writes \(it exports review and answers\): export the answers again",
        ),
        ('{"review": "r", "answers": {"i99": "A"}}', r"answers items this review does not have \('i99'\)"),
        ('{"review": "r", "answers": {}}', "holds no answers"),
    ],
)
def test_a_choices_file_of_another_review_or_shape_is_one_line(tmp_path, content, words):
    key = {"review": "r", "arms": ["a", "b"], "items": {"i1": {"A": "a", "B": "b"}}}
    (tmp_path / "c.json").write_text(content)
    with pytest.raises(review.ReviewError, match=words):
        review.read_choices(Path(tmp_path / "c.json"), key)


@pytest.mark.parametrize("a, b", [(7, 1), (1, 7), (5, 5), (0, 9), (12, 3), (30, 41)])
def test_the_sign_test_and_wilsons_interval_agree_with_scipy(a, b):
    """The tally's two statistics against scipy's own: the two-sided exact binomial test at p = 1/2 and its
    Wilson interval (without continuity correction), over wins ahead, behind, even and one-sided."""
    from scipy import stats

    test = stats.binomtest(a, a + b, 0.5)
    assert review.sign_test(a, b) == pytest.approx(test.pvalue)
    ci = test.proportion_ci(confidence_level=0.95, method="wilson")
    assert review.wilson(a, a + b) == pytest.approx([ci.low, ci.high], abs=1e-9)
