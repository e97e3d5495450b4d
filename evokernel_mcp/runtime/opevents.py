"""Where a runner op's time went, for the log: events noted as the op runs (child starts, waits for a spare, each
child request of TRACE_OPS_S or more, or whose child's allocator reached TRACE_PEAK_BYTES) and the op's request
counts; the runner hands them to the server with the op's reply (runtime/runner.py), and the server logs them."""

from __future__ import annotations

import time
from collections import deque
from typing import Any

TRACE_OPS_S = 1.0  # ops at least this long go in the events
TRACE_PEAK_BYTES = 1 << 30  # ... and ops whose child's allocator reached this much


# Where a job's time went (child starts, waits for a spare): the runner hands these to the server with the
# op's reply, and the server logs them (stderr), so a slow job can be explained from the log.
EVENTS: deque[str] = deque(maxlen=200)


def note(fmt: str, *args: Any) -> None:
    t = time.time()  # the wall clock, to line events up with outside readings (the device's memory, a profiler)
    EVENTS.append(f"[{time.strftime('%H:%M:%S', time.localtime(t))}.{int(t % 1 * 1000):03d}] {fmt % args}")


# Per runner op: how many requests went to children, their wall time (send -> reply read, transfers included)
# and the time the children said the ops took; the runner reports them with its own CPU time (runner.py).
REQUESTS: dict[str, float] = {"n": 0, "wall_s": 0.0, "child_s": 0.0}


def reset_requests() -> dict[str, float]:
    out = dict(REQUESTS)
    REQUESTS.update(n=0, wall_s=0.0, child_s=0.0)
    return out


def drain_events() -> list[str]:
    out = []
    while EVENTS:
        out.append(EVENTS.popleft())
    return out
