"""Offline first: when the Hugging Face hub cannot be reached, every hub fallback fails at once with its one
line (offline mode switched on after a one-second probe), instead of retrying for about 30 s."""

import os
import sys
import time
from pathlib import Path

import pytest

from nlq.common import hub
from nlq.common.errors import UserError
from nlq.data import tokenizer
from nlq.eval import taskdata
from nlq.interop.importers import from_pretrained

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def fresh_probe(monkeypatch):
    for switch in hub.SWITCHES:
        monkeypatch.delenv(switch, raising=False)
    hub.offline.cache_clear()
    yield
    hub.offline.cache_clear()


def test_an_unreachable_hub_switches_every_library_to_offline_mode(fresh_probe, monkeypatch, capsys):
    monkeypatch.setattr(hub, "reachable", lambda: False)
    assert hub.offline() is True
    assert all(os.environ[s] == "1" for s in hub.SWITCHES)
    for module, attr in hub.IMPORTED:
        if module in sys.modules:
            assert getattr(sys.modules[module], attr) is True
    assert "huggingface.co cannot be reached" in capsys.readouterr().err
    hub.offline()
    assert capsys.readouterr().err == ""  # asked once per process


def test_a_reachable_hub_or_a_users_switch_is_left_alone(fresh_probe, monkeypatch):
    monkeypatch.setattr(hub, "reachable", lambda: True)
    assert hub.offline() is False and "HF_HUB_OFFLINE" not in os.environ
    hub.offline.cache_clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub, "reachable", lambda: pytest.fail("no probe when the user set offline mode"))
    assert hub.offline() is True


def test_a_probe_that_hangs_is_given_up_after_its_timeout(monkeypatch):
    def hang(*args, **kwargs):  # a name lookup that never answers
        time.sleep(30)
        raise OSError("timed out")

    monkeypatch.setattr(hub.socket, "create_connection", hang)
    assert hub.reachable(timeout=0.2) is False


def test_every_hub_fallback_asks_first(fresh_probe, monkeypatch, tmp_path):
    """Weights, tokenizers and evaluation data: hub.offline() runs before the library is asked."""
    asked = []
    monkeypatch.setattr(hub, "reachable", lambda: asked.append(1) or False)
    with pytest.raises(ValueError, match="cannot load pretrained weights 'no-such-owner/model'"):
        from_pretrained("no-such-owner/model")
    assert len(asked) == 1
    tokenizer.hf_tokenizer.cache_clear()
    with pytest.raises(UserError, match="cannot load the tokenizer"):
        tokenizer.hf_tokenizer("no-such-owner/tokenizer")
    with pytest.raises(UserError, match="pass a local JSONL copy with --lambada_file"):
        list(taskdata.rows("lambada"))
    assert len(asked) == 1 and os.environ["HF_HUB_OFFLINE"] == "1"
