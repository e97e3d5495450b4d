"""The device timing loop's logic with a fake event API and a fake activity recorder (no GPU): the flush
stays outside the timed region, inputs rotate, repetitions stop as asked, the event overhead is measured
and optionally subtracted, and the activity clock is used when its records cut cleanly (else events, with
the reason)."""

from __future__ import annotations

import pytest
from fakegpu import FakeGPU

from evokernel_mcp.benchmark import timing


@pytest.fixture
def fake(monkeypatch):
    return FakeGPU().install(monkeypatch)


def test_flush_outside_timed_region_and_rotation(fake):
    opt = timing.TimingOptions(min_reps=12, max_reps=12, warmup_ms=0, timer="events")
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
    opt = timing.TimingOptions(min_reps=20, max_time_s=60, target_rel_ci=0.01, warmup_ms=0, subtract_overhead=True,
                               timer="events")
    run = timing.time_device(fake.kernel, [(0,)], opt, device="fake", flusher=fake)
    assert run.stop_reason == "target_rel_ci" and len(run.times_ms) == 20  # constant times: CI width 0
    assert run.event_overhead_ms == pytest.approx(0.01) and run.overhead_subtracted
    assert all(t == pytest.approx(0.5) for t in run.times_ms)


def test_warm_cache_does_not_flush(fake):
    opt = timing.TimingOptions(cold_cache=False, min_reps=5, max_reps=5, warmup_ms=0)
    run = timing.time_device(fake.kernel, [(0,)], opt, device="fake")
    assert "flush" not in fake.log and run.flush_bytes is None and "warm cache" in run.method


def test_activity_clock_reads_kernel_time_without_event_cost(fake):
    fake.event_ms = 0.01  # events see kernel + 10 us; the kernel's own timestamps do not
    opt = timing.TimingOptions(min_reps=15, max_reps=15, warmup_ms=0)
    run = timing.time_device(fake.kernel, [(0,), (1,)], opt, device="fake", flusher=fake)
    assert run.timer == "activity" and "activity timestamps" in run.method and not run.overhead_subtracted
    assert len(run.times_ms) == 15 and all(t == pytest.approx(0.5) for t in run.times_ms)
    assert run.extra["event_median_ms"] == pytest.approx(0.51)
    assert "activity_timer_unused" not in run.extra


def test_activity_clock_refused_when_callable_launches_a_flush_named_kernel(fake):
    fake.event_ms = 0.01
    fake.kernel_name = "reduce_kernel<sum>"  # the candidate's kernel has our flush kernel's name
    opt = timing.TimingOptions(min_reps=5, max_reps=5, warmup_ms=0, subtract_overhead=True)
    run = timing.time_device(fake.kernel, [(0,)], opt, device="fake", flusher=fake)
    assert run.timer == "events" and "named like the harness" in run.extra["activity_timer_unused"]
    assert all(t == pytest.approx(0.5) for t in run.times_ms)  # events minus the measured empty pair


def test_events_timer_when_asked(fake):
    opt = timing.TimingOptions(min_reps=5, max_reps=5, warmup_ms=0, timer="events")
    run = timing.time_device(fake.kernel, [(0,)], opt, device="fake", flusher=fake)
    assert run.timer == "events" and run.extra["activity_timer_unused"] == "timer='events' was asked for"


def test_activity_clock_warm_cache_groups_by_launch_count(fake):
    opt = timing.TimingOptions(cold_cache=False, min_reps=6, max_reps=6, warmup_ms=0)
    run = timing.time_device(fake.kernel, [(0,)], opt, device="fake")
    assert run.timer == "activity" and len(run.times_ms) == 6


def test_unknown_timer_refused():
    from evokernel_mcp.errors import BadInput

    with pytest.raises(BadInput, match="timer"):
        timing.TimingOptions(timer="stopwatch")


def _failing_session(fake, fail_on: str):
    """Sessions work for the calibration (three of them); the timed loop's fails to start or to read."""
    made = []

    class Session:
        def __init__(self):
            self.s = fake.session()
            made.append(self)
            self.timed = len(made) > 3

        def __enter__(self):
            if self.timed and fail_on == "enter":
                raise RuntimeError("CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED")
            self.s.__enter__()
            return self

        def __exit__(self, *exc):
            return self.s.__exit__(*exc)

        def activities(self):
            if self.timed and fail_on == "read":
                raise RuntimeError("kineto: buffer lost")
            return self.s.activities()

    return Session


@pytest.mark.parametrize("fail_on, says", [("enter", "did not start"), ("read", "buffer lost")])
def test_profiler_that_fails_to_start_or_to_read_falls_back_to_events(fake, monkeypatch, fail_on, says):
    monkeypatch.setattr(timing, "_activity_session", _failing_session(fake, fail_on))
    opt = timing.TimingOptions(min_reps=5, max_reps=5, warmup_ms=0)
    run = timing.time_device(fake.kernel, [(0,)], opt, device="fake", flusher=fake)
    assert run.timer == "events" and says in run.extra["activity_timer_unused"]
    assert len(run.times_ms) == 5 and all(t == pytest.approx(0.5) for t in run.times_ms)
