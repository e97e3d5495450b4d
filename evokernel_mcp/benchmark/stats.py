"""Statistics of timed repetitions: order statistics, a distribution-free CI of the median, speedup.

Pure Python (no torch, no numpy) so the worker and the server share it and tests run anywhere.
Timings of GPU kernels are skewed and heavy-tailed (clock ramps, interrupts), so the median and an
order-statistics interval are used rather than mean +/- t*sd.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from evokernel_mcp.benchmark.models import Speedup, TimingStats
from evokernel_mcp.errors import BadInput

_NORMAL_ABOVE = 2000  # above this many samples the binomial interval uses the normal approximation


def validate_times(times_ms: Sequence[float]) -> list[float]:
    """The samples as floats; BadInput for an empty series or a negative / non-finite time."""
    if len(times_ms) == 0:
        raise BadInput("no timed repetitions: at least 1 is needed (ask for min_reps >= 1)")
    out = []
    for i, t in enumerate(times_ms):
        t = float(t)
        if not math.isfinite(t) or t < 0:
            raise BadInput(f"time #{i} is {t!r} ms: times must be finite and >= 0")
        out.append(t)
    return out


def percentile(sorted_x: Sequence[float], q: float) -> float:
    """q-th percentile (0..100) of already sorted data, linear interpolation between ranks."""
    if not 0 <= q <= 100:
        raise BadInput(f"percentile {q} is outside 0..100")
    n = len(sorted_x)
    pos = (n - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    return sorted_x[lo] + (sorted_x[hi] - sorted_x[lo]) * (pos - lo)


def _binom_pmf_half(i: int, n: int) -> float:
    """P(X = i) for X ~ Binomial(n, 1/2), in log space (no overflow for large n)."""
    return math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) - n * math.log(2.0))


def median_ci_ranks(n: int, confidence: float = 0.95) -> tuple[int, int]:
    """0-based ranks (lo, hi) of the order statistics bracketing the median with >= `confidence` coverage.

    Distribution-free: P(x_(lo) <= median <= x_(hi)) = 1 - 2 P(Bin(n, 1/2) <= lo). When n is too small to
    reach the confidence, the whole range (0, n-1) is returned.
    """
    if n < 1:
        raise BadInput("no samples")
    if not 0 < confidence < 1:
        raise BadInput(f"confidence {confidence} must be between 0 and 1 (e.g. 0.95)")
    alpha = 1.0 - confidence
    if n > _NORMAL_ABOVE:
        z = _z_two_sided(confidence)
        half = z * math.sqrt(n) / 2.0
        lo = max(0, math.floor(n / 2.0 - half) - 1)
        return lo, min(n - 1, n - 1 - lo)
    # coverage of [x_(j), x_(n-1-j)] (0-based) is 1 - 2 P(Bin <= j): take the largest j with 2 P(Bin <= j) <= alpha
    j, cdf = -1, 0.0
    while j + 1 <= (n - 1) // 2:
        cdf += _binom_pmf_half(j + 1, n)
        if 2.0 * cdf > alpha:
            break
        j += 1
    j = max(j, 0)
    return j, n - 1 - j


def _z_two_sided(confidence: float) -> float:
    """Normal quantile for a two-sided interval, by bisection on erf (no scipy)."""
    target = confidence
    lo, hi = 0.0, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if math.erf(mid / math.sqrt(2)) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def summarize(times_ms: Sequence[float], confidence: float = 0.95) -> TimingStats:
    """Median, min, mean, p10/p90, std (n-1), the median's CI and its relative half-width."""
    x = sorted(validate_times(times_ms))
    n = len(x)
    med = percentile(x, 50)
    mean = math.fsum(x) / n
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in x) / (n - 1)) if n > 1 else 0.0
    lo_r, hi_r = median_ci_ranks(n, confidence)
    lo, hi = x[lo_r], x[hi_r]
    rel = (hi - lo) / (2.0 * med) if med > 0 else (0.0 if hi == lo else math.inf)
    return TimingStats(
        median_ms=med, min_ms=x[0], mean_ms=mean, p10_ms=percentile(x, 10), p90_ms=percentile(x, 90),
        std_ms=std, ci_median_ms=(lo, hi), reps=n, confidence=confidence, rel_ci=rel)


def rel_ci_of(times_ms: Sequence[float], confidence: float = 0.95) -> float:
    """Relative half-width of the median's CI (cheap stopping test for the timing loop)."""
    return summarize(times_ms, confidence).rel_ci


def intervals_overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def speedup(candidate: TimingStats, baseline: TimingStats) -> Speedup:
    """baseline / candidate medians, with a conservative interval from the two medians' CIs.

    noise is True when the CIs overlap (then the interval also contains 1.0 or touches it).
    """
    if candidate.median_ms <= 0:
        raise BadInput("candidate median is 0 ms: the timer cannot resolve it; time a larger problem")
    c_lo, c_hi = candidate.ci_median_ms
    b_lo, b_hi = baseline.ci_median_ms
    hi = b_hi / c_lo if c_lo > 0 else math.inf
    return Speedup(
        speedup=baseline.median_ms / candidate.median_ms,
        speedup_ci=(b_lo / c_hi if c_hi > 0 else math.inf, hi),
        noise=intervals_overlap(candidate.ci_median_ms, baseline.ci_median_ms),
    )


def spread(values: Sequence[float]) -> float:
    """(max - min) / median of a few values (e.g. medians of repeated benchmark calls)."""
    x = sorted(validate_times(values))
    med = percentile(x, 50)
    return (x[-1] - x[0]) / med if med > 0 else 0.0
