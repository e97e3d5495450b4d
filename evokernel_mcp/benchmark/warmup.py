"""Warm-up by time inside an arm's process (timing.py's loop and blocks.py's arms): calls until a share of the
time budget has passed with the device's work completed, the first call (compilation, autotuning) not counted.
The clock is bound when this module is imported (timing.py imports it before any candidate is loaded), so a
candidate that patches time.perf_counter_ns later does not change it."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evokernel_mcp.benchmark.timing import TimingOptions

_perf_ns = time.perf_counter_ns

WARMUP_FRACTION = 0.05  # warm-up never takes more than this share of max_time_s (after the first call)
WARMUP_MAX_CALLS = 1000


def warm_up_by_time(calls: Sequence[Callable[[], Any]], budget_s: float, sync: Callable[[], None],
                    min_calls: int = 2, max_calls: int = WARMUP_MAX_CALLS) -> tuple[int, float]:
    """Call (round-robin) until `budget_s` of wall time has passed with the device's work COMPLETED
    (synchronized after every call, so a 50 ms kernel is not queued a thousand times behind the host), at
    least min_calls; the first call (compilation, autotuning) is not counted against the budget. Returns
    (calls made, wall seconds of the last call)."""
    sync()
    calls[0]()
    sync()
    n, w0, last = 1, _perf_ns(), 0.0
    while n < min_calls or ((_perf_ns() - w0) / 1e9 < budget_s and n < max_calls):
        c0 = _perf_ns()
        calls[n % len(calls)]()
        sync()
        last = (_perf_ns() - c0) / 1e9
        n += 1
    return n, last


def warmup_budget_s(opt: TimingOptions) -> float:
    """warmup_ms, capped at WARMUP_FRACTION of max_time_s."""
    return min(opt.warmup_ms / 1e3, WARMUP_FRACTION * opt.max_time_s)


def _warm_up(calls: Sequence[Callable[[], Any]], opt: TimingOptions, api: dict[str, Any]) -> tuple[int, float]:
    """Warm up by time (warm_up_by_time); returns (calls, host seconds per enqueue)."""
    n, _ = warm_up_by_time(calls, warmup_budget_s(opt), api["sync"])
    # host cost of one enqueue, measured without waiting for the device
    h0 = _perf_ns()
    for i in range(3):
        calls[i % len(calls)]()
    host = (_perf_ns() - h0) / 3 / 1e9
    api["sync"]()
    return n + 3, host
