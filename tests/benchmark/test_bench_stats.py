"""Statistics of timed repetitions: known samples, internal consistency, CI coverage, refusals."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evokernel_mcp.benchmark import stats
from evokernel_mcp.benchmark.models import TimingStats
from evokernel_mcp.errors import BadInput


def test_known_sample():
    s = stats.summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert s.median_ms == 3.0 and s.min_ms == 1.0 and s.mean_ms == 3.0 and s.reps == 5
    assert s.std_ms == pytest.approx(math.sqrt(2.5))
    assert s.p10_ms == pytest.approx(1.4) and s.p90_ms == pytest.approx(4.6)  # linear interpolation
    assert s.ci_median_ms == (1.0, 5.0)  # 5 samples cannot reach 95 %: the whole range


def test_single_rep_is_allowed_and_degenerate():
    s = stats.summarize([2.5])
    assert (s.median_ms, s.min_ms, s.p10_ms, s.p90_ms, s.std_ms, s.reps) == (2.5, 2.5, 2.5, 2.5, 0.0, 1)
    assert s.ci_median_ms == (2.5, 2.5) and s.rel_ci == 0.0


@pytest.mark.parametrize("n,ranks", [(6, (0, 5)), (10, (1, 8)), (20, (5, 14)), (100, (39, 60))])
def test_median_ci_ranks_match_binomial_tables(n, ranks):
    # 1-based tables: n=10 -> (2, 9), n=20 -> (6, 15), n=100 -> (40, 61) at >= 95 %
    assert stats.median_ci_ranks(n, 0.95) == ranks


def test_median_ci_coverage_is_at_least_nominal():
    lo, hi = stats.median_ci_ranks(30, 0.95)
    cover = sum(math.comb(30, k) for k in range(lo + 1, hi + 1)) / 2**30
    assert cover >= 0.95
    lo2, hi2 = lo + 1, hi - 1  # one rank tighter must fall below 95 %
    assert sum(math.comb(30, k) for k in range(lo2 + 1, hi2 + 1)) / 2**30 < 0.95


def test_normal_approximation_is_continuous_with_exact():
    a = stats.median_ci_ranks(2000)
    b = stats.median_ci_ranks(2001)
    assert abs(a[0] - b[0]) <= 2 and abs(a[1] - b[1]) <= 3


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=1e4, allow_nan=False), min_size=1, max_size=300))
def test_consistency_on_any_sample(xs):
    s = stats.summarize(xs)
    assert s.min_ms <= s.p10_ms <= s.median_ms <= s.p90_ms <= max(xs)
    assert s.ci_median_ms[0] <= s.median_ms <= s.ci_median_ms[1]
    assert s.reps == len(xs) and s.std_ms >= 0
    assert min(xs) <= s.mean_ms * (1 + 1e-12) + 1e-12 and s.mean_ms <= max(xs) * (1 + 1e-12) + 1e-12


def test_ci_shrinks_with_more_samples():
    rng = random.Random(0)
    small = stats.summarize([1 + rng.gauss(0, 0.05) for _ in range(20)])
    big = stats.summarize([1 + rng.gauss(0, 0.05) for _ in range(2000)])
    assert big.rel_ci < small.rel_ci


@pytest.mark.parametrize("bad", [[], [1.0, -0.1], [float("nan")], [1.0, float("inf")]])
def test_impossible_samples_are_refused(bad):
    with pytest.raises(BadInput):
        stats.summarize(bad)


def test_bad_confidence_is_refused():
    with pytest.raises(BadInput, match="confidence"):
        stats.summarize([1.0, 2.0], confidence=1.5)


def _ts(med, lo, hi):
    return TimingStats(median_ms=med, min_ms=lo, mean_ms=med, p10_ms=lo, p90_ms=hi, std_ms=0.1,
                       ci_median_ms=(lo, hi), reps=50, rel_ci=(hi - lo) / 2 / med)


def test_speedup_clear_win_is_not_noise():
    sp = stats.speedup(candidate=_ts(1.0, 0.98, 1.02), baseline=_ts(2.0, 1.96, 2.04))
    assert sp.speedup == pytest.approx(2.0) and not sp.noise
    assert sp.speedup_ci[0] == pytest.approx(1.96 / 1.02) and sp.speedup_ci[1] == pytest.approx(2.04 / 0.98)
    assert sp.speedup_ci[0] <= sp.speedup <= sp.speedup_ci[1]


def test_overlapping_intervals_are_noise():
    sp = stats.speedup(candidate=_ts(1.0, 0.95, 1.05), baseline=_ts(1.02, 0.99, 1.06))
    assert sp.noise and sp.speedup_ci[0] < 1.0 < sp.speedup_ci[1]


def test_spread():
    assert stats.spread([1.0, 1.01, 0.99, 1.0, 1.0]) == pytest.approx(0.02)
    with pytest.raises(BadInput):
        stats.spread([])
