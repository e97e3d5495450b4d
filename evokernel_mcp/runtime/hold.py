"""A job that needs the device memory our idle processes hold (a mixin of spares.Spares): they are given back
(give_back_idle), and until it ends (end_hold) no spare's start touches the device: each waits at the device gate
with its CPU start done and no context (_gate_shut, _gpu_phase), but one a take needs goes through."""

from __future__ import annotations

import time

from evokernel_mcp.runtime import proctree, sandbox
from evokernel_mcp.runtime.child_proc import Child, note


class StoppedForRoom(Exception):
    """A spare's start stopped by give_back_idle (a job needed the device memory its context was taking)."""


class Hold:
    """Needs of the class it is mixed into (spares.Spares): _lock (a Condition), _ready, _refs, _timing, _held,
    _wanting, _let_through, _gated, _gpu_busy, _closed, _keep_spares, _took, _after_big, _past_gate,
    _stopped_for_room, _free_memory(), wait_retired(), replenish()."""

    def _gate_shut(self) -> bool:
        """Is a background start held back from the device now? While arms are timed; and while a job that
        needed the room runs (_held), unless a take waits with no fitting child ready: such a start waits there
        with its CPU work done (torch imported) and no device context, and makes its context once the job ends
        (a fraction of a second instead of a whole start); one start per such take, not every start held there
        (each would make a context of 0.4 GiB through the job's peak). Under the lock."""
        return bool(self._timing) or (self._held and self._wanting <= self._let_through)

    def _gpu_phase(self, start: bool = False):
        """For a background start's device phase: blocks while the gate is shut (_gate_shut); then counts it as
        device work in flight and returns the function that ends it. (No limit on phases in flight: on one H200
        a limit of 2 spread them over more of the benchmarks' timed sections, and a batch took 4 % longer.)"""
        with self._lock:
            self._gated += int(start)  # (a start's: quiet() does not wait for starts held here)
            try:
                while self._gate_shut() and not self._closed:
                    self._lock.wait(timeout=1.0)
                self._let_through += int(start and self._held and not self._timing)
            finally:
                self._gated -= int(start)
            self._gpu_busy += 1

        def done() -> None:
            with self._lock:
                self._gpu_busy -= 1
                self._lock.notify_all()
        return done

    def _through_gate(self, child: Child):
        """A background start's device gate (_gpu_phase); once through, the start counts as making its context
        until it is ready, so a job that needs the room stops it too (give_back_idle)."""
        done = self._gpu_phase(start=True)
        with self._lock:
            self._past_gate.add(child)
        return done

    def give_back_idle(self, keep: tuple = (), keep_spares: int = 0) -> dict[str, object]:
        """A job needs device memory our idle processes hold: stop every ready spare but `keep_spares` of them
        and every cached reference process not in `keep`, empty this runner's allocator cache and wait until they
        are gone. Until the job ends (end_hold) no spare touches the device: AFTER_BIG_SPARES replacements start
        now and wait at the device gate with no context (_gate_shut). Returns what was given back: {processes,
        holdings (runtime/devplan.Holding dicts), freed_bytes (the device's free memory after minus before:
        measured), free_bytes}."""
        from evokernel_mcp.runtime.devmem import release_cached
        from evokernel_mcp.runtime.devplan import CONTEXT_BYTES_ASSUMED, Holding

        before = self._free_memory()
        with self._lock:
            self._held, self._keep_spares = True, max(0, keep_spares)
            spares = self._ready[max(0, keep_spares):]
            self._ready = self._ready[:max(0, keep_spares)]
            refs = [(k, c) for k, c in self._refs.items() if c not in keep]
            for k, _ in refs:
                del self._refs[k]
            # starts past the device gate before the hold: each was making a context of 0.4 GiB, kept until its
            # start ended (a second or two, through a 1 GB job's peak); their start threads see the end and drop them
            making, self._past_gate = list(self._past_gate), set()
            self._stopped_for_room.update(c.proc.pid for c in making)
        victims = [v for c in making for v in (c.proc.pid, *proctree.descendants(c.proc.pid))]
        for c in making:
            sandbox.kill_once(c.proc.pid)
        end = time.monotonic() + 3.0  # their contexts gone before the job's data is made (their threads reap them)
        while proctree.running(victims) and time.monotonic() < end:
            time.sleep(0.02)
        gone = [Holding(role="spare", pid=c.proc.pid, bytes=CONTEXT_BYTES_ASSUMED, source="assumed (a CUDA context)")
                for c in spares + making] + \
               [Holding(role="cached reference", pid=c.proc.pid, bytes=CONTEXT_BYTES_ASSUMED,
                        source="assumed (a CUDA context)") for _, c in refs]
        for c in spares + [c for _, c in refs]:
            c.discard()
        release_cached()
        self.wait_retired()  # (spares starting now are stopped as they arrive: _offer; waiting for them cost
        # a KernelBench sweep 5-7 s per job, for contexts of 0.6 GiB each while the job's data is small)
        after = self._free_memory()
        freed = after[0] - before[0] if before and after else None
        self.replenish()  # replacements do their CPU start now and wait at the device gate until the job ends
        note("gave back %d idle process(es) for a job that needs the room: %s", len(gone),
             f"{freed / 2**30:.2f} GiB freed" if freed is not None else "no device view")
        return {"processes": len(gone), "holdings": [h.model_dump() for h in gone], "freed_bytes": freed,
                "free_bytes": after[0] if after else None}

    def end_hold(self) -> None:
        """A job ended. One that gave our idle processes back leaves the spares down (_after_big); the first job
        after it that took a child without giving any back starts them again."""
        with self._lock:
            took, self._took = self._took, False
            if self._held:
                self._held, self._after_big, self._let_through = False, True, 0
                self._lock.notify_all()  # starts held at the device gate make their contexts now
            elif self._after_big and took:
                self._after_big = False
            else:
                return
        self.replenish()
