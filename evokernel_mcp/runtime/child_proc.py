"""One sandboxed child process as the runner sees it (runtime/child.py is the process's own side): its
start in the sandbox, requests with deadlines, the capture of its output, its death and clean-up. The
spares that hold these processes are in spares.py.

- Every request has a deadline: a child past it is killed with its whole tree (pid namespace under
  bwrap; /proc walk otherwise) and the caller gets ChildFailed(kind="timeout").
- A child is started cold or with the profiler warm (`warm=True`: CUPTI loaded and started once, which
  only a benchmark's timed arms need); `warm_profiler()` warms a cold one before any agent code loads.
"""

from __future__ import annotations

import contextlib
import io
import logging
import secrets
import shutil
import subprocess
import sys
import threading
import time
from typing import Any

from pydantic import ValidationError

from evokernel_mcp import settings
from evokernel_mcp.paths import sub_state_dir
from evokernel_mcp.runtime import courier, frames, kernel_cache, limits, proctree, pycache, safefs, sandbox, zygote_link
from evokernel_mcp.runtime.child_env import child_env
from evokernel_mcp.runtime.childerr import CHILD_KINDS, ChildFailed, out_of_device_memory
from evokernel_mcp.runtime.messages import (
    CHILD_REPLY,
    CHILD_REQUEST,
    CHILD_START,
    ChildGate,
    ChildOk,
    ChildReady,
    GoRequest,
)
from evokernel_mcp.runtime.opevents import (  # noqa: F401 - re-exported: the runner notes and drains them here
    REQUESTS,
    TRACE_OPS_S,
    TRACE_PEAK_BYTES,
    drain_events,
    note,
    reset_requests,
)
from evokernel_mcp.runtime.protocol import OUTPUT_TAIL_CHARS, classify_text

log = logging.getLogger(__name__)
WARM_TIMEOUT_S = 120.0
# A spare boots at this nice value (its start is off every job's clock, so the runner and the children
# serving jobs come first on a busy host) and is set back to 0 when a job takes it, where allowed.
SPARE_NICE = 10


def handed_over(child, on: bool = True):
    """The context in which a request's tensors are the child's to keep (courier.handing_over: a VMM export, or
    a host tensor made on the child's device in one copy, becomes the child's own tensor); none when `on` is
    False or the child has no courier."""
    c = getattr(child, "courier", None) if on else None
    return c.handing_over() if c is not None else contextlib.nullcontext()


class Child:
    """One sandboxed process. Not thread-safe: one request at a time."""

    def __init__(self, device: str, level: str, warm: bool = True, gated: bool = False, triton_key: str | None = None,
                 queues: int | None = None, wrap: list[str] | None = None, binds: list[str] | None = None,
                 env_extra: dict[str, str] | None = None, files: dict[str, str] | None = None):
        """wrap: a profiler's argv that runs the child inside the sandbox (profile/runner_side.py); such a child
        speaks over its pipes only (a profiler may close other fds), with `binds` (read-only), `env_extra` and
        `files` (plain names -> text, written into its scratch dir before the start: the profiler's input)."""
        self.device, self.level = device, level
        self.role = "child"  # "candidate" / "reference" once it loads a source (named in errors)
        self.limits, self.cgroup = limits.for_child()
        self.warm = warm and device != "cpu"
        # queues: CUDA_DEVICE_MAX_CONNECTIONS for a child that never hosts a timed arm (spares.untimed_queues);
        # a context with fewer hardware queues is cheaper to make and to end, but serializes streams
        self.queues = queues if device.startswith("cuda") else None
        self.timeable = self.queues is None
        # a cached reference whose last job was planned within the memory cap (verify/runner_side.within_cap): the
        # next job of its source gives our idle processes back before it takes its children (give_back_early)
        self.capped = False
        self.gated = gated  # spares.py gates GPU children only; a CPU child may be gated (tests the protocol)
        self._unniced = False
        self.scratch = sub_state_dir("sandbox") / f"{device.replace(':', '')}-{secrets.token_hex(6)}"
        sandbox.prepare_scratch(self.scratch, level)
        for name, text in (files or {}).items():
            if "/" in name or name.startswith("."):
                raise ValueError(f"not a plain file name: {name!r}")
            (self.scratch / name).write_text(text, encoding="utf-8")
        kernel_cache.restore_driver(self.scratch, sandbox.scratch_owner(level))
        env = child_env(device, self.scratch, level, triton_key=triton_key, queues=self.queues, extra=env_extra)
        kind = "cpu" if device == "cpu" else "cuda"
        ours, theirs = courier.pair()  # big tensors by fd beside the pipes (courier.py)
        # the capture files are made here, before any agent code runs, and read through these descriptors only:
        # the scratch dir is the sandbox's, so a name there may be a link, a FIFO or a device by the time we read
        self._captures = safefs.create_new(self.scratch, CAPTURE_NAMES, sandbox.scratch_owner(level))
        out_fd, err_fd, boot_fd = (f.fileno() for f in self._captures)
        stack = settings.get().cuda_stack_bytes if kind == "cuda" else 0  # (runtime/cuda_stack.py)
        argv = [sys.executable, "-m", "evokernel_mcp.runtime.child", "--device", kind,
                *([] if wrap else ["--fd-sock", str(theirs.fileno())]),
                *(["--warm-profiler"] if self.warm else []), *(["--gpu-gate"] if self.gated else []),
                *(["--cuda-stack", str(stack)] if stack else []),
                *([] if wrap else ["--capture-fds", f"{out_fd},{err_fd}"])]
        # a wrapped child (a profiler around it, which may close descriptors) opens the same files by name at
        # its start, before any agent code: the runner still reads them through the descriptors kept here
        # where the zygote serves this sandbox, bwrap runs its stub, and a fork of the zygote becomes the child
        forked = zygote_link.fork_for(device, level, bool(wrap), env,
                                      self.cgroup.procs_files if self.cgroup is not None else [])
        stub, self._report = forked if forked is not None else (None, None)
        if stub is not None:
            argv = [sys.executable, "-m", zygote_link.STUB_MODULE, "--zygote-fd", str(stub.fileno()), "--",
                    *argv[3:]]
        spec = sandbox.Spec(argv=[*(wrap or []), *argv], scratch=self.scratch, env=env, devices=kind != "cpu",
                            ro_binds=pycache.child_binds(level) + list(binds or []))
        try:
            self.proc = subprocess.Popen(sandbox.argv_for(spec, level), stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=boot_fd, cwd=str(self.scratch),
                                         start_new_session=True, env=env, bufsize=0,
                                         preexec_fn=sandbox.preexec(level, None, SPARE_NICE,
                                                                    limits=limits.preexec_limits(self.cgroup)),
                                         pass_fds=() if wrap else (theirs.fileno(), out_fd, err_fd,
                                                                   *([stub.fileno()] if stub else [])))
        except BaseException:
            ours.close()
            self._close_captures()
            if self._report is not None:
                self._report.close()
            if self.cgroup is not None:
                self.cgroup.remove()
            raise
        finally:
            theirs.close()
            if stub is not None:
                stub.close()
        sandbox.own(self.proc.pid)
        if wrap:
            ours.close()
        self.courier = courier.Courier(ours) if not wrap else None
        self.rx = io.BufferedReader(self.proc.stdout, buffer_size=1 << 20)
        self.tx = io.BufferedWriter(self.proc.stdin, buffer_size=1 << 20)
        self.info: dict[str, Any] = {}
        self.triton_key: str | None = None
        self.source_key: str | None = None
        self.dead = False

    def wait_ready(self, timeout_s: float | None = None, gate=None) -> dict[str, Any]:
        """Read the child's "ready". A gated child first says "gate" once its CPU-only start is done and
        waits: gate() blocks until it may touch the device and returns the function to call once it is
        ready (spares.py holds spares back from a device while a benchmark times there)."""
        ev = self._start_event(timeout_s)
        if isinstance(ev, ChildGate):
            done = gate() if gate is not None else None
            try:
                frames.write(self.tx, GoRequest(op="go").model_dump(), self.courier)
                ev = self._start_event(timeout_s)
            except (BrokenPipeError, OSError) as e:
                self.kill()
                raise ChildFailed("crash", f"the process {self._how()} at its start", self._tails()) from e
            finally:
                if done is not None:
                    done()
        if not isinstance(ev, ChildReady):
            self.kill()
            raise ChildFailed("crash", f"child sent {ev.event!r} instead of ready")
        self.info = ev.info
        self.triton_key = self.info.pop("triton_key", None)  # Triton's install key, for later spares
        if self._report is not None:  # (the fork reports before the process it made may serve)
            report, pidfd = zygote_link.read_report(self._report)
            self._report = None
            if report.pid is not None and pidfd is not None:
                proctree.attach(self.proc.pid, report.pid, pidfd)
                self.info["zygote_pid"] = report.pid
            elif report.reason:  # refused: the stub started the child itself
                self.info["zygote_refused"] = report.reason
            else:  # a process may serve this sandbox that the runner cannot walk: end it all
                self.kill()
                raise ChildFailed("crash", "the zygote's fork said nothing of the process it made for this sandbox")
        return self.info

    def _start_event(self, timeout_s: float | None) -> ChildReady | ChildGate:
        """The child's "gate" or "ready" (messages.py); anything else: it did not start."""
        ev = self._read(timeout_s or settings.get().start_timeout_s, max_bytes=0, what="start")
        try:
            return CHILD_START.validate_python(ev)
        except ValidationError as e:
            self.kill()
            raise ChildFailed("crash", f"child sent {str(ev)[:200]} instead of ready") from e

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
            if out_of_device_memory(e):  # our own receive found no device memory: not the peer's doing
                raise ChildFailed("oom", f"receiving the reply to {what} failed on the runner's side: {e}") from e
            raise ChildFailed("bad_candidate", f"protocol violation during {what}: {e}") from e
        except RuntimeError as e:
            if not out_of_device_memory(e, itself=True):
                raise
            self.kill()  # the fds of the rest of the message are unread: the channel is out of step
            raise ChildFailed("oom", f"receiving the reply to {what} failed on the runner's side: "
                              f"{type(e).__name__}: {str(e)[:500]}") from e
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
        """Send one op and return its result; ChildFailed on any failure (the op's own error included), an
        out-of-memory or a CPU-time limit named as such, with the limit and this process's role (limits.py)."""
        if msg.get("op") == "load" and msg.get("role"):
            self.role = str(msg["role"])
        try:
            return self._request(msg, timeout_s=timeout_s, max_bytes=max_bytes, device=device)
        except ChildFailed as e:
            if not self.dead and self.proc.poll() is not None:  # it answered, then ended (a failed receive): it
                self.kill()  # serves nothing more, and a cache holding it must see that
            rc = self.proc.poll() if self.dead else None
            role = "runner" if "on the runner's side" in e.message else self.role
            e.kind, e.message, e.limit = limits.attribute(e.kind, e.message, role=role, limits=self.limits,
                                                          cgroup=self.cgroup, killed_by=limits.killed_by(rc))
            e.role = role
            if e.kind in ("oom", "gpu_fault") and not self.dead:
                # a process out of device memory (or with a faulted context) serves nothing more: one that failed
                # to receive or send has a stream out of step and ends itself (exit code 0), so a cache that
                # kept it would hand the next job a process about to be gone
                self.kill(close=False)
            raise

    def _request(self, msg: dict[str, Any], *, timeout_s: float, max_bytes: int, device: str | None = None) -> Any:
        if self.dead:
            raise ChildFailed("internal", "this child was killed already")
        try:
            CHILD_REQUEST.validate_python(msg)  # built from messages.py's models (tensors checked by frames.py)
        except ValidationError as e:
            raise ChildFailed("internal", f"the runner's {msg.get('op')!r} request does not match its model: "
                              f"{str(e)[:1000]}") from e
        t0 = time.perf_counter()
        try:
            frames.write(self.tx, msg, self.courier)
        except (BrokenPipeError, OSError) as e:
            self.kill()
            raise ChildFailed("crash", f"the process {self._how()} before {msg.get('op')}", self._tails()) from e
        except Exception as e:  # noqa: BLE001 - ours failed mid-message (no device memory for the arena, a
            self.kill()  # driver error): fds may have gone without their header, the channel is out of step
            kind = "oom" if classify_text(str(e)) == "oom" else "internal"
            raise ChildFailed(kind, f"sending {msg.get('op')} failed on the runner's side: {type(e).__name__}: "
                              f"{str(e)[:500]}") from e
        try:
            reply = self._read(timeout_s, max_bytes=max_bytes, what=str(msg.get("op")), device=device)
        finally:
            REQUESTS["n"] += 1
            REQUESTS["wall_s"] += time.perf_counter() - t0
        moved = self.courier.drain_stats() if self.courier is not None else {}
        try:
            answer = CHILD_REPLY.validate_python(reply)
        except ValidationError as e:
            self.kill()
            raise ChildFailed("bad_candidate", f"protocol violation during {msg.get('op')}: a reply that is neither "
                              f"a result nor an error ({e.error_count()} problems)") from e
        reply = None
        took = answer.duration_s
        if took is not None:
            REQUESTS["child_s"] += took
        big = [f"{k[:-6]} {v / 2**20:.0f} MiB in {moved.get(k[:-6] + '_s', 0.0):.2f} s"
               for k, v in sorted(moved.items()) if k.endswith("_bytes") and v >= courier.THRESHOLD]
        peak = getattr(answer, "peak_reserved_bytes", None)
        peak = peak if isinstance(peak, int) and peak >= TRACE_PEAK_BYTES else None
        if big or peak or (isinstance(took, (int, float)) and took >= TRACE_OPS_S):
            note("%s %s%s%s", msg.get("op"), f"{took:.2f} s in the child" if isinstance(took, (int, float)) else "",
                 "; moved " + ", ".join(big) if big else "",
                 f"; the {self.role}'s allocator reached {peak / 2**20:.0f} MiB (said by the child)" if peak else "")
        if isinstance(answer, ChildOk):
            return answer.result
        err = answer.error
        kind = err.kind if err.kind in CHILD_KINDS else "bad_candidate"
        raise ChildFailed(kind, (err.message or "failed")[:4000], (err.detail or "")[:8000] or None)

    def _tails(self) -> str | None:
        parts = [self._capture_tail(i, 3000) for i in (1, 2)]  # stderr, then the boot log
        text = "\n".join(p for p in parts if p.strip())
        return text or None

    def output(self) -> tuple[str, str]:
        """The candidate's captured stdout/stderr (tails), read through the descriptors opened before its start."""
        return self._capture_tail(0), self._capture_tail(1)

    def _capture_tail(self, i: int, n: int = OUTPUT_TAIL_CHARS) -> str:
        f = self._captures[i]
        return "" if f.closed else safefs.tail_fd(f.fileno(), n)

    def _close_captures(self) -> None:
        for f in self._captures:
            f.close()

    def kill(self, close: bool = True) -> None:
        """Kill the process and everything it started; close the pipes unless a reader is still on them."""
        if not self.dead:
            self.dead = True
            self._reap()
        if close:
            self._close()

    def _reap(self) -> None:
        """SIGKILL the tree until none is left (a fork racing the signal), wait for the process, disown it."""
        if self.proc.poll() is None:  # not reaped yet: its number is its own until we wait
            sandbox.kill_tree(self.proc.pid)
        else:  # reaped already (a failed request asked how it ended): the number may be another process's now
            proctree.kill_attached(self.proc.pid)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            log.warning("child %s did not exit after SIGKILL", self.proc.pid)
        sandbox.disown(self.proc.pid)
        proctree.detach(self.proc.pid)
        if self.cgroup is not None:  # empty now: its processes are gone
            self.cgroup.remove()

    def _close(self) -> None:
        """Close its pipes and fd socket (our mappings of its memory released)."""
        if self._report is not None:
            self._report.close()
            self._report = None
        if self.courier is not None:
            self.courier.close()
        for s in (self.tx, self.rx):
            try:
                s.close()
            except (OSError, ValueError):
                pass

    def unnice(self) -> None:
        """Back to nice 0 for the job that took it (the whole sandboxed tree, every thread); where the host
        does not allow the nice value, every job's children stay at SPARE_NICE alike."""
        if SPARE_NICE and not self._unniced:
            self._unniced = sandbox.renice_tree(self.proc.pid, 0)

    def warm_profiler(self) -> None:
        """Start and stop a profiler session once in this child, before it loads any source (a cold spare
        taken for a benchmark's timed arm): its first session loads CUPTI, seconds that must not fall inside
        a timed arm's calibration."""
        if self.warm:
            return
        took = self.request({"op": "warm_profiler"}, timeout_s=WARM_TIMEOUT_S, max_bytes=1 << 20)
        self.warm = True
        note("profiler warmed in a cold spare: %s", took)

    def load_source(self, source: str, request: dict[str, Any], *, timeout_s: float) -> Any:
        """Load agent source (a candidate, a baseline) into this process. Nothing of an earlier job comes
        with it: no file a process that ran agent code wrote is kept (kernel_cache.py says why)."""
        del source  # (kept in the signature: callers name what they load)
        return self.request(request, timeout_s=timeout_s, max_bytes=0)

    def discard(self) -> None:
        """Kill and remove its scratch dir: nothing the job wrote persists."""
        self.stop()()

    def stop(self):
        """The first half of discard(), for the job's clock: SIGKILL to the process and everything it started,
        its pipes and fd socket closed (our mappings of its memory released). Returns the second half, to run
        anywhere (spares.retire: a background thread): wait for the processes to be gone (a CUDA context's
        teardown takes tenths of a second, longer on a busy host), close its capture files, remove the
        scratch dir."""
        was_dead = self.dead
        if not was_dead:
            self.dead = True
            if self.proc.poll() is None:  # (as in _reap: a reaped process's number is not its own)
                sandbox.kill_once(self.proc.pid)
            else:
                proctree.kill_attached(self.proc.pid)
        self._close()

        def finish() -> None:
            if not was_dead:
                self._reap()  # (kill_tree again: a fork that raced the first signal)
            self._close_captures()
            shutil.rmtree(self.scratch, ignore_errors=True)
        return finish


CAPTURE_NAMES = ("stdout.txt", "stderr.txt", ".boot.log")

