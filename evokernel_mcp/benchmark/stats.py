"""Statistics of timed repetitions: order statistics, a distribution-free CI of the median, speedup.

Pure Python (no torch, no numpy) so the runner and the server share it and tests run anywhere.
Timings of GPU kernels are skewed and heavy-tailed (clock ramps, interrupts), so the median and an
order-statistics interval are used rather than mean +/- t*sd.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from evokernel_mcp.benchmark.models import NoiseFloor, Speedup, TimingStats
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


# ------------------------------------------------------------------ paired (interleaved) comparisons
# Interleaved timing (interleave.py) gives one value per arm per round (the median of that round's block
# of repetitions). Candidate and baseline of one round ran seconds apart at most, so a clock ramp, a power
# limit or a step change hits both; the per-round log ratio cancels it. Interval method: the
# distribution-free order-statistics interval of the MEDIAN log ratio (the sign-test interval, the same
# binomial ranks as median_ci_ranks). Chosen over a bootstrap (needs a seed, under-covers at the 10-30
# rounds a short budget gives) and over t on the mean log ratio (a round hit by an interrupt or by a step
# change falling between its two arms is an outlier that drags the mean): its coverage is >= the nominal
# confidence whenever the arms are exchangeable within a round (ABBA / randomized order makes them so),
# with no assumption on the shape of the noise. Cost: ~65 % of t's efficiency on normal data, which the
# block medians make up for.
MIN_PAIRED_ROUNDS = 6  # the fewest rounds whose order-statistics interval reaches 95 %


def log_ratios(base_rounds: Sequence[float], cand_rounds: Sequence[float]) -> list[float]:
    """log(base / cand) per round; BadInput for unequal lengths, no rounds, or a time <= 0."""
    b, c = validate_times(base_rounds), validate_times(cand_rounds)
    if len(b) != len(c):
        raise BadInput(f"{len(b)} baseline rounds but {len(c)} candidate rounds: pairing needs one of each per round")
    bad = next((i for i, (x, y) in enumerate(zip(b, c)) if x <= 0 or y <= 0), None)
    if bad is not None:
        raise BadInput(f"round {bad} has a time of 0 ms: the timer cannot resolve it; time a larger problem")
    return [math.log(x / y) for x, y in zip(b, c)]


def paired_speedup(base_rounds: Sequence[float], cand_rounds: Sequence[float],
                   confidence: float = 0.95) -> tuple[float, float, float, bool]:
    """(speedup, ci_lo, ci_hi, noise) from per-round times of two interleaved arms.

    speedup = exp(median of log(base/cand)) (> 1: the candidate is faster); [ci_lo, ci_hi] is the
    distribution-free interval of that median (see the block comment above); noise is True when the
    interval holds 1. Fewer rounds than the confidence needs give the full range of the ratios."""
    d = sorted(log_ratios(base_rounds, cand_rounds))
    lo_r, hi_r = median_ci_ranks(len(d), confidence)
    lo, hi = math.exp(d[lo_r]), math.exp(d[hi_r])
    return math.exp(percentile(d, 50)), lo, hi, lo <= 1.0 <= hi


# Host timing (the CPU path): identical code in two processes pinned to one CPU reads up to ~1 % apart, and one
# control arm is one draw of that difference (bench/same_code_cpu.py: softmax 512x1024 held 6 of 8 calls on the
# control's band alone, the candidate's own draw beyond it). The band is at least this wide there.
HOST_BAND_FLOOR = 0.01
# Device timing: on one H100, identical code in two processes read up to 1.4 % apart on memory-bound kernels
# (softmax, cross-entropy, ReLU over tens of MB; bench/results campaign, 48 same-code calls), steadily within
# a call, while the control arm's own draw was often within 0.5 %: the band is at least this wide there.
DEVICE_BAND_FLOOR = 0.015


def noise_floor(base_rounds: Sequence[float], control_rounds: Sequence[float],
                confidence: float = 0.95, min_half: float = 0.0) -> NoiseFloor:
    """The measured noise floor: the paired ratio of the baseline to its byte-identical copy (the control
    arm) and that ratio's interval. Identical code should give 1; how far the interval strays from 1 is
    how far a difference must be before it means anything on this device, now."""
    r, lo, hi, _ = paired_speedup(base_rounds, control_rounds, confidence)
    measured = max(abs(math.log(lo)), abs(math.log(hi)))
    half = max(measured, math.log1p(min_half))
    band = (math.exp(-half), math.exp(half))
    floor = f"; at least +/-{min_half:.1%} (two processes of identical code differ by that much here)" if half > measured else ""
    return NoiseFloor(ratio=r, ci=(lo, hi), band=band, rounds=len(base_rounds),
                      source=f"control arm (a byte-identical copy of the baseline, interleaved): {len(base_rounds)} "
                      f"rounds, ratio {r:.4f} [{lo:.4f}, {hi:.4f}], band [{band[0]:.4f}, {band[1]:.4f}]{floor}")


def least_floor(min_half: float) -> NoiseFloor:
    """The noise floor without a control arm (not asked, or cut for device memory): the least band two processes of
    identical code differ by here (HOST_BAND_FLOOR, DEVICE_BAND_FLOOR), so that identical code in two processes
    does not read as a resolved difference, nor two runs of one candidate as disagreeing (a confirm)."""
    half = math.log1p(min_half)
    band = (math.exp(-half), math.exp(half))
    return NoiseFloor(ratio=1.0, ci=(1.0, 1.0), band=band, rounds=0,
                      source=f"no control arm: the least band two processes of identical code differ by here, "
                      f"+/-{min_half:.1%} (band [{band[0]:.4f}, {band[1]:.4f}])")


def resolved(speedup_ci: tuple[float, float], floor: NoiseFloor | None) -> bool:
    """True when the speedup interval lies wholly outside the noise band (without a floor: outside 1).

    The band is symmetric in log around 1 (identical code strays either way), so a candidate 'faster' by
    less than the control arm strayed from the baseline is not resolved."""
    lo, hi = speedup_ci
    if lo > hi:
        raise BadInput(f"speedup interval [{lo}, {hi}] has lo > hi")
    b_lo, b_hi = floor.band if floor is not None else (1.0, 1.0)
    return lo > b_hi or hi < b_lo


def widened(ci: tuple[float, float], floor: NoiseFloor) -> tuple[float, float]:
    """The paired interval stretched by the noise floor's band on both sides: [lo / x, hi * x] for the
    band [1/x, x]. It holds 1 exactly when the paired interval overlaps the band, so `noise` (the widened
    interval holds 1) and `resolved` (the paired interval lies outside the band) always agree."""
    lo, hi = ci
    x = floor.band[1]
    return lo / x, hi * x


def paired_rel_ci(base_rounds: Sequence[float], cand_rounds: Sequence[float], confidence: float = 0.95) -> float:
    """Half-width of the paired interval in log units (0.01 ~ +/-1 %): the interleaved loop's stopping test.
    inf until enough rounds exist for the interval to reach the confidence."""
    n = len(base_rounds)
    if n < 1 or median_ci_ranks(n, confidence) == (0, n - 1) and 1 - 2 * 0.5 ** n < confidence:
        return math.inf
    _, lo, hi, _ = paired_speedup(base_rounds, cand_rounds, confidence)
    return (math.log(hi) - math.log(lo)) / 2
