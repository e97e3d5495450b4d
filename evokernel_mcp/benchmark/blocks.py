"""One arm's side of interleaved timing (interleave.py), inside that arm's process: time a block of k
repetitions on request, with the method of timing.py (cold-cache flush, rotated inputs, activity clock
with events behind it; host clock on the CPU path).

Host path (per repetition, probes.py): before each repetition, outside its timed window, its input set is
refilled with the next input content (same addresses, new values, new version counters); after it, also
outside the window, its output is probed at the runner's positions and by chunk sums. Every arm does the
same work.
GPU path: after each repetition, outside its timed window, the next repetition's input set is refilled
with its content (the pool's contents, probes.gpu_content_of; the block's first before the profiler starts),
so no two repetitions in a row see the same values; with fewer than two pool contents the sets are refilled
between blocks instead (settle.refill_inputs). Every timed repetition's output is reduced to chunk sums
(probes.Prober without positions: nothing is chosen before the block) on the device, right after the
repetition and before the next one can overwrite a reused output buffer. The checks and the refill are
queued after the repetition's end event (outside the events' window) and, under the activity clock, between
two short GPU sleeps (the first closes the repetition's span), so the records put the harness's work in no
repetition (activity.spans_ms, checks=True). Every arm does the same. The rows stay on the device until the
profiler's session has closed (finish_block). Off (report's probes_unreadable says why) for graph replays
(no output to read) and, under the activity clock, without a cache flush, a GPU sleep or stream ids.

On a GPU a block runs in two requests: run_block (the repetitions run to completion, the device synchronised:
the runner's clock around the block stops at its answer) and finish_block (the profiler's records cut into
times), so work that grows with the candidate's kernel count stays off the runner's clock.

Then the block's LAST repetition (its output and the inputs it used) is offered to a seeded reservoir
(settle.OutputSampler) for the runner's full check. `report()` returns the sampled outputs, the verdict's
marks (timing.window_marks) and the method, for the runner. Every time this process reports is a claim:
the runner holds it against its own clock around the block (bound.runner_bound).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from evokernel_mcp.benchmark import probes, settle, timing, warmup
from evokernel_mcp.benchmark.timing import TimingOptions

ENQUEUE_PROBES = 4  # calls (with their checks) whose host enqueue cost sizes the GPU sleep ahead of a block


class BlockTimer:
    def __init__(self, fn: Callable[..., Any], arg_sets: Sequence[tuple], opt: TimingOptions, *, gpu: bool,
                 refill_pool: Sequence[Sequence[Any]] = (), sample_size: int = 4, seed: int = 0,
                 flusher: Any = None, probe_table: Sequence[Sequence[int]] | None = None,
                 probe_chunks: Sequence[int] | None = None) -> None:
        if not arg_sets:
            raise ValueError("no input sets to time with")
        self.fn, self.arg_sets, self.opt, self.gpu = fn, list(arg_sets), opt, gpu
        self.pool, self.flusher = list(refill_pool), flusher
        # every repetition on new input content. Host: the timed case's inputs, then the pool's (content 0..).
        # GPU: the pool's contents (1..; probes.gpu_content_of), at least two, so consecutive repetitions of one
        # input set never hold the same values (an output left in freed memory, or cached by address and version,
        # is then the answer to other inputs); with one pool set the sets are refilled between blocks only.
        if not gpu:
            self.contents = ([settle.clone_inputs(self.arg_sets[0])] + self.pool) if self.pool else []
        else:
            self.contents = list(self.pool) if len(self.pool) >= 2 else []
        self._block_end = 0
        # the GPU path reads no positions (the runner chooses nothing before the block): chunk sums only
        wanted = probe_chunks if gpu else probe_table
        self.prober = probes.Prober(None if gpu else probe_table, probe_chunks) if wanted else None
        self.probes_off: str | None = None  # why the GPU path cannot check every repetition here
        self.block_probes: Any = None
        self.sampler = settle.OutputSampler(sample_size, seed)
        self.rep, self.block, self.last = 0, 0, None
        self.calls = [self._call_of(a) for a in self.arg_sets]
        self.plan: Any = None
        self.failure: Any = None
        self.marks: dict[str, str] = {}
        self.timer = "host" if not gpu else "events"
        self.warmup_calls = 0
        self.api: dict[str, Any] = timing.bind_event_api() if gpu else {"sync": lambda: None}
        self.cycles_per_ms: float | None = None
        self.host_per_rep_s = 0.0
        self.host_enqueue_s: float | None = None
        self._pending: Any = None
        self.lean = False  # a big shape's arm on a GPU: its device memory goes back between blocks (give_back, ready)
        self.parked: list[tuple[Any, Any, Any]] | None = None  # (tensor, host buffer, device) while parked
        self._host_bufs: dict[int, Any] = {}  # host buffers kept for the next park (pinned where it can)

    def _call_of(self, a: tuple) -> Callable[[], None]:
        def call() -> None:
            self.last = None  # the last output goes before the next call: an arm holds one output, not two
            self.last = self.fn(*a)
        return call

    def warm_up(self) -> int:
        """Warm up by time (warmup.warm_up_by_time), then (GPU) calibrate the activity clock once."""
        n, per_call = warmup.warm_up_by_time(self.calls, warmup.warmup_budget_s(self.opt), self.api["sync"])
        self.warmup_calls, self.host_per_rep_s = n, per_call
        if self.gpu:
            self.cycles_per_ms = timing.sleep_cycles_per_ms(self.api)
            if self.opt.timer == "auto":
                self.plan, self.failure = timing._activity_plan(self.calls, self.flusher, self.cycles_per_ms,
                                                                self.api)
            self.marks.update(timing.window_marks(self.plan, self.failure))
            self._gpu_checks_or_why_not()
            check, sep = self._check_and_separator()
            if self.prober is not None:
                self.prober.begin()
            per = []  # the host's cost of one enqueue, its check and refill, without waiting for the device
            self._block_end = ENQUEUE_PROBES
            for i in range(ENQUEUE_PROBES):
                h0 = timing._perf_ns()
                self.calls[i % len(self.calls)]()
                if check is not None:  # as timing.timed_batch queues it
                    if sep is not None:
                        sep()
                    check(i)
                    if sep is not None:
                        sep()
                per.append((timing._perf_ns() - h0) / 1e9)
            # the median after the first: a check's first launches load their kernels (milliseconds each), and
            # the common GPU sleep of every block is sized from this figure (bound.common_host_per_rep)
            self.host_enqueue_s = sorted(per[1:])[len(per[1:]) // 2]
            self.api["sync"]()
            if self.prober is not None:
                self.prober.end()
            self.last, self.warmup_calls, self._block_end = None, n + ENQUEUE_PROBES, 0
        return self.warmup_calls

    def _check_and_separator(self) -> tuple[Any, Any]:
        """timing.timed_batch's `after` and `separator` for this arm's GPU blocks (None, None: no harness work
        between repetitions)."""
        if self.prober is None and not self.contents:
            return None, None
        return self._check, (self._separator if self.plan is not None else None)

    def _check(self, g: int) -> None:
        """After repetition g (between separators: in no repetition's records): its output's chunk sums, then
        the next repetition's input set refilled with its content."""
        if self.prober is not None and self.last is not None:
            self.prober.take(self.last, g)
        if self.contents and g + 1 < self._block_end:
            self._fill(g + 1)

    def _fill(self, g: int) -> None:
        n = len(self.arg_sets)
        settle.fill_set(self.arg_sets[g % n], self.contents[probes.content_of(g, n, len(self.contents))])

    def _gpu_checks_or_why_not(self) -> None:
        """Keep the per-repetition checks on the GPU only where they stay out of every repetition's time."""
        if self.prober is None:
            return
        why = None
        if self.opt.use_graph:
            why = "graph replays return no output to check per repetition"
        elif self.plan is not None and not (self.plan.flush_count and self.plan.timed_streams and self.cycles_per_ms):
            why = ("the activity clock cannot set the harness's checks apart from the repetitions here (they need "
                   "a cache flush, a GPU sleep and the records' stream ids)")
        if why:
            self.prober, self.probes_off = None, why
            self.contents = []  # the input sets are refilled between blocks instead

    def _separator(self) -> None:
        import torch

        torch.cuda._sleep(max(1, int(0.001 * (self.cycles_per_ms or 0))))  # ~1 us: the activity clock's separator

    def give_back(self) -> None:
        """A lean arm between its blocks: what its allocator caches (the outputs and working memory of the
        repetitions) and its cold-cache flush buffer (256 MiB on an H100) go back to the device, so that the other
        arms' blocks, and the checks after timing, run beside its inputs alone."""
        if self.lean:
            import torch

            self.last = None
            if self.flusher is not None:
                self.flusher.release()
            torch.cuda.empty_cache()

    def park(self) -> None:
        """A lean arm whose turn has passed, where the arms do not fit the device together (devplan.plan_benchmark:
        park_idle_arms): its input sets and refill pool wait in host memory and their device storage goes back,
        so the next arm's block runs beside none of this arm's data. The tensors stay the same objects (their
        storage swapped), so every call, sampler and check that holds them sees them back on unpark."""
        if not self.lean or self.parked is not None:
            return
        import torch

        self.last, parked = None, []
        if self.flusher is not None:
            self.flusher.release()
        for t in self._own_tensors():
            buf = self._host_bufs.get(id(t))
            if buf is None:
                buf = self._host_bufs[id(t)] = _host_like(t)
            buf.copy_(t.data)
            parked.append((t, buf, t.device))
            t.data = buf
        self.parked = parked
        torch.cuda.empty_cache()

    def unpark(self) -> None:
        """The parked data back on the device (new storage, same tensors), before this arm's next block."""
        parked, self.parked = self.parked, None
        for t, buf, dev in parked or ():
            t.data = buf.to(dev)

    def _own_tensors(self) -> list[Any]:
        import torch

        seen: dict[int, Any] = {}
        for group in (*self.arg_sets, *self.pool, *self.contents):
            for t in group:
                if isinstance(t, torch.Tensor):
                    seen.setdefault(id(t), t)
        return list(seen.values())

    def ready(self) -> None:
        """A lean arm before its block: its parked data back (unpark), then one untimed call makes the
        allocations that give_back returned (the flush buffer too), so no timed repetition pays for them; its output
        goes before the block's first call."""
        self.unpark()
        if self.lean:
            if self.flusher is not None:
                self.flusher.restore()
            self.calls[self.rep % len(self.calls)]()
            self.api["sync"]()

    def time_block(self, k: int, cushion_ms: float | None = None) -> list[float]:
        """Times (ms) of k repetitions: refill, time, offer the last repetition to the sampler."""
        self.run_block(k, cushion_ms)
        return self.finish_block()

    def run_block(self, k: int, cushion_ms: float | None = None) -> None:
        """Run k timed repetitions to completion (device synchronised); their times wait for finish_block. The
        runner's clock around a block ends here on a GPU: cutting the profiler's records into spans is harness
        work that grows with the candidate's kernel count, so it stays out of the bound (runner_side)."""
        start = self.rep
        if self.block and not self.contents:
            settle.refill_inputs(self.arg_sets, self.pool, self.block)
        elif self.gpu and self.contents:  # the block's first repetition's content, before the profiler starts
            self._block_end = start + k
            self._fill(start)
        raw = self._device_run(start, k, cushion_ms) if self.gpu else self._host_block(start, k)
        self._pending = (start, k, raw)

    def finish_block(self) -> list[float]:
        pending, self._pending = self._pending, None
        if pending is None:
            raise RuntimeError("no block was run")
        start, k, raw = pending
        times = self._device_times(raw, k) if self.gpu else raw
        if self.gpu:
            self.block_probes = self.prober.end() if self.prober is not None else None
        j = (start + k - 1) % len(self.arg_sets)
        if self.last is not None:  # graph replays return nothing to sample
            self.sampler.offer(start + k - 1, j, self.arg_sets[j], self.last)
        self.rep, self.block, self.last = self.rep + k, self.block + 1, None
        return times

    def _host_block(self, start: int, k: int) -> list[float]:
        import torch

        out, n = [], len(self.calls)
        fill, probe = bool(self.contents), self.prober
        if probe is not None:
            probe.begin()
        with torch.no_grad():
            for i in range(k):
                g = start + i
                if fill:
                    settle.fill_set(self.arg_sets[g % n], self.contents[probes.content_of(g, n, len(self.contents))])
                call = self.calls[g % n]
                s = timing._perf_ns()
                call()
                out.append((timing._perf_ns() - s) / 1e6)
                if probe is not None:
                    probe.take(self.last, g)
        self.block_probes = probe.end() if probe is not None else None
        return out

    def _device_run(self, start: int, k: int, cushion_ms: float | None) -> tuple[Any, list[float]]:
        import torch

        session = (timing._activity_session or timing._torch_activity)() if self.plan is not None else None
        if session is not None:
            session.__enter__()
        try:
            check, sep = self._check_and_separator()
            if self.prober is not None:
                self.prober.begin()
            with torch.no_grad():
                ev = timing.timed_batch(self.calls, start, k, self.flusher, self.api, self.cycles_per_ms,
                                         self.host_per_rep_s, cushion_ms, after=check, separator=sep)
            # the rows stay on the device until finish_block has closed the profiler's session: gathering
            # them here would put the harness's copies after the last separator, outside every repetition
        except BaseException:
            if session is not None:
                session.__exit__(None, None, None)
            raise
        return session, ev

    def _device_times(self, raw: tuple[Any, list[float]], k: int) -> list[float]:
        from evokernel_mcp.benchmark import activity

        session, ev = raw
        if session is None:
            return ev
        session.__exit__(None, None, None)
        spans = activity.spans_ms(session.activities(), self.plan, k,
                                  checks=self.prober is not None or bool(self.contents))
        if isinstance(spans, str):  # the block's records did not cut: events for this run from now on
            self.failure, self.plan = spans, None
            self.marks.update(timing.window_marks(None, spans))
            return ev
        self.timer = "activity"
        return spans

    def report(self) -> dict[str, Any]:
        """What the runner needs besides the times: sampled outputs, verdict marks, how it was timed."""
        return {"samples": self.sampler.samples, "offered": self.sampler.seen, "marks": dict(self.marks),
                "timer": self.timer, "warmup_calls": self.warmup_calls, "reps": self.rep, "blocks": self.block,
                "refilled_from_pool": len(self.pool), "activity_timer_unused": str(self.failure or "") or None,
                "contents_per_rep": len(self.contents), "probes": self.prober is not None,
                "probes_unreadable": self.prober.why_not if self.prober is not None else self.probes_off}


def _host_like(t: Any) -> Any:
    """A host buffer for a parked device tensor: pinned (a copy each way at the link's speed), else pageable."""
    import torch

    try:
        return torch.empty_like(t, device="cpu", pin_memory=True)  # strides kept (dense tensors)
    except RuntimeError:  # pinning refused (no accelerator runtime, host memory locked up): slower, the same bytes
        return torch.empty_like(t, device="cpu")
