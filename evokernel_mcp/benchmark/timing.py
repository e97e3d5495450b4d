"""The timing loop inside each arm's process (our code, never the candidate's). Returns raw times; the
runner and the server do the stats.

GPU method (CUDA and HIP through torch):
- warm-up calls first (compilation, autotuning, allocator and handle creation stay out of the numbers);
- cold cache: before every timed launch, a READ-ONLY pass over a buffer of max(2 x (L2 + Infinity Cache),
  256 MiB). The buffer is written once at set-up, so the caches then hold clean lines of an unrelated
  buffer and the previous repetition's dirty lines are written back during the flush, not during the timed
  launch (triton.testing.do_bench's zero-fill flush leaves dirty lines whose write-back the next kernel
  pays: +42 % on an 8 us kernel). Inputs are rotated among several copies when they would fit in cache;
- events tightly around the launch only (start recorded after the flush, end right after the launch);
- each batch of repetitions is queued behind a GPU sleep long enough that the host stays ahead of the
  device, so no host launch latency falls between the start event and the kernel;
- repetitions until the median's relative CI reaches target_rel_ci or max_time_s has passed (at least
  min_reps, at most max_reps); optional CUDA/HIP graph replay for launch-bound callables;
- the clock (timer="auto"): the device's own activity records of the timed loop (CUPTI / roctracer through
  torch.profiler, activity.py), one span per repetition from the callable's first kernel start to its last
  kernel end, the clock ncu's gpu__time_duration reads; the events still drive the stopping rule and are
  kept as a cross-check. Where the records cannot be cut cleanly (no profiler, a kernel named like our
  flush), the event times are used and the reason is reported (timer="events" forces that);
- with the event clock, the bare cost of an empty event pair (after a flush) is measured and reported, not
  subtracted unless asked (subtract_overhead).
CPU path (no GPU): time.perf_counter_ns around each call, labelled host timing, no cache flush.

Timer functions are bound when this module is imported (before any candidate is loaded), so a candidate
that patches torch.cuda.Event or time.perf_counter_ns later does not change our clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from evokernel_mcp.benchmark.flush import CacheFlusher
from evokernel_mcp.benchmark.stats import rel_ci_of
from evokernel_mcp.benchmark.warmup import _warm_up
from evokernel_mcp.errors import BadInput

_perf_ns = time.perf_counter_ns
_monotonic = time.monotonic
TIMERS = ("auto", "events")
_event_api: dict[str, Any] = {}


def bind_event_api() -> dict[str, Any]:
    """torch.cuda.Event and its methods, bound once (called at process start, before candidates load)."""
    if not _event_api:
        import torch

        ev = torch.cuda.Event
        _event_api.update(Event=ev, record=ev.record, elapsed=ev.elapsed_time, sync=torch.cuda.synchronize)
    return _event_api


@dataclass(frozen=True)
class TimingOptions:
    cold_cache: bool = True
    min_reps: int = 10
    max_reps: int = 20000
    max_time_s: float = 2.0
    target_rel_ci: float = 0.005
    confidence: float = 0.95
    warmup_ms: float = 25.0
    use_graph: bool = False
    subtract_overhead: bool = False
    timer: str = "auto"

    def __post_init__(self) -> None:
        if self.timer not in TIMERS:
            raise BadInput(f"timer = {self.timer!r}: one of {', '.join(TIMERS)}")
        if self.min_reps < 1:
            raise BadInput(f"min_reps = {self.min_reps}: at least 1 timed repetition is needed")
        if self.max_reps < self.min_reps:
            raise BadInput(f"max_reps = {self.max_reps} is below min_reps = {self.min_reps}")
        if not self.max_time_s > 0:
            raise BadInput(f"max_time_s = {self.max_time_s}: a time limit must be > 0 s")
        if not self.target_rel_ci > 0:
            raise BadInput(f"target_rel_ci = {self.target_rel_ci}: must be > 0 (e.g. 0.005 for +/-0.5 %)")
        if not 0 < self.confidence < 1:
            raise BadInput(f"confidence = {self.confidence}: must be between 0 and 1")
        if self.warmup_ms < 0:
            raise BadInput(f"warmup_ms = {self.warmup_ms}: must be >= 0")


@dataclass
class TimingRun:
    times_ms: list[float]
    method: str
    host_timing: bool
    warmup_calls: int
    copies: int
    stop_reason: str
    flush_bytes: int | None = None
    event_overhead_ms: float | None = None
    overhead_subtracted: bool = False
    timer: str = "host"
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        keys = ("times_ms", "method", "host_timing", "warmup_calls", "copies", "stop_reason", "flush_bytes",
                "event_overhead_ms", "overhead_subtracted", "timer", "extra")
        return {k: getattr(self, k) for k in keys}


def _stop(times: Sequence[float], opt: TimingOptions, t0: float) -> str | None:
    n = len(times)
    if n < opt.min_reps:
        return None
    if n >= opt.max_reps:
        return "max_reps"
    if _monotonic() - t0 >= opt.max_time_s:
        return "max_time_s"
    if rel_ci_of(times, opt.confidence) <= opt.target_rel_ci:
        return "target_rel_ci"
    return None


MAX_BATCH = 2000  # launches queued per batch behind one GPU-sleep cushion


def _next_batch(done: int, opt: TimingOptions, per_rep_s: float, t0: float) -> int:
    if done < opt.min_reps:
        return opt.min_reps - done
    left_s = max(opt.max_time_s - (_monotonic() - t0), 0.0)
    want = int(left_s / max(per_rep_s, 1e-7) / 4) if per_rep_s > 0 else 16
    return max(1, min(want, max(done // 2, 8), opt.max_reps - done, MAX_BATCH))


# ----------------------------------------------------------------------------------------- CPU (host)
def time_host(fn: Callable[..., Any], arg_sets: Sequence[tuple], opt: TimingOptions,
              progress: Callable[[float, str], None] | None = None) -> TimingRun:
    """Host wall-clock timing (no GPU): perf_counter_ns around each call."""
    if not arg_sets:
        raise BadInput("no input sets to time with")
    warm, w0 = 0, _perf_ns()
    while warm < 1 or (_perf_ns() - w0) / 1e6 < opt.warmup_ms and warm < 100:
        fn(*arg_sets[warm % len(arg_sets)])
        warm += 1
    times: list[float] = []
    t0 = _monotonic()
    while True:
        i = len(times)
        a = arg_sets[i % len(arg_sets)]
        s = _perf_ns()
        fn(*a)
        times.append((_perf_ns() - s) / 1e6)
        reason = _stop(times, opt, t0) if len(times) >= opt.min_reps else None
        if reason:
            break
        if progress and len(times) % 50 == 0:
            progress(min(len(times) / max(opt.min_reps, 1), 1.0), f"{len(times)} reps")
    return TimingRun(times, "host wall clock (time.perf_counter_ns) around each call; no cache flush; "
                     "CPU path: NOT device time", True, warm, len(arg_sets), reason)


# ----------------------------------------------------------------------------------------- GPU
def sleep_cycles_per_ms(api: dict[str, Any]) -> float | None:
    """Calibrate torch.cuda._sleep (cycles) against events; None when this torch build has no _sleep."""
    import torch

    if not callable(getattr(torch.cuda, "_sleep", None)):
        return None
    s, e = api["Event"](enable_timing=True), api["Event"](enable_timing=True)
    torch.cuda._sleep(1000)
    api["record"](s)
    torch.cuda._sleep(2_000_000)
    api["record"](e)
    api["sync"]()
    ms = api["elapsed"](s, e)
    return 2_000_000 / ms if ms > 0 else 1.5e6


def _make_graphs(fn: Callable[..., Any], arg_sets: Sequence[tuple]) -> list[Callable[[], Any]]:
    import torch

    calls = []
    for a in arg_sets:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn(*a)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn(*a)
        calls.append(g.replay)
    return calls


_activity_session: Any = None  # tests inject a fake; None = activity.TorchActivity


def time_device(fn: Callable[..., Any], arg_sets: Sequence[tuple], opt: TimingOptions, device: Any = None,
                progress: Callable[[float, str], None] | None = None, flusher: CacheFlusher | None = None) -> TimingRun:
    """Device timing of fn(*args) with the method in the module docstring."""
    import torch

    if not arg_sets:
        raise BadInput("no input sets to time with")
    api = bind_event_api()
    device = device if device is not None else torch.device("cuda", torch.cuda.current_device())
    if opt.cold_cache and flusher is None:
        flusher = CacheFlusher(device)
    calls = [(lambda a=a: fn(*a)) for a in arg_sets]
    warm, w0 = _warm_up(calls, opt, api)
    if opt.use_graph:
        calls = _make_graphs(fn, arg_sets)
    api["sync"]()
    host_per_rep_s = w0
    cycles_per_ms = sleep_cycles_per_ms(api)
    overhead = event_overhead_ms(flusher, api, 50)
    plan, why_not = _activity_plan(calls, flusher, cycles_per_ms, api) if opt.timer == "auto" else (
        None, "timer='events' was asked for")
    failure: Any = why_not
    times: list[float] = []
    session = None
    t0 = _monotonic()
    reason = None
    per_rep_s = host_per_rep_s
    if plan is not None:
        try:
            session = (_activity_session or _torch_activity)()
            session.__enter__()
        except Exception as e:  # noqa: BLE001 - e.g. CUPTI held by another profiler: events instead
            if _is_device_error(e):
                raise
            plan, session, why_not = None, None, f"the profiler did not start: {type(e).__name__}: {str(e)[:200]}"
    try:
        while reason is None:
            n = _next_batch(len(times), opt, per_rep_s, t0)
            b0 = _monotonic()
            times += timed_batch(calls, len(times), n, flusher, api, cycles_per_ms, host_per_rep_s)
            per_rep_s = (_monotonic() - b0) / n
            reason = _stop(times, opt, t0)
            if progress:
                progress(min(len(times) / opt.min_reps, 1.0), f"{len(times)} reps, {_monotonic() - t0:.1f} s")
    finally:
        if session is not None:
            session.__exit__(None, None, None)
    extra: dict[str, Any] = {"flush_size_source": flusher.source if flusher else None,
                             "host_enqueue_us_per_rep": host_per_rep_s * 1e6}
    timer = "events"
    if plan is not None:
        from evokernel_mcp.benchmark import activity

        try:
            spans = activity.spans_ms(session.activities(), plan, len(times))
        except Exception as e:  # noqa: BLE001 - unreadable records: the event times stand
            if _is_device_error(e):
                raise
            spans = f"{type(e).__name__}: {str(e)[:200]}"
        if isinstance(spans, str):
            failure = spans
            why_not = f"activity records did not cut into repetitions: {spans}"
        else:
            extra["event_median_ms"] = sorted(times)[len(times) // 2]
            times, timer = spans, "activity"
    if why_not:
        extra["activity_timer_unused"] = why_not
    extra.update(window_marks(plan, failure))
    subtract = timer == "events" and opt.subtract_overhead and bool(overhead)
    if subtract:
        times = [max(t - overhead, 0.0) for t in times]
    clock = ("device activity timestamps (CUPTI/roctracer via torch.profiler): first kernel start to last kernel "
             "end of each call; events drive the stopping rule" if timer == "activity"
             else "device events (torch.cuda.Event) around each launch")
    method = (clock
              + (", CUDA/HIP graph replay" if opt.use_graph else "")
              + (f"; cold cache: read-only pass over {flusher.nbytes >> 20} MiB before each launch"
                 if flusher else "; warm cache (no flush)")
              + f"; {len(arg_sets)} rotated input set(s)"
              + ("; batches queued behind a GPU sleep (host ahead of device)" if cycles_per_ms else
                 "; no GPU sleep available: host launch gaps may be included")
              + ("; empty-event overhead subtracted" if subtract else ""))
    return TimingRun(times, method, False, warm, len(arg_sets), reason,
                     flush_bytes=flusher.nbytes if flusher else None, event_overhead_ms=overhead,
                     overhead_subtracted=subtract, timer=timer, extra=extra)


def prime_activity() -> str | None:
    """Open and close one empty profiler session (CUPTI / roctracer start-up, ~4 s the first time); None if it
    works, else why not."""
    try:
        with _torch_activity() as s:
            pass
        s.activities()
        return None
    except Exception as e:  # noqa: BLE001 - the activity clock then falls back to events, saying why
        return f"{type(e).__name__}: {str(e)[:200]}"


def _torch_activity() -> Any:
    from evokernel_mcp.benchmark.activity import TorchActivity

    return TorchActivity()


def _activity_plan(calls: Sequence[Callable[[], Any]], flusher: CacheFlusher | None, cycles_per_ms: float | None,
                   api: dict[str, Any]) -> tuple[Any, str | None]:
    """(Plan, None) when the activity clock can time these calls, else (None, why not)."""
    from evokernel_mcp.benchmark import activity

    sleep = None
    if cycles_per_ms:
        import torch

        sleep = lambda: torch.cuda._sleep(int(0.01 * cycles_per_ms))  # noqa: E731 - the cushion's kernel
    try:
        plan = activity.calibrate(_activity_session or _torch_activity, calls, flusher.flush if flusher else None,
                                  sleep, api["sync"])
    except Exception as e:  # noqa: BLE001 - no profiler / CUPTI busy (e.g. under ncu): events instead
        if _is_device_error(e):
            raise
        return None, f"the profiler could not record device activity: {type(e).__name__}: {str(e)[:200]}"
    if isinstance(plan, str):
        return None, plan
    return plan, None


def _is_device_error(e: BaseException) -> bool:
    from evokernel_mcp.runtime import protocol

    return bool(protocol.classify_text(f"{type(e).__name__}: {e}"))


def event_overhead_ms(flusher: CacheFlusher | None, api: dict[str, Any], n: int) -> float:
    ev = api["Event"]
    pairs = [(ev(enable_timing=True), ev(enable_timing=True)) for _ in range(n)]
    for s, e in pairs:
        if flusher:
            flusher.flush()
        api["record"](s)
        api["record"](e)
    api["sync"]()
    vals = sorted(api["elapsed"](s, e) for s, e in pairs)
    return vals[len(vals) // 2]


def cushion_ms(n: int, host_per_rep_s: float) -> float:
    """The GPU sleep queued before a batch of n launches: twice the host's time to queue them (plus 20 us a
    launch), 0.2-200 ms, so the host stays ahead of the device."""
    return min(max(2 * n * (host_per_rep_s + 20e-6) * 1e3, 0.2), 200.0)


def timed_batch(calls: Sequence[Callable[[], Any]], start: int, n: int, flusher: CacheFlusher | None,
                 api: dict[str, Any], cycles_per_ms: float | None, host_per_rep_s: float,
                 cushion: float | None = None, after: Callable[[int], None] | None = None,
                 separator: Callable[[], None] | None = None) -> list[float]:
    """n timed repetitions queued behind one GPU sleep (`cushion` ms when given: the runner gives every arm of
    a round the same one, so the arms' blocks hold the same harness work), synchronised at the end.
    after(g): the harness's check of repetition g's output, queued after its end event (outside the events'
    window) and, with `separator` (a short GPU sleep: the activity clock's separator kernel), between two of
    them: the first closes the repetition's span in the activity records, the second the harness's check
    (activity.spans_ms with checks=True)."""
    import torch

    ev = api["Event"]
    starts = [ev(enable_timing=True) for _ in range(n)]
    ends = [ev(enable_timing=True) for _ in range(n)]
    # keep the device busy while the host queues the batch (host ahead => no launch gap inside a timing)
    if cycles_per_ms:
        ms = cushion if cushion is not None else cushion_ms(n, host_per_rep_s)
        torch.cuda._sleep(int(ms * cycles_per_ms))
    for i in range(n):
        if flusher:
            flusher.flush()
        api["record"](starts[i])
        calls[(start + i) % len(calls)]()
        api["record"](ends[i])
        if after is not None:
            if separator is not None:
                separator()
            after(start + i)
            if separator is not None:
                separator()
    api["sync"]()
    return [api["elapsed"](s, e) for s, e in zip(starts, ends)]


def window_marks(plan: Any, failure: Any) -> dict[str, str]:
    """The verdict's keys (verdict.py) for a series: outside_window / no_device_work / activity_cut_failed,
    from the calibration plan and the activity clock's failure (an activity.CutFailure carries its kind).
    A profiler that is merely unavailable (a plain str) marks nothing: the event clock then stands."""
    marks: dict[str, str] = {}
    if plan is not None and getattr(plan, "outside_window", None):
        marks["outside_window"] = plan.outside_window
    key = {"outside_window": "outside_window", "no_device_work": "no_device_work",
           "cut": "activity_cut_failed"}.get(getattr(failure, "kind", None) or "")
    if key:
        marks.setdefault(key, str(failure))
    return marks
