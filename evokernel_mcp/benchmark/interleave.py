"""Interleaved A/B(/control/...) timing, run by the trusted runner: every round times a block of k
repetitions of each arm, in ABBA or randomized order, so that a clock ramp, a power limit or a step change
hits every arm of a round alike and the per-round ratios (stats.paired_speedup) cancel it.

Each arm is a blocking callable `arm(k) -> list[float]`: it asks that arm's own process to time k
repetitions (timing.py, with the same flush and input rotation as every arm) and returns their times, ms.
The runner never runs arm code itself; it only schedules, keeps the numbers and decides when to stop.

The budget: `opt.max_time_s` per arm for up to BUDGET_ARMS arms, so the whole run (warm-up included) takes
at most about `opt.max_time_s x min(len(arms), BUDGET_ARMS)` plus one block: a block is never started
when the time measured so far says it would end past the budget. A third arm (the control) shares the
budget of two rather than adding its own: each arm's series gets 2/3 of the time, the call costs the same.
Warm-up is by time (WARMUP_FRACTION of the budget, at least WARMUP_MIN_CALLS calls of one repetition per
arm), never a fixed count. The block size k adapts to the kernel: a block's repetitions target about
budget / (arms x TARGET_ROUNDS) of wall time, between MIN_BLOCK_S and MAX_BLOCK_S, so a 2 us kernel times
hundreds of reps per block (the arm's per-call cost is amortised) and a 50 ms kernel one or two. k is sized by
the MARGINAL wall of a repetition, without the block's fixed cost (the request, the profiler's start, the
reply: tens of ms on a GPU, more than the target): `Pace`. Sized by the whole wall per repetition, a 2.6 ms
kernel behind a 45 ms fixed cost would time one repetition per block, every block would be mostly harness
work, and the runner's clock around a block (bound.py) could not tell a forged time from that work.

Stopping: after at least MIN_ROUNDS rounds and opt.min_reps repetitions per arm, when every arm's paired
interval against the first arm (the reference) has a half-width <= opt.target_rel_ci; or at the budget (after
at least BUDGET_MIN_ROUNDS rounds), or at opt.max_reps repetitions per arm.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evokernel_mcp.benchmark.stats import MIN_PAIRED_ROUNDS, paired_rel_ci
from evokernel_mcp.errors import BadInput

Arm = Callable[[int], list[float]]
ORDERS = ("abba", "random")
MIN_ROUNDS = max(MIN_PAIRED_ROUNDS, 10)
TARGET_ROUNDS = 30
MIN_BLOCK_S, MAX_BLOCK_S = 0.002, 0.25
MAX_K = 10000
WARMUP_FRACTION = 0.05
WARMUP_MIN_CALLS = 2
WARMUP_MAX_CALLS = 50
MAX_ROUNDS = 100000
BUDGET_ARMS = 2  # arms the time budget is counted for (more arms share it)
# Rounds run even past the budget: the runner's bound on reported times (bound.py) is a median over rounds, and
# with one round a single scheduler delay of the candidate's block on a loaded host reads as a forged time, and with
# three, two delays do (an honest candidate was judged invalid in 2 of 5 runs with the VM's cores busy; none of 6 at 5)
BUDGET_MIN_ROUNDS = 5
# A stop (budget or interval) is put off while `settle(run)` says the runner's bound reads failed: rounds go
# on until it passes, until the run has SETTLE_FACTOR x the rounds it had at the first such stop (at least
# SETTLE_MIN_EXTRA more), or until the extra rounds have taken SETTLE_FACTOR x as long as the run before them
# (or its budget, if longer: rounds that grow slower end too). A median over five rounds is still moved by
# three scheduler delays on a loaded host (an honest candidate was judged invalid once in a CI run of the test
# suite, two test workers on two cores); a forged time fails every round and still fails at the cap, having
# cost it about twice its rounds.
SETTLE_FACTOR = 2
SETTLE_MIN_EXTRA = 10


@dataclass
class InterleavedRun:
    """What an interleaved run measured. rounds[i][arm] is the median of round i's block of that arm."""

    arms: list[str]
    rounds: list[dict[str, float]] = field(default_factory=list)
    orders: list[list[str]] = field(default_factory=list)
    block_sizes: list[int] = field(default_factory=list)
    times_ms: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # arm -> (round id, time)
    warmup_calls: dict[str, int] = field(default_factory=dict)
    warmup_s: float = 0.0
    elapsed_s: float = 0.0
    budget_s: float = 0.0
    stop_reason: str | None = None
    settle_from: int | None = None  # rounds when a stop was first put off for the bound (None: never)

    def series(self, arm: str) -> list[float]:
        """Per-round block medians of one arm, in round order (what stats.paired_speedup pairs)."""
        return [r[arm] for r in self.rounds]

    def reps(self, arm: str) -> int:
        return len(self.times_ms.get(arm, []))

    def to_dict(self) -> dict[str, Any]:
        return {"arms": self.arms, "rounds": {a: self.series(a) for a in self.arms}, "orders": self.orders,
                "block_sizes": self.block_sizes, "times_ms": self.times_ms, "warmup_calls": self.warmup_calls,
                "warmup_s": self.warmup_s, "elapsed_s": self.elapsed_s, "budget_s": self.budget_s,
                "stop_reason": self.stop_reason, "settle_from": self.settle_from}


def round_order(names: Sequence[str], r: int, mode: str, rng: random.Random) -> list[str]:
    """Arm order of round r. 'abba': rotate by r over a cycle of len(names) rounds, reversed on every other
    cycle (two arms: AB, BA, BA, AB, ...), so each arm holds each position equally often and first/second
    alternate; 'random': a fresh shuffle per round from the seeded rng."""
    n = len(names)
    if mode == "random":
        order = list(names)
        rng.shuffle(order)
        return order
    if n == 2:
        return list(names) if r % 4 in (0, 3) else list(reversed(names))
    order = [names[(i + r) % n] for i in range(n)]
    return order[::-1] if (r // n) % 2 else order


def block_size(per_rep_s: float, budget_s: float, n_arms: int) -> int:
    """Repetitions per block: the block's repetitions last about budget / (arms x TARGET_ROUNDS), clamped."""
    target = min(max(budget_s / (n_arms * TARGET_ROUNDS), MIN_BLOCK_S), MAX_BLOCK_S)
    return int(min(max(1, target // max(per_rep_s, 1e-7)), MAX_K))


GROWTH = 16  # k grows at most this much from one round to the next: the warm-up's one-repetition blocks cannot
# tell a repetition's harness work from the block's fixed cost, a block of k can (Pace.learn)


@dataclass
class Pace:
    """One arm's wall per block, as fixed + k x marginal seconds. fixed: the least wall a block took beyond
    the times it reported (its warm-up blocks of one repetition); marginal: the wall of the last block beyond
    `fixed`, per repetition, and at least its reported time (a forged time only makes k larger)."""

    fixed: float = math.inf
    marginal: float = 0.0

    def learn(self, k: int, times_ms: Sequence[float], wall: float) -> None:
        reported = sum(times_ms) / 1e3
        if k == 1:
            self.fixed = min(self.fixed, max(wall - reported, 0.0))
        self.marginal = max((wall - self._fixed_s()) / k, reported / k, 1e-7)

    def block_s(self, k: int) -> float:
        return self._fixed_s() + k * self.marginal

    def _fixed_s(self) -> float:
        return self.fixed if math.isfinite(self.fixed) else 0.0


def _call(arm: Arm, name: str, k: int) -> tuple[list[float], float]:
    t0 = time.monotonic()
    times = [float(t) for t in arm(k)]
    if len(times) != k:
        raise BadInput(f"arm {name!r} returned {len(times)} times for a block of {k}")
    return times, time.monotonic() - t0


def _warm_up(arms: Mapping[str, Arm], run: InterleavedRun, budget_s: float) -> dict[str, Pace]:
    """Single-repetition calls per arm until WARMUP_FRACTION of the budget is spent (at least
    WARMUP_MIN_CALLS each); returns each arm's Pace learnt from them."""
    t0 = time.monotonic()
    per_arm = WARMUP_FRACTION * budget_s / len(arms)
    pace: dict[str, Pace] = {}
    for name, arm in arms.items():
        a0, n, pace[name] = time.monotonic(), 0, Pace()
        while n < WARMUP_MIN_CALLS or (time.monotonic() - a0 < per_arm and n < WARMUP_MAX_CALLS):
            pace[name].learn(1, *_call(arm, name, 1))
            n += 1
        run.warmup_calls[name] = n
    run.warmup_s = time.monotonic() - t0
    return pace


def _converged(run: InterleavedRun, opt: Any) -> bool:
    if len(run.rounds) < MIN_ROUNDS or any(run.reps(a) < opt.min_reps for a in run.arms):
        return False
    ref = run.series(run.arms[0])
    return all(paired_rel_ci(ref, run.series(a), opt.confidence) <= opt.target_rel_ci for a in run.arms[1:])


def _stop(run: InterleavedRun, opt: Any, t0: float, next_round_s: float) -> str | None:
    if _converged(run, opt):
        return "target_rel_ci"
    if any(run.reps(a) >= opt.max_reps for a in run.arms):
        return "max_reps"
    if len(run.rounds) >= MAX_ROUNDS:
        return "max_rounds"
    if time.monotonic() - t0 + next_round_s > run.budget_s and len(run.rounds) >= BUDGET_MIN_ROUNDS \
            and all(run.reps(a) >= opt.min_reps for a in run.arms):  # min_reps is a floor the caller asked for
        return "max_time_s"
    return None


def _settled(run: InterleavedRun, settle: Callable[[InterleavedRun], bool] | None, reason: str,
             extra_s: float, before_s: float) -> bool:
    """Whether a stop for `reason` may happen now (SETTLE_FACTOR above). extra_s: seconds since the first stop
    was put off; before_s: the run's seconds before it. A stop at max_reps or max_rounds is never put off."""
    if settle is None or reason in ("max_reps", "max_rounds") or settle(run):
        return True
    if run.settle_from is None:
        run.settle_from = len(run.rounds)
        return False
    cap = max(SETTLE_FACTOR * run.settle_from, run.settle_from + SETTLE_MIN_EXTRA)
    return len(run.rounds) >= cap or extra_s > SETTLE_FACTOR * max(before_s, run.budget_s)


def run_interleaved(arms: Mapping[str, Arm], *, opt: Any, rng_seed: int, order: str = "abba",
                    on_progress: Callable[[float, str], None] | None = None,
                    settle: Callable[[InterleavedRun], bool] | None = None) -> InterleavedRun:
    """Time every arm in interleaved rounds (module docstring). `arms`: name -> arm(k); the FIRST arm is the
    reference the stopping rule pairs the others with (put the baseline first). `opt`: a
    timing.TimingOptions (min_reps, max_reps, max_time_s per arm, target_rel_ci, confidence). settle: the
    runner's bound on the rounds so far, True when it passes (a stop waits for it: SETTLE_FACTOR above)."""
    if len(arms) < 2:
        raise BadInput(f"{len(arms)} arm(s): interleaving needs at least 2 (baseline and candidate)")
    if order not in ORDERS:
        raise BadInput(f"order = {order!r}: one of {', '.join(ORDERS)}")
    names = list(arms)
    rng = random.Random(rng_seed)
    t0 = time.monotonic()
    run = InterleavedRun(arms=names, times_ms={a: [] for a in names},
                         budget_s=opt.max_time_s * min(len(names), BUDGET_ARMS))
    pace = _warm_up(arms, run, run.budget_s)
    k, held = 1, None  # held: when a stop was first put off for the bound
    while True:
        k = min(block_size(max(p.marginal for p in pace.values()), run.budget_s, len(names)), GROWTH * k)
        next_round_s = sum(pace[a].block_s(k) for a in names)
        reason = _stop(run, opt, t0, next_round_s)
        now = time.monotonic()
        if reason and _settled(run, settle, reason, 0.0 if held is None else now - held,
                               (now if held is None else held) - t0):
            run.stop_reason = reason
            break
        if reason and held is None:
            held = now
        r = len(run.rounds)
        seq = round_order(names, r, order, rng)
        row: dict[str, float] = {}
        for name in seq:
            times, wall = _call(arms[name], name, k)
            pace[name].learn(k, times, wall)
            row[name] = statistics.median(times)
            run.times_ms[name] += [(r, t) for t in times]
        run.rounds.append(row)
        run.orders.append(seq)
        run.block_sizes.append(k)
        if on_progress:
            frac = min((time.monotonic() - t0) / run.budget_s, 1.0)
            on_progress(frac, f"round {r + 1}, {k} reps per block, {time.monotonic() - t0:.1f} s")
    run.elapsed_s = time.monotonic() - t0
    return run


def rel_half_width(run: InterleavedRun, arm: str, confidence: float = 0.95) -> float:
    """The paired interval's half-width (log units) of `arm` against the reference arm; inf if too few rounds."""
    if not run.rounds:
        return math.inf
    return paired_rel_ci(run.series(run.arms[0]), run.series(arm), confidence)
