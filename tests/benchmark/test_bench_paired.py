"""Interleaved timing and paired statistics on synthetic series: no real timing here.

The arms are fakes that advance a virtual clock, so run_interleaved's budget, block sizes and order are
exercised deterministically, and the device's drift (a slow clock ramp plus a step change mid-run, as a
power limit gives) is a function of that clock: what both arms of a round share."""

from __future__ import annotations

import math
import random

import pytest
from vclock import Clock

from evokernel_mcp.benchmark import interleave, stats
from evokernel_mcp.benchmark.timing import TimingOptions
from evokernel_mcp.errors import BadInput


def drift(t: float, total: float) -> float:
    """+4 % over the run, and +8 % from half-way on (a step: power limit, clock change)."""
    return 1.0 + 0.04 * t / total + (0.08 if t > total / 2 else 0.0)


def make_arm(clock: Clock, rng: random.Random, ms: float, total: float, call_cost_s: float = 0.0005):
    def arm(k: int) -> list[float]:
        out = []
        block = math.exp(rng.gauss(0, 0.005))  # per-block state that pairing cannot remove
        clock.t += call_cost_s
        for _ in range(k):
            t = ms * drift(clock.t, total) * block * math.exp(rng.gauss(0, 0.03))
            if rng.random() < 0.03:
                t *= 1.5  # an interrupt
            out.append(t)
            clock.t += t / 1e3
        return out
    return arm


OPT = TimingOptions(min_reps=10, max_time_s=2.0, target_rel_ci=0.002, max_reps=100000)


def _paired_run(clock, seed, cand_ms=1.0, base_ms=1.0, order="abba"):
    clock.t = 0.0
    rng = random.Random(seed)
    total = OPT.max_time_s * 2
    arms = {"baseline": make_arm(clock, rng, base_ms, total), "candidate": make_arm(clock, rng, cand_ms, total)}
    run = interleave.run_interleaved(arms, opt=OPT, rng_seed=seed, order=order)
    return run, stats.paired_speedup(run.series("baseline"), run.series("candidate"), 0.95)


def _unpaired_run(clock, seed, cand_ms=1.0, base_ms=1.0):
    """The old method: the candidate's whole series, then the baseline's, medians' intervals compared."""
    clock.t = 0.0
    rng = random.Random(seed)
    total = OPT.max_time_s * 2
    series = {}
    for name, ms in (("candidate", cand_ms), ("baseline", base_ms)):
        arm, t0, times = make_arm(clock, rng, ms, total), clock.t, []
        while clock.t - t0 < OPT.max_time_s:
            times += arm(20)
        series[name] = stats.summarize(times)
    return stats.speedup(series["candidate"], series["baseline"])


def test_same_code_with_drift_and_step_holds_1_in_95_percent_and_the_unpaired_method_does_not(clock):
    paired = sum(_paired_run(clock, s)[1][3] for s in range(200))
    unpaired = sum(_unpaired_run(clock, s).noise for s in range(200))
    assert paired >= 190, f"paired interval held 1 in {paired}/200"
    assert unpaired <= 20, f"the unpaired method held 1 in {unpaired}/200 (expected it to be fooled by drift)"


def test_a_true_5_percent_difference_is_resolved_in_9_of_10(clock):
    hits = 0
    for s in range(10):
        run, (sp, lo, hi, noise) = _paired_run(clock, 1000 + s, cand_ms=1.0 / 1.05)
        hits += (not noise) and lo > 1.0
        assert sp == pytest.approx(1.05, rel=0.02)
    assert hits >= 9


def test_random_order_also_holds_1(clock):
    held = sum(_paired_run(clock, s, order="random")[1][3] for s in range(60))
    assert held >= 57


def test_budget_bounds_a_50_ms_kernel_end_to_end(clock):
    rng = random.Random(3)
    opt = TimingOptions(min_reps=10, max_time_s=3.0, target_rel_ci=1e-6)
    arms = {"b": make_arm(clock, rng, 50.0, 6.0, 0.01), "c": make_arm(clock, rng, 50.0, 6.0, 0.01)}
    run = interleave.run_interleaved(arms, opt=opt, rng_seed=0)
    assert run.stop_reason == "max_time_s"
    assert clock.t <= 2 * opt.max_time_s + 0.2  # the budget (3 s per arm) + at most one block's overshoot
    assert run.warmup_s <= 0.1 * run.budget_s + 0.2 and all(n >= 2 for n in run.warmup_calls.values())
    assert max(run.block_sizes) <= 2  # 50 ms kernels: one or two repetitions per block
    assert len(run.rounds) >= 10


def test_a_fixed_cost_per_block_does_not_shrink_blocks_to_one_repetition(clock):
    """A 2.6 ms kernel behind a 45 ms fixed cost per block (the request, the profiler's start on a GPU): the
    blocks are sized by a repetition's own wall, so each holds several repetitions, not one."""
    rng = random.Random(5)
    opt = TimingOptions(min_reps=30, max_time_s=0.5, target_rel_ci=1e-6)
    arms = {n: make_arm(clock, rng, 2.6, 3.0, call_cost_s=0.045) for n in ("base", "cand", "control")}
    run = interleave.run_interleaved(arms, opt=opt, rng_seed=2)
    assert run.block_sizes[0] > 1 and min(run.block_sizes[1:]) >= 3, run.block_sizes


def test_pace_learns_the_fixed_cost_from_single_repetition_blocks_and_never_undercuts_the_reported_time():
    p = interleave.Pace()
    p.learn(1, [2.0], 0.050)  # 48 ms beyond the reported 2 ms
    p.learn(1, [2.0], 0.047)
    assert p.fixed == pytest.approx(0.045) and p.marginal == pytest.approx(0.002)
    p.learn(8, [2.0] * 8, 0.045 + 8 * 0.0025)  # each repetition also costs 0.5 ms of harness work
    assert p.marginal == pytest.approx(0.0025) and p.block_s(4) == pytest.approx(0.055)
    p.learn(8, [3.0] * 8, 0.040)  # a wall shorter than the reported times: the reported time stands
    assert p.marginal == pytest.approx(0.003)


def test_short_kernels_get_big_blocks_and_every_arm_once_per_round(clock):
    rng = random.Random(4)
    arms = {n: make_arm(clock, rng, 0.002, 6.0) for n in ("base", "cand", "control")}
    run = interleave.run_interleaved(arms, opt=OPT, rng_seed=1)
    assert min(run.block_sizes[1:]) >= 100
    assert all(sorted(o) == ["base", "cand", "control"] for o in run.orders)
    firsts = [o[0] for o in run.orders[:6]]
    assert set(firsts) == {"base", "cand", "control"}  # the order rotates
    rounds_of = {r for r, _ in run.times_ms["cand"]}
    assert rounds_of == set(range(len(run.rounds)))


def test_abba_order_for_two_arms():
    orders = [interleave.round_order(["A", "B"], r, "abba", random.Random(0)) for r in range(4)]
    assert orders == [["A", "B"], ["B", "A"], ["B", "A"], ["A", "B"]]


def test_stops_on_paired_ci_when_arms_are_quiet(clock):
    rng = random.Random(5)
    opt = TimingOptions(min_reps=10, max_time_s=30.0, target_rel_ci=0.01)
    arms = {"b": make_arm(clock, rng, 1.0, 60.0), "c": make_arm(clock, rng, 1.0, 60.0)}
    run = interleave.run_interleaved(arms, opt=opt, rng_seed=0)
    assert run.stop_reason == "target_rel_ci" and len(run.rounds) >= interleave.MIN_ROUNDS
    assert interleave.rel_half_width(run, "c") <= 0.01 and clock.t < 30.0


def test_refusals():
    with pytest.raises(BadInput, match="at least 2"):
        interleave.run_interleaved({"a": lambda k: [1.0] * k}, opt=OPT, rng_seed=0)
    with pytest.raises(BadInput, match="returned 1 times"):
        interleave.run_interleaved({"a": lambda k: [1.0], "b": lambda k: [1.0] * k}, opt=OPT, rng_seed=0)
    with pytest.raises(BadInput, match="candidate rounds"):
        stats.paired_speedup([1.0, 2.0], [1.0])
    with pytest.raises(BadInput, match="0 ms"):
        stats.paired_speedup([1.0, 0.0], [1.0, 1.0])


def test_paired_speedup_known_values_and_noise_floor():
    base = [2.0, 2.2, 1.9, 2.1, 2.0, 2.05, 1.95]
    cand = [1.0, 1.1, 0.95, 1.05, 1.0, 1.025, 0.975]  # exactly 2x faster every round, whatever the drift
    sp, lo, hi, noise = stats.paired_speedup(base, cand)
    assert sp == pytest.approx(2.0) and lo == pytest.approx(2.0) and hi == pytest.approx(2.0) and not noise
    floor = stats.noise_floor(base, [b * f for b, f in zip(base, [1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.0])])
    assert floor.ci[0] < 1.0 < floor.ci[1] and floor.band[0] == pytest.approx(1 / floor.band[1])
    assert floor.band[1] >= max(1 / floor.ci[0], floor.ci[1]) - 1e-12
    assert stats.resolved((1.05, 1.08), floor) is True
    assert stats.resolved((1.005, 1.015), floor) is False  # excludes 1 but inside the noise floor
    assert stats.resolved((1.005, 1.015), None) is True
    assert stats.resolved((0.9, 1.1), None) is False
    assert stats.paired_rel_ci(base[:3], cand[:3]) == math.inf  # too few rounds for 95 %
