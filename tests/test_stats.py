"""nlq/comparison/stats.py's costs on their own scale: paired ratios (geometric mean, t interval and p on log
ratios, Wilcoxon beside it) against scipy and hand-worked cases, and the seeds a t-test on log ratios needs for
80 % power against Cohen's table and scipy's noncentral t."""

import math
import random
import statistics

import numpy as np
import pytest
from scipy import stats as scipy_stats

from nlq.comparison.screening import TOKENS, one
from nlq.comparison.stats import ratio, seeds_for_power, versus_baseline


@pytest.mark.parametrize("seed", range(5))
def test_a_ratio_is_the_geometric_mean_with_scipys_interval_t_test_and_wilcoxon(seed):
    rng = random.Random(seed)
    base = [rng.uniform(100, 1000) for _ in range(6)]
    arm = [b * rng.uniform(0.3, 1.2) for b in base]
    got = ratio(arm, base)
    la, lb = [math.log(x) for x in arm], [math.log(x) for x in base]
    geometric = math.prod(a / b for a, b in zip(arm, base)) ** (1 / 6)
    logs = [x - y for x, y in zip(la, lb)]
    low, high = scipy_stats.t.interval(0.95, 5, loc=statistics.mean(logs), scale=scipy_stats.sem(logs))
    assert got["ratio"] == pytest.approx(geometric) and got["n"] == 6
    assert got["interval"] == pytest.approx([math.exp(low), math.exp(high)])
    assert got["p"] == pytest.approx(scipy_stats.ttest_rel(la, lb).pvalue)
    assert got["wilcoxon_p"] == pytest.approx(scipy_stats.wilcoxon(la, lb).pvalue)
    assert got["sd_log"] == pytest.approx(statistics.stdev(logs))


def test_hand_worked_ratios():
    """Halves in every seed: the ratio 0.5 (50 % sooner), its interval the point, no p. A half and a double:
    the ratio 1, and the interval exp(+-t(0.975, 1) ln 2) (logs +-ln 2: their sd ln 2 sqrt 2, over sqrt 2).
    One pair: the ratio alone."""
    same = ratio([50, 100, 150], [100, 200, 300])
    assert same == {"ratio": pytest.approx(0.5), "interval": pytest.approx([0.5, 0.5]), "p": None,
                    "wilcoxon_p": None, "n": 3}  # fmt: skip
    t = 12.706204736174698  # t(0.975, 1), from a table
    split = ratio([50, 400], [100, 200])
    assert split["ratio"] == pytest.approx(1.0) and split["interval"] == pytest.approx([2**-t, 2**t], rel=1e-9)
    assert split["p"] == pytest.approx(1.0)
    assert ratio([3], [4]) == {"ratio": pytest.approx(0.75), "interval": None, "p": None, "wilcoxon_p": None, "n": 1}
    with pytest.raises(ValueError):
        ratio([1, 2], [1])  # unpaired lists are no comparison


def test_a_slow_baseline_seed_strengthens_a_ratio_and_weakens_a_raw_difference():
    """The design's reason, in numbers: three seeds where the arm needs about 0.4 of the baseline's tokens, then
    a fourth that agrees (0.41) where the baseline is slow. On log ratios p falls, as one more agreeing seed should
    make it; on raw tokens the slow seed's large difference widens the spread, and the raw p rises."""
    base, arm = [1000, 1200, 900], [400, 500, 350]
    more_base, more_arm = [*base, 5000], [*arm, 2050]
    assert ratio(more_arm, more_base)["p"] < ratio(arm, base)["p"]

    def raw_p(a, b):
        runs = [[one(seed, x) for seed, x in enumerate(values)] for values in (a, b)]
        return versus_baseline(*runs, 0, TOKENS)[2]

    assert raw_p(more_arm, more_base) > raw_p(arm, base)


@pytest.mark.parametrize("d, n", [(1.0, 10), (0.8, 15), (0.5, 34)])
def test_seeds_for_80_percent_power_match_cohens_table(d, n):
    """A paired t-test at 0.05 two-sided, effect d = |log ratio| / sd of the log ratios: Cohen's one-sample
    table gives 10, 15 and 34 pairs."""
    assert seeds_for_power(d, 1.0, 0.05) == n
    assert seeds_for_power(-0.5 * d, 0.5, 0.05) == n  # only the size of effect over spread counts


@pytest.mark.parametrize("sd, r, alpha", [(0.3, 0.8, 0.025), (0.6, 0.43, 0.05 / 3), (0.2, 1.2, 0.05)])
def test_seeds_for_power_are_the_fewest_whose_noncentral_t_power_reaches_it(sd, r, alpha):
    def power(n):
        shift, crit = abs(math.log(r)) / sd * math.sqrt(n), scipy_stats.t.ppf(1 - alpha / 2, n - 1)  # log ratio r
        return 1 - scipy_stats.nct.cdf(crit, n - 1, shift) + scipy_stats.nct.cdf(-crit, n - 1, shift)

    n = seeds_for_power(math.log(r), sd, alpha)
    assert power(n) >= 0.8 > power(n - 1)
    assert seeds_for_power(math.log(r), sd, alpha / 2) >= n  # a stricter (Holm-adjusted) level never needs fewer


@pytest.mark.parametrize("d, alpha", [(5.38, 0.0125), (8.0, 0.05 / 4), (3.0, 0.05)])
def test_seeds_for_a_large_effect_match_simulated_t_tests_and_never_exceed_a_smaller_ones(d, alpha):
    """A large effect over its spread (the identity pilot's fuzzy-recall tokens: 5.38 at Holm's 0.0125): the
    paired t-test simulated on normal differences rejects in at least 80 % of draws at the seeds given and in
    fewer one seed short; halving the effect never needs fewer seeds."""
    rng = np.random.default_rng(0)

    def simulated(n):
        x = rng.normal(d, 1.0, size=(20_000, n))
        t = x.mean(axis=1) / (x.std(axis=1, ddof=1) / math.sqrt(n))
        return np.mean(np.abs(t) > scipy_stats.t.ppf(1 - alpha / 2, n - 1))

    n = seeds_for_power(d, 1.0, alpha)
    assert simulated(n) >= 0.8 > simulated(n - 1)
    assert seeds_for_power(d / 2, 1.0, alpha) >= n


def test_an_effect_out_of_reach_says_so():
    assert seeds_for_power(math.log(1.01), 1.0, 0.05, most=200) is None
