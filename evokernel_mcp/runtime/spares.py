"""Sandboxed children for the runner: spares started ahead, handed out once, and cached reference
processes (one per reference source). One child process is child_proc.Child.

- A spare is a child (runtime/child.py) started in the sandbox (sandbox.py) with torch and triton
  imported and the device context made; it has loaded nothing. `take(purpose)` hands one out for ONE job
  and starts a replacement in the background, so a job pays no start-up.
- Two flavours on a GPU: a benchmark's timed arms want the profiler warm (CUPTI loaded and started once,
  ~3.5 s of a start's ~9 s on the H200), a verify does not. Spares are started in the mix the recent
  takes asked for; a benchmark handed a cold one warms it before loading anything (warm_profiler).
- On an NVIDIA GPU a cold spare starts with one hardware queue (untimed_queues: a cheaper context) and never
  becomes a timed arm; a warm one keeps the driver's default.
- `reference(task)` returns the child that has loaded this reference source (refcache.py: kept, at most
  REF_CACHE of them, least recently used dropped); a spare becomes one on first use.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict, deque

from evokernel_mcp import settings
from evokernel_mcp.runtime import kernel_cache, sandbox
from evokernel_mcp.runtime.child_proc import (  # noqa: F401 - re-exported: the runner's ops import them here
    SPARE_NICE,
    Child,
    ChildFailed,
    drain_events,
    handed_over,
    note,
)
from evokernel_mcp.runtime.hold import Hold, StoppedForRoom
from evokernel_mcp.runtime.refcache import Purpose, RefCache
from evokernel_mcp.runtime.retiring import Retiring
from evokernel_mcp.runtime.spawner import spawn

log = logging.getLogger(__name__)


def default_spares(device: str = "cpu") -> int:
    """Spares per device: a verify takes one, a benchmark two or three (candidate, baseline, control), and a
    replacement needs seconds to start (interpreter, torch, device context, CUPTI), so back-to-back jobs need
    several; more with cores to spare. Counted on the CPUs this process may run on (a runner keeps to its
    share): on one CPU a spare starts only in the gaps between jobs, and one more is CPU taken from the next job.
    On a GPU at most GPU_SPARES: each idle spare holds a device context."""
    cpus = len(os.sched_getaffinity(0))
    n = max(1 if cpus < 2 else 2, min(8, cpus // 2))
    return n if device == "cpu" else min(n, GPU_SPARES)


# Spares a GPU runner keeps at most, whatever its cores. Each holds a device context (0.41 GiB on an H100), and
# what our idle processes hold is there at a job's start, before its plan can give it back (runner_side.within_cap):
# with eight spares, the runner and the cached references held 4.4 GiB idle on an H100, 4.4x the own bytes of a
# 1 GB KernelBench problem (6_Matmul_with_large_K, 54_conv_standard_3D). With three, 2.8 GiB at a new reference's
# load (two cached references, the runner, two spares), and a benchmark's two warm arms are ready (replenish).
GPU_SPARES = 3


# spares started after a job that gave them back: a next job's children without a wait (a verify of a new source
# takes two: its reference and its candidate; a benchmark two or three arms); what a big job leaves idle it stops
# before its data exists. With one, a KernelBench sweep's jobs waited 7-9 s for a cold start (its meta warm-up)
AFTER_BIG_SPARES = 3
# CUDA_DEVICE_MAX_CONNECTIONS for the children that never host a timed arm on an NVIDIA GPU (a verify's
# candidate, the cached reference processes). One hardware queue halves what a context costs the driver to
# make and to end, and the driver makes a GPU's contexts one at a time (measured on the H200); streams then
# share that queue, which changes how they overlap, never what they compute. A timed arm always has the
# driver's default: its times must be what the kernel does in an ordinary process.
UNTIMED_QUEUES = 1


def untimed_queues(device: str) -> int | None:
    """The hardware queues of an untimed child on `device`: UNTIMED_QUEUES on NVIDIA, else None (default)."""
    return UNTIMED_QUEUES if device.startswith("cuda") else None


def _timeable(child) -> bool:
    return getattr(child, "timeable", True)


class Spares(RefCache, Retiring, Hold):
    """Spare children for one device, and the cache of reference children."""

    def __init__(self, device: str, n: int | None = None):
        self.device, self.n = device, max(0, default_spares(device) if n is None else n)
        self.levels = sandbox.level_candidates()
        self.level = self.levels[0]
        self.level_notes: list[str] = []
        self._ready: list[Child] = []
        self._lock = threading.Condition()
        self._refs: OrderedDict[str, Child] = OrderedDict()
        self._starting = 0
        self._starting_warm = 0
        self._warming = 0  # cold spares being warmed in the background (out of _ready meanwhile)
        self._gated = 0  # spare starts waiting at the device gate (CPU start done, no context yet)
        self._past_gate: set[Child] = set()  # spare starts making their device context now (give_back_idle stops them)
        self._stopped_for_room: set[int] = set()  # ... the pids it stopped
        self._gpu_busy = 0  # background work touching the device now (a spare's device start, a warm-up,
        self._retiring = 0  # a retired child's end), and of it retired children not yet gone
        self._retiring_big = 0  # ... and of those, the children of jobs planned within their memory cap
        self._closed = False
        self._quiet = 0  # quiet sections open (no new spares): the job's whole run on a host of few cores
        self._held = False  # idle children were given back for a big job: new spares wait at the device gate
        self._keep_spares = 0  # ... and how many ready ones it left
        # spares stay down after such a job until a job ends that took a child without giving any back: big jobs
        # come in runs (a sweep, a search at full size), and spares restarted between two of them only start
        # contexts the next one stops again (seconds of device driver work per job, mid-job device memory)
        self._after_big = False
        self._took = False  # a child was taken (or a reference asked for) since the last job ended
        self._takers = 0  # take() calls waiting for a child now
        self._wanting = 0  # ... of which with no fitting child ready (they open a big job's device gate)
        self._let_through = 0  # ... and the starts that gate let through for them
        self._timing = 0  # ... of which timing now: spares' device phases are held back only then
        self._profiles = device != "cpu"  # only a GPU child has a profiler to warm
        self._triton_key: str | None = None  # Triton's install key, from the first GPU spare (child.py)
        self._demand: deque[bool] = deque(maxlen=max(4, 2 * self.n))  # recent takes: was a warm child wanted
        # cold (verify) children start with fewer hardware queues where set: they never become timed arms
        self._lean = untimed_queues(device) if self._profiles else None

    def isolation(self) -> dict[str, object]:
        from evokernel_mcp.runtime.limits import current

        return {"level": self.level, "notes": list(self.level_notes), "limits": current().model_dump()}

    def _start_one(self, warm: bool = True, background: bool = False) -> Child:
        """Start a child at the best level that works here; a level that fails is dropped, with the reason.
        A background start (a spare) touches the device only outside benchmarks' timed sections; a start a
        job waits for now is not held back (nothing of its device is timed meanwhile)."""
        warm = warm and self._profiles
        gated = background and self._profiles
        while True:
            child = None
            try:
                level = self.level
                t0 = time.monotonic()
                queues = None if warm else self._lean
                child = spawn(lambda: Child(self.device, level, warm=warm, gated=gated, triton_key=self._triton_key,
                                            queues=queues))
                spawned = time.monotonic() - t0  # the spawner thread's queue, the scratch dir, fork + exec
                try:
                    info = child.wait_ready(gate=(lambda c=child: self._through_gate(c)) if gated else None)
                finally:
                    with self._lock:
                        self._past_gate.discard(child)
                self._stopped_for_room.discard(child.proc.pid)  # a start that was ready before the give-back's kill
                child.start_s = time.monotonic() - t0
                kernel_cache.save_driver(child.scratch)  # no agent code has reached it yet
                if child.triton_key and not self._triton_key:  # likewise: later spares skip hashing Triton
                    self._triton_key = child.triton_key
                note("child started in %.2f s%s (spawned in %.2f s) %s", child.start_s,
                     "" if warm else f" (cold{f', {queues} hardware queue(s)' if queues else ''})",
                     spawned, info.get("boot_s") or "")
                return child
            except (ChildFailed, OSError) as e:
                msg, tail = (e.message, (e.detail or "")[-600:]) if isinstance(e, ChildFailed) else (repr(e), "")
                if child is not None:
                    child.discard()
                    if child.proc.pid in self._stopped_for_room:  # give_back_idle's doing, not the level's
                        self._stopped_for_room.discard(child.proc.pid)
                        raise StoppedForRoom from e
                if self.level == self.levels[-1]:
                    raise
                why = f"isolation {self.level} failed here ({msg}; {tail.strip()}); using the next level"
                log.warning(why)
                self.level_notes.append(why[:800])
                self.level = self.levels[self.levels.index(self.level) + 1]

    def _fill(self, warm: bool) -> None:
        try:
            child = self._start_one(warm, background=True)
        except StoppedForRoom:
            child = None
        except Exception:  # noqa: BLE001
            log.exception("could not start a spare child")
            child = None
        with self._lock:
            self._starting -= 1
            self._starting_warm -= int(warm)
            self._offer(child)

    def _offer(self, child: Child | None) -> None:
        """A started or warmed spare joins the ready ones (discarded once the pool is closed); waiters wake.
        Under the lock."""
        if child is not None:
            if self._closed:
                child.discard()
            elif self._held and not self._takers and len(self._ready) >= self._keep_spares:
                self.retire(child)  # a start in flight when a big job's room was given back goes too
            else:
                self._ready.append(child)
        self._lock.notify_all()

    def quiet(self, wait: bool | None = None):
        """A context in which no spare is started in the background (timing must not share the CPU, or the
        device, with a starting interpreter); what was taken meanwhile is replaced when it ends. With
        wait (default: waits_in_quiet()), starts already in flight finish first."""
        import contextlib

        @contextlib.contextmanager
        def cm():
            t0 = time.monotonic()
            with self._lock:
                self._quiet += 1
                deadline = time.monotonic() + settings.get().start_timeout_s
                waiting = self.waits_in_quiet() if wait is None else wait
                # device work of spares in flight (a context, CUPTI's first session) ends first, always: it
                # measurably disturbs the kernels being timed (a 5 % difference read as 0.62-1.34 once)
                # (starts in flight pass the device gate until the timing begins, so they can end)
                # (starts held at the device gate by a job that needed the room do no work: not waited for)
                while (self._gpu_busy or (waiting and self._starting - self._gated > 0)) \
                        and time.monotonic() < deadline:
                    self._lock.wait(timeout=1.0)
                self._timing += 1
            note("quiet: waited %.2f s for spare starts", time.monotonic() - t0)
            try:
                yield
            finally:
                with self._lock:
                    self._quiet -= 1
                    self._timing -= 1
                    self._lock.notify_all()
                self.replenish(taking=True)
        return cm()

    def waits_in_quiet(self) -> bool:
        """Host timing on few cores lets starts in flight finish before it times, and then holds new starts
        for the whole job (starting them after its children are taken would mean waiting for them). A GPU
        host with cores to spare does not wait (a start there costs seconds, on every benchmark) and holds
        new starts only while arms are timed: a start touches the GPU (a context, CUPTI's first session)."""
        return self.device == "cpu" or (os.cpu_count() or 1) < 8

    def _sweep(self) -> None:
        """Drop ready spares that died meanwhile (reaped: no zombie stays with the runner). Under the lock."""
        for c in [c for c in self._ready if c.proc.poll() is not None]:
            self._ready.remove(c)
            threading.Thread(target=c.discard, daemon=True).start()

    def replenish(self, taking: bool = False) -> None:
        """Start spares up to n, in the flavour mix the recent takes asked for (half and half before any);
        when warm ones are still short, warm idle cold ones in the background (off any job's clock). After a
        job that gave our idle processes back (_after_big), and during one (_held: they wait at the device gate),
        AFTER_BIG_SPARES only, and none from a take (the job taking is likely big too: it would stop them again)."""
        with self._lock:
            self._sweep()
            # (a job that needed the room on a host of many cores: its starts do their CPU work in its quiet
            # section too, as starts already in flight do there, and wait at the device gate)
            if (self._quiet and not (self._held and not self.waits_in_quiet())) \
                    or ((self._after_big or self._held) and taking) or (self._held and not self._profiles):
                return
            # (while a job that needed the room runs, its starts wait at the device gate with no context)
            n = min(self.n, AFTER_BIG_SPARES) if self._after_big or self._held else self.n
            need = max(0, n - len(self._ready) - self._starting - self._warming)
            warm, to_warm = 0, []
            if self._profiles:
                frac = sum(self._demand) / len(self._demand) if self._demand else 0.5
                target = round(n * frac)
                if self._lean:  # a cold child cannot become a timed arm: keep a benchmark's two arms ready
                    target = max(target, min(n, 2))
                have = sum(1 for c in self._ready if c.warm) + self._starting_warm + self._warming
                warm = min(need, max(0, target - have))
                cold_ready = [c for c in self._ready if not c.warm and _timeable(c)]
                surplus = len(cold_ready) + (need - warm) - (n - target)
                to_warm = cold_ready[:min(max(0, target - have - warm), max(0, surplus))]
                for c in to_warm:
                    self._ready.remove(c)
                self._warming += len(to_warm)
            self._starting += need
            self._starting_warm += warm
        for i in range(need):
            threading.Thread(target=self._fill, args=(i < warm,), daemon=True).start()
        for c in to_warm:
            threading.Thread(target=self._warm_idle, args=(c,), daemon=True).start()

    def _warm_idle(self, child: Child) -> None:
        done = self._gpu_phase()
        try:
            child.warm_profiler()
        except Exception:  # noqa: BLE001 - a spare that cannot warm is dropped; another starts
            log.exception("could not warm a spare")
            child.discard()
            child = None
        finally:
            done()
        with self._lock:
            self._warming -= 1
            self._offer(child)
        if child is None:
            self.replenish()

    def take(self, purpose: Purpose = "any") -> Child:
        """A ready child for one job: a ready spare, else one already starting, else one started now.
        purpose "bench" (a timed arm) gets a child with the profiler warm (warmed now if only cold ones are
        ready), "verify" prefers a cold one."""
        want = purpose == "bench"
        t0 = time.monotonic()
        with self._lock:
            self._took = True
            if purpose != "any" and self._profiles:
                self._demand.append(want)
            ready_now, starting = len(self._ready), self._starting
            deadline = time.monotonic() + settings.get().start_timeout_s

            def usable(c) -> bool:  # a timed arm never gets a child made for untimed work
                return _timeable(c) or not want

            def coming() -> int:
                return (self._starting_warm if want and self._lean else self._starting) + self._warming
            # (while arms are timed, background starts and warm-ups wait at the device gate: never wait for them)
            self._takers += 1
            # a take with no fitting child ready opens the device gate a big job holds shut (_gate_shut)
            short = not any(usable(c) for c in self._ready) or (want and not any(c.warm for c in self._ready))
            self._wanting += int(short)
            if short:
                self._lock.notify_all()
            # (a timed arm during a job that gave our idle processes back never waits for background starts: the
            # device gate lets one through per waiting take whatever its flavour, so a warm one may never come; on
            # an H100 such a take waited the whole start timeout. It starts one of its own now)
            held_arm = want and self._held
            try:
                while not any(usable(c) for c in self._ready) and coming() > 0 and not self._timing \
                        and not held_arm and time.monotonic() < deadline:
                    self._lock.wait(timeout=1.0)
                # a timed arm: a spare being warmed in the background is ready sooner than a cold one warmed now
                while want and self._warming and not self._timing and not any(c.warm for c in self._ready) \
                        and not held_arm and time.monotonic() < deadline:
                    self._lock.wait(timeout=1.0)
            finally:
                self._takers -= 1
                self._wanting -= int(short)
                self._let_through = max(0, self._let_through - int(short))
            pick = next((c for c in self._ready if c.warm == want and usable(c)), None) if purpose != "any" else None
            child = pick or next((c for c in self._ready if usable(c)), None)
            if child is not None:
                self._ready.remove(child)
        note("take (%s): %d ready, %d starting, waited %.2f s", purpose, ready_now, starting, time.monotonic() - t0)
        if child is not None and child.proc.poll() is not None:
            child.discard()
            child = None
        if child is None:
            child = self._start_one(want or purpose == "any")
        child.unnice()
        self.replenish(taking=True)
        if want and self._profiles and not child.warm:
            try:
                child.warm_profiler()
            except ChildFailed:
                child.discard()
                raise
        return child

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify_all()  # starts held at the device gate go on, and are discarded when ready
            kids = self._ready + list(self._refs.values())
            self._ready, self._refs = [], OrderedDict()  # spares being warmed go when they come back
        for c in kids:
            c.discard()
        self.wait_retired(15)  # retired children's ends, so that none outlives the runner's own


def wall_deadline(deadline: float) -> float:
    """Seconds left until a time.monotonic() deadline (at least a little, so a request can fail cleanly)."""
    return max(0.05, deadline - time.monotonic())
