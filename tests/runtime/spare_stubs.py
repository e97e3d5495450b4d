"""Stand-ins for driving the Spares logic (spares.py) without starting a process: a child that records what
was done to it, and a pool whose spare starts are recorded (flavour per start) instead of run."""

from __future__ import annotations

import threading

from evokernel_mcp.runtime import spares
from evokernel_mcp.runtime.child_proc import ChildFailed

RealThread = threading.Thread  # make_pool() makes threading.Thread run its target at once, for the spares' starts


class Proc:
    def poll(self):
        return None


class Kid:
    def __init__(self, warm: bool, fail_warm: bool = False, timeable: bool = True):
        self.warm, self.fail_warm, self.timeable, self.proc = warm, fail_warm, timeable, Proc()
        self.warmed = self.discarded = False

    def unnice(self):
        pass

    def warm_profiler(self):
        if self.fail_warm:
            raise ChildFailed("crash", "gone")
        self.warm = self.warmed = True

    def discard(self):
        self.discarded = True


def make_pool(monkeypatch, device="cuda:0", n=4, ready=(), refill=True):
    """A Spares whose starts are recorded (flavour per start), not run; with refill, each start puts a Kid of
    that flavour in the ready list at once."""
    monkeypatch.setattr(spares.sandbox, "level_candidates", lambda: ["none"])
    pool = spares.Spares(device, n=n)
    started: list[bool] = []
    lock = threading.Lock()

    def fill(warm):
        with lock:
            started.append(warm)
        with pool._lock:
            pool._starting -= 1
            pool._starting_warm -= int(warm)
            if refill:
                pool._ready.append(Kid(warm))

    monkeypatch.setattr(pool, "_fill", fill)
    monkeypatch.setattr(spares.threading, "Thread",
                        lambda target, args=(), daemon=None, name=None: type("T", (), {"start": lambda s: target(*args)})())
    pool._ready = list(ready)
    return pool, started
