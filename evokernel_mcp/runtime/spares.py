"""Sandboxed children for the runner: spares started ahead, handed out once, and cached reference
processes (one per reference source).

- A spare is a child (runtime/child.py) started in the sandbox (sandbox.py) with torch and triton
  imported and the device context made; it has loaded nothing. `take()` hands one out for ONE job
  and starts a replacement in the background, so a job pays no start-up.
- `reference(task)` returns the child that has loaded this reference source (kept, at most
  REF_CACHE of them, least recently used dropped); a spare becomes one on first use.
- Every request has a deadline: a child past it is killed with its whole tree (pid namespace under
  bwrap; /proc walk otherwise) and the caller gets ChildFailed(kind="timeout").
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import secrets
import shutil
import subprocess
import sys
import threading
import time
from collections import OrderedDict, deque
from pathlib import Path
from typing import Any

from evokernel_mcp.paths import sub_state_dir
from evokernel_mcp.runtime import courier, frames, kernel_cache, sandbox
from evokernel_mcp.runtime.protocol import read_tail

log = logging.getLogger(__name__)
# Spares per device: a verify takes one, a benchmark two or three (candidate, baseline, control), and a
# replacement needs seconds to start (interpreter, torch, device context, CUPTI), so back-to-back jobs need
# several; more on a host with cores to spare.
N_SPARES = int(os.environ.get("EVOKERNEL_SPARES", str(max(2, min(8, (os.cpu_count() or 2) // 2)))))
REF_CACHE = int(os.environ.get("EVOKERNEL_REF_CACHE", "2"))
TIGHT_FREE_FRACTION = 0.5  # below this free fraction of the device, other sources' reference processes go
TRACE_OPS_S = float(os.environ.get("EVOKERNEL_TRACE_OPS_S", "1.0"))  # ops at least this long go in the events
START_TIMEOUT_S = float(os.environ.get("EVOKERNEL_CHILD_START_TIMEOUT_S", "180"))


# Where a job's time went (child starts, waits for a spare): the runner hands these to the server with the
# op's reply, and the server logs them (stderr), so a slow job can be explained from the log.
EVENTS: deque[str] = deque(maxlen=200)


def _note(fmt: str, *args: Any) -> None:
    EVENTS.append(fmt % args)


def drain_events() -> list[str]:
    out = []
    while EVENTS:
        out.append(EVENTS.popleft())
    return out


class ChildFailed(Exception):
    """A child did not answer properly: it crashed, hung, faulted, lied about its frames, or its op raised."""

    def __init__(self, kind: str, message: str, detail: str | None = None):
        super().__init__(message)
        self.kind, self.message, self.detail = kind, message, detail

    def info(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "detail": self.detail}


class Child:
    """One sandboxed process. Not thread-safe: one request at a time."""

    def __init__(self, device: str, level: str):
        self.device, self.level = device, level
        self.scratch = sub_state_dir("sandbox") / f"{device.replace(':', '')}-{secrets.token_hex(6)}"
        sandbox.prepare_scratch(self.scratch, level)
        kernel_cache.restore_driver(self.scratch, sandbox.scratch_owner(level))
        env = sandbox.base_env({"HOME": str(self.scratch), "TMPDIR": str(self.scratch / "tmp"),
                                "TRITON_CACHE_DIR": str(self.scratch / ".triton")})
        for k in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "TRITON_INTERPRET"):
            if k in os.environ:
                env[k] = os.environ[k]
        kind = "cpu" if device == "cpu" else "cuda"
        if kind == "cpu":  # host timing: one thread per arm, and an idle arm's threads never spin, so arms
            env.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # timed in turn do not compete for the cores
            env.setdefault("OMP_NUM_THREADS", os.environ.get("EVOKERNEL_CPU_THREADS", "1"))
            # glibc's mmap threshold moves with each process's allocation history: a process still at the
            # default mmaps (and page-faults) every multi-MB output, measured 3x slower than its twin; fix it
            env.setdefault("MALLOC_MMAP_THRESHOLD_", str(32 << 20))
            env.setdefault("MALLOC_TRIM_THRESHOLD_", str(1 << 30))
        ours, theirs = courier.pair()  # big tensors by fd beside the pipes (courier.py)
        spec = sandbox.Spec(argv=[sys.executable, "-m", "evokernel_mcp.runtime.child", "--device", kind,
                                  "--fd-sock", str(theirs.fileno())],
                            scratch=self.scratch, env=env, devices=kind != "cpu")
        self._boot = open(self.scratch / ".boot.log", "wb")  # noqa: SIM115 - closed in kill()
        try:
            self.proc = subprocess.Popen(sandbox.argv_for(spec, level), stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self._boot, cwd=str(self.scratch),
                                         start_new_session=True, preexec_fn=sandbox.preexec(level, None), env=env,
                                         bufsize=0, pass_fds=(theirs.fileno(),))
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        sandbox.own(self.proc.pid)
        self.courier = courier.Courier(ours)
        self.rx = io.BufferedReader(self.proc.stdout, buffer_size=1 << 20)
        self.tx = io.BufferedWriter(self.proc.stdin, buffer_size=1 << 20)
        self.info: dict[str, Any] = {}
        self.source_key: str | None = None
        self.dead = False

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> dict[str, Any]:
        ev = self._read(timeout_s, max_bytes=0, what="start")
        if ev.get("event") != "ready":
            self.kill()
            raise ChildFailed("crash", f"child sent {str(ev)[:200]} instead of ready")
        self.info = ev.get("info") or {}
        return self.info

    def _read(self, timeout_s: float, *, max_bytes: int, what: str, device: str | None = None) -> dict[str, Any]:
        timer = threading.Timer(max(timeout_s, 0.01), self._expire)
        self._expired = False
        timer.start()
        try:
            msg = frames.read(self.rx, max_bytes=max_bytes, device=device, courier=self.courier)
        except (EOFError, OSError, ValueError) as e:
            self.kill()
            if self._expired:
                raise ChildFailed("timeout", f"{what} did not finish within {timeout_s:.3g} s; the process and "
                                  "everything it started were killed") from e
            raise ChildFailed("crash", f"the process running {what} {self._how()}", self._tails()) from e
        except frames.FrameError as e:
            self.kill()
            raise ChildFailed("bad_candidate", f"protocol violation during {what}: {e}") from e
        finally:
            timer.cancel()
        if not isinstance(msg, dict):
            self.kill()
            raise ChildFailed("bad_candidate", f"protocol violation during {what}: not a message")
        return msg

    def _expire(self) -> None:
        self._expired = True
        self.kill(close=False)  # the reader gets EOF and reports the timeout

    def _how(self) -> str:
        try:
            rc = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "stopped answering"
        if rc < 0:
            import signal

            try:
                return f"was killed by {signal.Signals(-rc).name}"
            except ValueError:
                return f"was killed by signal {-rc}"
        return f"exited with code {rc}"

    def request(self, msg: dict[str, Any], *, timeout_s: float, max_bytes: int, device: str | None = None) -> Any:
        """Send one op and return its result; ChildFailed on any failure (the op's own error included)."""
        if self.dead:
            raise ChildFailed("internal", "this child was killed already")
        try:
            frames.write(self.tx, msg, self.courier)
        except (BrokenPipeError, OSError) as e:
            self.kill()
            raise ChildFailed("crash", f"the process {self._how()} before {msg.get('op')}", self._tails()) from e
        reply = self._read(timeout_s, max_bytes=max_bytes, what=str(msg.get("op")), device=device)
        moved = self.courier.drain_stats()
        took = reply.get("duration_s")
        big = [f"{k[:-6]} {v / 2**20:.0f} MiB in {moved.get(k[:-6] + '_s', 0.0):.2f} s"
               for k, v in sorted(moved.items()) if k.endswith("_bytes") and v >= courier.THRESHOLD]
        if big or (isinstance(took, (int, float)) and took >= TRACE_OPS_S):
            _note("%s %s%s", msg.get("op"), f"{took:.2f} s in the child" if isinstance(took, (int, float)) else "",
                  "; moved " + ", ".join(big) if big else "")
        if reply.get("ok") is True:
            return reply.get("result")
        err = reply.get("error") if isinstance(reply.get("error"), dict) else {}
        raise ChildFailed(str(err.get("kind") or "exception")[:40], str(err.get("message") or "failed")[:4000],
                          str(err.get("detail") or "")[:8000] or None)

    def _tails(self) -> str | None:
        parts = [read_tail(self.scratch / n, 3000) for n in ("stderr.txt", ".boot.log")]
        text = "\n".join(p for p in parts if p.strip())
        return text or None

    def output(self) -> tuple[str, str]:
        """The candidate's captured stdout/stderr (tails)."""
        return read_tail(self.scratch / "stdout.txt"), read_tail(self.scratch / "stderr.txt")

    def kill(self, close: bool = True) -> None:
        """Kill the process and everything it started; close the pipes unless a reader is still on them."""
        if not self.dead:
            self.dead = True
            sandbox.kill_tree(self.proc.pid)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                log.warning("child %s did not exit after SIGKILL", self.proc.pid)
            sandbox.disown(self.proc.pid)
        if close:
            self.courier.close()
            for s in (self.tx, self.rx):
                try:
                    s.close()
                except (OSError, ValueError):
                    pass
            self._boot.close()

    def load_source(self, source: str, request: dict[str, Any], *, timeout_s: float) -> Any:
        """Load agent source (a candidate, a baseline): its own Triton cache of earlier jobs first
        (kernel_cache.py: per source, never shared with other sources), kept again when discarded."""
        self._cache = (source, kernel_cache.restore(source, self.scratch, sandbox.scratch_owner(self.level)))
        return self.request(request, timeout_s=timeout_s, max_bytes=0)

    def discard(self) -> None:
        """Kill and remove its scratch dir: nothing the job wrote persists (except, for its own source's
        later jobs, Triton's compile cache: kernel_cache.py)."""
        self.kill()
        cached = getattr(self, "_cache", None)
        if cached is not None:
            self._cache = None
            kernel_cache.save(cached[0], self.scratch, cached[1])
        shutil.rmtree(self.scratch, ignore_errors=True)


class _Spawner:
    """One long-lived thread starts every child. The kernel's parent-death signal (our preexec and bwrap's
    --die-with-parent) fires when the THREAD that forked the child exits, so children must never be
    started from short-lived threads."""

    def __init__(self) -> None:
        import queue

        self._q: queue.Queue = queue.Queue()
        threading.Thread(target=self._loop, daemon=True, name="evokernel-spawner").start()

    def _loop(self) -> None:
        while True:
            fn, box, done = self._q.get()
            try:
                box.append((True, fn()))
            except BaseException as e:  # noqa: BLE001 - handed back to the caller
                box.append((False, e))
            done.set()

    def call(self, fn):
        box: list = []
        done = threading.Event()
        self._q.put((fn, box, done))
        done.wait()
        ok, value = box[0]
        if not ok:
            raise value
        return value


_SPAWNER: _Spawner | None = None
_SPAWNER_LOCK = threading.Lock()


def spawn(fn):
    global _SPAWNER
    with _SPAWNER_LOCK:
        if _SPAWNER is None:
            _SPAWNER = _Spawner()
    return _SPAWNER.call(fn)


class Spares:
    """Spare children for one device, and the cache of reference children."""

    def __init__(self, device: str, n: int = N_SPARES):
        self.device, self.n = device, max(0, n)
        self.levels = sandbox.level_candidates()
        self.level = self.levels[0]
        self.level_notes: list[str] = []
        self._ready: list[Child] = []
        self._lock = threading.Condition()
        self._refs: OrderedDict[str, Child] = OrderedDict()
        self._starting = 0
        self._closed = False
        self._quiet = 0

    def isolation(self) -> dict[str, Any]:
        return {"level": self.level, "notes": list(self.level_notes)}

    def _start_one(self) -> Child:
        """Start a child at the best level that works here; a level that fails is dropped, with the reason."""
        while True:
            child = None
            try:
                level = self.level
                t0 = time.monotonic()
                child = spawn(lambda: Child(self.device, level))
                info = child.wait_ready()
                child.start_s = time.monotonic() - t0
                kernel_cache.save_driver(child.scratch)  # no agent code has reached it yet
                _note("child started in %.2f s %s", child.start_s, info.get("boot_s") or "")
                return child
            except (ChildFailed, OSError) as e:
                msg, tail = (e.message, (e.detail or "")[-600:]) if isinstance(e, ChildFailed) else (repr(e), "")
                if child is not None:
                    child.discard()
                if self.level == self.levels[-1]:
                    raise
                note = f"isolation {self.level} failed here ({msg}; {tail.strip()}); using the next level"
                log.warning(note)
                self.level_notes.append(note[:800])
                self.level = self.levels[self.levels.index(self.level) + 1]

    def _fill(self) -> None:
        try:
            child = self._start_one()
        except Exception:  # noqa: BLE001
            log.exception("could not start a spare child")
            child = None
        with self._lock:
            self._starting -= 1
            if child is not None:
                if self._closed:
                    child.discard()
                else:
                    self._ready.append(child)
            self._lock.notify_all()

    def quiet(self):
        """A context in which no spare is started in the background (timing must not share the CPU with
        a starting interpreter); what was taken meanwhile is replaced when it ends."""
        import contextlib

        @contextlib.contextmanager
        def cm():
            t0 = time.monotonic()
            with self._lock:
                self._quiet += 1
                deadline = time.monotonic() + START_TIMEOUT_S
                # host timing on few cores: let starts in flight finish first. A GPU host with cores to spare
                # does not wait (a start there costs seconds, on every benchmark); its only touch of the GPU is
                # one context creation, which the interleaved arms see alike
                while self._starting > 0 and time.monotonic() < deadline and self._wait_in_quiet():
                    self._lock.wait(timeout=1.0)
            _note("quiet: waited %.2f s for spare starts", time.monotonic() - t0)
            try:
                yield
            finally:
                with self._lock:
                    self._quiet -= 1
                self.replenish()
        return cm()

    def _wait_in_quiet(self) -> bool:
        return self.device == "cpu" or (os.cpu_count() or 1) < 8 or os.environ.get("EVOKERNEL_QUIET_WAIT") == "1"

    def replenish(self) -> None:
        with self._lock:
            if self._quiet:
                return
            need = self.n - len(self._ready) - self._starting
            self._starting += max(0, need)
        for _ in range(max(0, need)):
            threading.Thread(target=self._fill, daemon=True).start()

    def take(self) -> Child:
        """A ready child for one job: a ready spare, else one already starting, else one started now."""
        t0 = time.monotonic()
        with self._lock:
            ready_now, starting = len(self._ready), self._starting
            deadline = time.monotonic() + START_TIMEOUT_S
            while not self._ready and self._starting > 0 and time.monotonic() < deadline:
                self._lock.wait(timeout=1.0)
            child = self._ready.pop(0) if self._ready else None
        _note("take: %d ready, %d starting, waited %.2f s", ready_now, starting, time.monotonic() - t0)
        if child is not None and child.proc.poll() is not None:
            child.discard()
            child = None
        if child is None:
            child = self._start_one()
        self.replenish()
        return child

    def reference(self, task, *, timeout_s: float) -> Child:
        """The child holding this task's reference source (loaded now if needed)."""
        key = hashlib.sha256(json.dumps([task.reference_source, task.name], sort_keys=True).encode()).hexdigest()
        self._evict_others_if_tight(key)
        child = self._refs.get(key)
        if child is not None and not child.dead and child.proc.poll() is None:
            self._refs.move_to_end(key)
            return child
        if child is not None:
            self.drop_reference(child)
        child = self.fresh_reference(task, timeout_s=timeout_s)
        child.source_key = key
        self._refs[key] = child
        while len(self._refs) > REF_CACHE:
            _, old = self._refs.popitem(last=False)
            old.discard()
        return child

    def fresh_reference(self, task, *, timeout_s: float) -> Child:
        """A fresh child with this task's reference loaded, for one job only (never cached): a timed arm
        (the PyTorch baseline, its control copy) runs in a process built exactly like the candidate's, so
        that the two differ only in the code they run (a long-lived process's allocation history, its
        other models and buffers, shift its kernels' times by tenths of a percent and more)."""
        child = self.take()
        try:
            child.request({"op": "load", "role": "reference", "task": task.model_dump()}, timeout_s=timeout_s,
                          max_bytes=1 << 20)
        except ChildFailed as e:
            child.discard()
            raise ChildFailed("harness" if e.kind in ("exception", "bad_candidate") else e.kind,
                              f"the reference failed to load: {e.message}", e.detail) from e
        return child

    def _evict_others_if_tight(self, key: str) -> None:
        """Cached reference processes of other sources hold device memory (context, weights, what their
        allocator kept): when under half the device is free, they go before this job starts."""
        if self.device == "cpu" or not any(k != key for k in self._refs):
            return
        try:
            import torch

            free, total = torch.cuda.mem_get_info()
        except Exception:  # noqa: BLE001 - no device view here: keep the cache
            return
        if free >= total * TIGHT_FREE_FRACTION:
            return
        for k, c in list(self._refs.items()):
            if k != key:
                del self._refs[k]
                c.discard()
        _note("device %.0f of %.0f GiB free: cached reference processes of other sources stopped",
              free / 2**30, total / 2**30)

    def drop_reference(self, child: Child) -> None:
        for k, c in list(self._refs.items()):
            if c is child:
                del self._refs[k]
        child.discard()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            kids = self._ready + list(self._refs.values())
            self._ready, self._refs = [], OrderedDict()
        for c in kids:
            c.discard()


def wall_deadline(deadline: float) -> float:
    """Seconds left until a time.monotonic() deadline (at least a little, so a request can fail cleanly)."""
    return max(0.05, deadline - time.monotonic())
