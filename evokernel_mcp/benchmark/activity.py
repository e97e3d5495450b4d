"""Kernel times from the device's own activity records (CUPTI on CUDA, roctracer / rocprofiler-sdk on ROCm,
both reached through kineto, torch.autograd.profiler): the start and end timestamps the GPU writes for each
kernel, memset and copy, the same kind of clock that ncu's gpu__time_duration reads. Device events, by
contrast, also count the front end's work to start the kernel (about 1 us on an H200), which is a large
share of an 8 us kernel.

This module has one job: record the activities of a timed loop and cut them into one span per
repetition. A repetition is [flush kernel(s)] + [the callable's device work]; its time is the span from
the first start to the last end of the callable's work (so a multi-kernel callable is charged for the
gaps between its kernels too). The cut is by kernel name: the flush and the GPU-sleep cushion are
recognised from a calibration run, and if the callable launches a kernel with one of those names, or
the counts do not add up, the caller falls back to events and says why. Work the callable forks onto
other streams counts when it is joined back (it ends before our next kernel on the timed stream starts,
as cuDNN's grouped convolutions do); work still running then is outside the window (`unjoined`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Act = tuple  # (name, start_ns, end_ns[, stream]) of one device activity; the stream id when the records have it


class CutFailure(str):
    """Why the records cannot time the calls (a str, so callers that only report it keep working), with a
    kind the verdict reads: 'outside_window' (the call's device work is on another stream or outside its
    repetition), 'no_device_work' (none seen for the call), 'cut' (other count / name mismatches)."""

    kind: str = "cut"

    def __new__(cls, text: str, kind: str = "cut") -> CutFailure:
        obj = super().__new__(cls, text)
        obj.kind = kind
        return obj


class TorchActivity:
    """A kineto session recording device activities only (no CPU ops, no stacks): torch.autograd.profiler's
    profile, the session torch.profiler.profile wraps. The wrapper's first session also imports torch._inductor
    and torch._dynamo (1.8 s on a quiet CPU, more on a busy host; it rebinds torch.manual_seed) only to read a
    cudagraphs setting, and asks torch.distributed for trace metadata: seconds of every timed arm's start."""

    def __init__(self) -> None:
        from torch.autograd.profiler import profile

        self._prof = profile(use_cpu=False, use_device="cuda", use_kineto=True)  # HIP on ROCm builds as well

    def __enter__(self) -> TorchActivity:
        self._prof.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._prof.__exit__(*exc)

    def activities(self) -> list[Act]:
        from torch.autograd import DeviceType

        events = self._prof.kineto_results.events()
        acts = [(e.name(), int(e.start_ns()), int(e.end_ns()), _stream(e)) for e in events
                if e.device_type() != DeviceType.CPU]
        return sorted(acts, key=lambda a: (a[1], a[2]))


SessionFactory = Callable[[], Any]  # returns a context manager with .activities() -> list[Act]


@dataclass(frozen=True)
class Plan:
    """What the calibration learned: the names that are ours, and the callable's launches per call."""

    flush_names: frozenset[str]
    flush_count: int
    separator_names: frozenset[str]
    per_call: int | None  # device activities per call of the callable; None if it varies
    outside_window: str | None = None  # the callable's work outside its window (a side stream not joined): why
    timed_streams: frozenset[int] = frozenset()  # where the harness's own flush / sleep kernels ran
    side_streams: str | None = None  # the call forks work onto other streams and joins it back (cuDNN does)


def _record(session: SessionFactory, ops: Sequence[Callable[[], Any]], sync: Callable[[], None]) -> list[Act]:
    with session() as s:
        for op in ops:
            op()
        sync()
    return s.activities()


def calibrate(session: SessionFactory, calls: Sequence[Callable[[], Any]], flush: Callable[[], Any] | None,
              sleep: Callable[[], Any] | None, sync: Callable[[], None]) -> Plan | str:
    """Run the flush, the sleep and two calls under the profiler; a Plan, or why the activity timer cannot
    be used for these calls (the reason is reported to the user)."""
    flush_names: frozenset[str] = frozenset()
    flush_count = 0
    fa: list[Act] = []
    if flush is not None:
        fa = _record(session, [flush, flush], sync)
        if not fa or len(fa) % 2:
            return f"the profiler saw {len(fa)} device activities for 2 cache flushes (expected an even number > 0)"
        flush_names, flush_count = frozenset(a[0] for a in fa), len(fa) // 2
    sa = _record(session, [sleep], sync) if sleep is not None else []
    seps = frozenset(a[0] for a in sa)
    ca = _record(session, [calls[0], calls[1 % len(calls)]], sync)
    if not ca:
        return CutFailure("the profiler saw no device activity for the callable (host-only work, or no activity "
                          "records)", "no_device_work")
    clash = {a[0] for a in ca} & (flush_names | seps)
    if clash:
        return f"the callable launches a kernel named like the harness's own ({sorted(clash)[0][:80]})"
    timed = frozenset(_streams(fa) | _streams(sa))
    side = side_stream_work(ca, timed)
    outside = None
    if side:  # forked work is fine when the call joins it back before returning: the next kernel the
        boundary = flush if flush is not None else sleep  # harness queues on the timed stream waits for it
        if boundary is None:
            outside = side
        else:
            raw = _record(session, [calls[0], boundary, calls[1 % len(calls)], boundary], sync)
            outside = unjoined(raw, timed, flush_names | seps)
    return Plan(flush_names, flush_count, seps, len(ca) // 2 if len(ca) % 2 == 0 else None, outside, timed, side)


def unjoined(acts: Sequence[Act], timed: frozenset[int], ours: frozenset[str], tail_ok: bool = False) -> str | None:
    """Why some work on another stream is not joined back to the timed stream, or None: each such activity
    must end before the next of our own kernels (queued on the timed stream after the call) starts.
    tail_ok: activities after the last of ours pass (a timed loop ends with a call, not with our kernel)."""
    import bisect

    acts = sorted(acts, key=lambda a: (a[1], a[2]))
    starts = [a[1] for a in acts if a[0] in ours and _stream_of(a) in timed]  # sorted: acts are
    for a in acts:
        if _stream_of(a) is None or _stream_of(a) in timed:
            continue
        j = bisect.bisect_left(starts, a[1])  # our first kernel starting at or after this activity
        if j == len(starts) and tail_ok:
            continue
        if j == len(starts) or a[2] > starts[j]:
            return (f"device work ({a[0][:60]}) on stream {_stream_of(a)} was still running when the next "
                    f"repetition's first kernel started on the timed stream {sorted(timed)}: the call does not "
                    "wait for it before returning")
    return None


def spans_ms(acts: Sequence[Act], plan: Plan, n: int, checks: bool = False) -> list[float] | str:
    """One span (ms) per repetition from the activities of a timed loop, or why they do not cut cleanly.

    With a flush: each run of flush_count flush activities opens a repetition, a separator (the
    GPU-sleep cushion) closes one, anything else belongs to the open repetition. Without a flush (warm
    cache): the callable's activities in groups of per_call.
    checks: the harness queued its check of each output (copies, reductions) on the timed stream between two
    separators, the first closing the repetition (timing.timed_batch's `after`): work on a timed stream
    between them is the harness's own and belongs to no repetition, whatever its kernels' names (a float32
    sum shares the flush's). The call's own work on the timed stream cannot land there (stream order); its
    work on other streams still counts as outside the window. Needs the flush and the records' stream ids."""
    if checks and not (plan.flush_count and plan.timed_streams):
        return "the harness's checks between repetitions need a cache flush and the records' stream ids"
    acts = sorted(acts, key=lambda a: (a[1], a[2]))
    if plan.timed_streams and plan.side_streams:
        late = unjoined(acts, plan.timed_streams, plan.flush_names | plan.separator_names, tail_ok=True)
        if late:
            return CutFailure(late, "outside_window")
    if plan.flush_count:
        groups: list[list[Act]] = []
        open_, checking = False, False
        i = 0
        while i < len(acts):
            name = acts[i][0]
            if checking and name not in plan.separator_names and _stream_of(acts[i]) in plan.timed_streams:
                i += 1  # the harness's check of the repetition just closed (its kernels may share the flush's name)
                continue
            if name in plan.flush_names:
                j = i
                while j < len(acts) and j - i < plan.flush_count and acts[j][0] in plan.flush_names:
                    j += 1
                if j - i != plan.flush_count:
                    return f"a cache flush showed {j - i} activities, calibration said {plan.flush_count}"
                groups.append([])
                open_, i = True, j
                continue
            if name in plan.separator_names:  # with checks: the separator closing a repetition opens its
                checking, open_ = checks and open_, False  # checks, the next one closes them
            elif not open_:
                return CutFailure(f"device work ({name[:60]}, stream {_stream_of(acts[i])}) outside any repetition "
                                  f"(after the timed window); before it: {_context(acts, i)}", "outside_window")
            else:
                groups[-1].append(acts[i])
            i += 1
    else:
        work = [a for a in acts if a[0] not in plan.separator_names]
        k = plan.per_call
        if not k or len(work) != n * k:
            return (f"{len(work)} device activities for {n} repetitions; the callable's launch count per call "
                    f"is {'not constant' if not k else k}")
        groups = [work[r * k:(r + 1) * k] for r in range(n)]
    if len(groups) != n:
        return f"{len(groups)} repetitions in the activity records, {n} timed"
    empty = sum(1 for g in groups if not g)
    if empty:
        return f"{empty} repetition(s) with no device activity"
    return [(max(a[2] for a in g) - min(a[1] for a in g)) / 1e6 for g in groups]


def _stream_of(a: Act) -> Any:
    return a[3] if len(a) > 3 else None


def _context(acts: Sequence[Act], i: int, n: int = 3) -> str:
    """The n activities before acts[i] (name, stream, start relative to acts[i] in us): evidence for a person."""
    return "; ".join(f"{a[0][:40]} (stream {_stream_of(a)}, {(a[1] - acts[i][1]) / 1e3:+.1f} us)"
                     for a in acts[max(0, i - n):i]) or "nothing"


def _stream(e: Any) -> int | None:
    try:
        return int(e.device_resource_id())
    except Exception:  # noqa: BLE001 - a torch build without it: no stream check
        return None


def _streams(acts: Sequence[Act]) -> set[int]:
    return {a[3] for a in acts if len(a) > 3 and a[3] is not None}


def side_stream_work(call_acts: Sequence[Act], timed_streams: set[int]) -> str | None:
    """Why the callable's device work is not all on the timed stream (the stream the harness's own flush /
    sleep kernels ran on), or None. Work on another stream that the call does not join back runs outside
    the events' window and can outlast it (`with torch.cuda.stream(s): return a @ b`)."""
    if not timed_streams:
        return None
    other = [a for a in call_acts if len(a) > 3 and a[3] is not None and a[3] not in timed_streams]
    if not other:
        return None
    return (f"{len(other)} of {len(call_acts)} device activities of the call ran on stream(s) "
            f"{sorted({a[3] for a in other})}, not the timed stream {sorted(timed_streams)} ({other[0][0][:60]})")
