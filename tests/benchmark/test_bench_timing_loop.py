"""The device timing loop's logic with a fake event API (no GPU): the flush stays outside the timed
region, inputs rotate, repetitions stop as asked, the event overhead is measured and optionally subtracted."""

from __future__ import annotations

import pytest

from evokernel_mcp.benchmark import timing


class FakeGPU:
    """A device clock that advances only when work is 'executed' (flush, kernel, sleep)."""

    def __init__(self, kernel_ms: float = 0.5, flush_ms: float = 10.0, event_ms: float = 0.0):
        self.t, self.kernel_ms, self.flush_ms, self.event_ms = 0.0, kernel_ms, flush_ms, event_ms
        self.log: list[str] = []
        gpu = self

        class Event:
            def __init__(self, enable_timing=True):
                self.ts = None

            def record(self):
                gpu.t += gpu.event_ms
                self.ts = gpu.t
                gpu.log.append("record")

        self.api = {"Event": Event, "record": Event.record, "elapsed": lambda s, e: e.ts - s.ts,
                    "sync": lambda: None}
        self.nbytes, self.source = 1 << 28, "fake"

    def flush(self):
        self.t += self.flush_ms
        self.log.append("flush")

    def kernel(self, a):
        self.t += self.kernel_ms
        self.log.append(f"kernel{a}")


@pytest.fixture
def fake(monkeypatch):
    import torch

    gpu = FakeGPU()
    monkeypatch.setattr(timing, "_event_api", gpu.api)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: None, raising=False)
    return gpu


def test_flush_outside_timed_region_and_rotation(fake):
    opt = timing.TimingOptions(min_reps=12, max_reps=12, warmup_ms=0)
    run = timing.time_device(fake.kernel, [(0,), (1,), (2,)], opt, device="fake", flusher=fake)
    assert len(run.times_ms) == 12 and run.stop_reason == "max_reps"
    assert all(t == pytest.approx(0.5) for t in run.times_ms)  # flush (10 ms) never inside start..end
    timed = fake.log[fake.log.index("record", fake.log.index("kernel0")):]
    seq = [x for x in timed if x.startswith("kernel")]
    assert seq[-12:] == [f"kernel{i % 3}" for i in range(12)]
    i = len(fake.log) - 1 - fake.log[::-1].index("kernel2")  # last launch: flush, record, kernel, record
    assert fake.log[i - 2:i + 2] == ["flush", "record", "kernel2", "record"]
    assert run.event_overhead_ms == pytest.approx(0.0) and run.flush_bytes == 1 << 28 and not run.host_timing


def test_stops_on_target_ci_and_subtracts_overhead(fake):
    fake.event_ms = 0.01  # each record costs 10 us of device time
    opt = timing.TimingOptions(min_reps=20, max_time_s=60, target_rel_ci=0.01, warmup_ms=0, subtract_overhead=True)
    run = timing.time_device(fake.kernel, [(0,)], opt, device="fake", flusher=fake)
    assert run.stop_reason == "target_rel_ci" and len(run.times_ms) == 20  # constant times: CI width 0
    assert run.event_overhead_ms == pytest.approx(0.01) and run.overhead_subtracted
    assert all(t == pytest.approx(0.5) for t in run.times_ms)


def test_warm_cache_does_not_flush(fake):
    opt = timing.TimingOptions(cold_cache=False, min_reps=5, max_reps=5, warmup_ms=0)
    run = timing.time_device(fake.kernel, [(0,)], opt, device="fake")
    assert "flush" not in fake.log and run.flush_bytes is None and "warm cache" in run.method
