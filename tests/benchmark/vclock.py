"""A virtual clock for interleave.run_interleaved: fake arms advance it, so budgets and block sizes are exercised
without real timing (the `clock` fixture in conftest.py puts it in place of time.monotonic)."""

from __future__ import annotations


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t
