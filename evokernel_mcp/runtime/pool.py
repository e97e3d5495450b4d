"""RunnerPool: one long-lived runner process per device (runtime/runner.py: harness code only; agent code
runs in its sandboxed children); ops run one at a time per device.

Devices: the devices setting (EVOKERNEL_DEVICES: "cpu" or "cuda:0,cuda:1" or "rocm:0") if set, else NVIDIA
GPUs from /proc/driver/nvidia/gpus, AMD GPUs from the KFD topology, else one "cpu" device (torch CPU, Triton
with TRITON_INTERPRET=1). A runner is pinned with CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES.

Failure handling (the only place it lives): an op that passes its time limit, a runner that dies
(segfault, os._exit, abort from a GPU memory fault), a fatal error event (CUDA/HIP error, OOM) or a
cancelled call: the runner's process group is killed, the reply says what happened with the
device's own message, and the next call starts a new runner. The server never mutates os.environ.

All methods must be awaited in one event loop (the JobManager's runtime loop).
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from anyio.streams.buffered import BufferedByteReceiveStream
from pydantic import BaseModel, ValidationError

from evokernel_mcp import settings
from evokernel_mcp.models import ErrorInfo
from evokernel_mcp.paths import REPO_DIR, prune_old_dirs, sub_state_dir
from evokernel_mcp.runtime import cpus, ops, protocol
from evokernel_mcp.runtime.messages import ErrorEvent, ProgressEvent, ResultEvent, RunnerEvent, RunnerRequest
from evokernel_mcp.runtime.protocol import WorkerReply

log = logging.getLogger(__name__)

ProgressFn = Callable[[float, float, str], Awaitable[None] | None]
MAX_LINE = 256 * 1024 * 1024


def discover_devices() -> list[str]:
    """Device ids for the pool (see module doc). Cheap: no torch import in the server."""
    told = settings.get().devices
    if told:
        return list(told)
    return host_gpus() or ["cpu"]


def host_gpus() -> list[str]:
    """This host's GPUs, whatever this process may see or is told to use: NVIDIA from /proc/driver/nvidia/gpus,
    AMD from the KFD topology (nodes with SIMDs); [] when there are none."""
    nv = Path("/proc/driver/nvidia/gpus")
    if nv.is_dir() and any(nv.iterdir()):
        return [f"cuda:{i}" for i in range(len(list(nv.iterdir())))]
    nodes = Path("/sys/class/kfd/kfd/topology/nodes")
    if Path("/dev/kfd").exists() and nodes.is_dir():
        gpus = 0
        for node in nodes.iterdir():
            props = node / "properties"
            try:
                text = props.read_text()
            except OSError:
                continue
            if any(line.startswith("simd_count") and line.split()[-1] != "0" for line in text.splitlines()):
                gpus += 1
        return [f"rocm:{i}" for i in range(gpus)]
    return []


def runner_env_for(device: str) -> dict[str, str]:
    """The runner's environment: an allow-list of ours (envs.runner_env), never the server's secrets (its
    HTTP token, names marked with serve --secret-env, anything that looks like a credential), which a child
    could otherwise read from the runner's /proc/<pid>/environ."""
    from evokernel_mcp.runtime.envs import runner_env

    env = runner_env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_DIR), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(settings.runner_env())  # this server's settings, its flags included
    kind, _, index = device.partition(":")
    if kind == "cpu":
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    elif kind == "cuda":
        env["CUDA_VISIBLE_DEVICES"] = index or "0"
    elif kind == "rocm":
        env["HIP_VISIBLE_DEVICES"] = index or "0"
    else:
        raise ValueError(f"bad device id {device!r}: use 'cpu', 'cuda:N' or 'rocm:N'")
    return env


def _events_text(events: list, limit: int = 6000) -> str:
    """A runner op's notes for the log. A request to a child that moved big tensors adds a note
    ("case 0.00 s in the child; moved arena 8 MiB in 0.00 s"), dozens per benchmark: the quick ones are summed
    into one, so that the stages of a long op stay readable within the limit."""
    keep, n, child_s, moved_s, routes = [], 0, 0.0, 0.0, {}
    for e in map(str, events):
        m = re.fullmatch(r"\w+ ([\d.]+) s in the child; moved (.*)", e)
        if m and float(m.group(1)) < 0.5:
            n, child_s = n + 1, child_s + float(m.group(1))
            for route, mib, s in re.findall(r"(\w+) (\d+) MiB in ([\d.]+) s", m.group(2)):
                moved_s += float(s)
                routes[route] = routes.get(route, 0) + int(mib)
        else:
            keep.append(e)
    if n:
        by = ", ".join(f"{r} {mib} MiB" for r, mib in routes.items())
        keep.append(f"{n} quick child requests with transfers: {child_s:.2f} s in the children, {moved_s:.2f} s "
                    f"moving (moved {by})")
    return "; ".join(keep)[:limit]


class _Runner:
    def __init__(self, device: str, proc: anyio.abc.Process, log_path: Path):
        self.device, self.proc, self.log_path = device, proc, log_path
        self.reader = BufferedByteReceiveStream(proc.stdout)
        self.info: dict[str, Any] = {}
        self.pid = proc.pid

    async def next_event(self) -> RunnerEvent:
        line = await self.reader.receive_until(b"\n", MAX_LINE)
        return protocol.decode_event(line)

    def log_tail(self, n: int = 4000) -> str:
        return protocol.read_tail(self.log_path, n)

    async def kill(self) -> None:
        with anyio.CancelScope(shield=True):
            from evokernel_mcp.runtime.sandbox import kill_tree

            kill_tree(self.pid)  # the runner and every sandboxed child, setsid'd ones included
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            with anyio.move_on_after(10):
                await self.proc.wait()
            await self.proc.aclose()


class RunnerPool:
    """One runner process per device. `call` runs an op on a device's runner and never raises for a
    candidate's misbehaviour: it returns a WorkerReply with ok=False and an ErrorInfo instead."""

    def __init__(self, devices: list[str] | None = None):
        self.devices = devices or discover_devices()
        self._runners: dict[str, _Runner] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self._next_id = 0
        self.restarts: dict[str, int] = {}
        self._warms: set[anyio.CancelScope] = set()  # start-up warms in flight (warm()), cancelled by aclose

    @property
    def default_device(self) -> str:
        return self.devices[0]

    def check_device(self, device: str | None) -> str:
        dev = device or self.default_device
        if dev not in self.devices:
            from evokernel_mcp.errors import BadInput

            raise BadInput(f"unknown device {dev!r}; this server has: {', '.join(self.devices)}")
        return dev

    def _cpu_share(self, device: str) -> str | None:
        """This device's share of the CPUs (the cpu_split setting, runtime/cpus.py), as a CPU list; None: all."""
        gpus = [d for d in self.devices if d != "cpu"]
        setting = cpus.split_setting()
        if setting == "off" or device not in gpus or len(gpus) < 2:
            return None
        if setting == "auto" and len(cpus.allowed()) < cpus.MIN_SHARE_CPUS * len(gpus):
            return None
        share = cpus.device_share(gpus.index(device), len(gpus))
        return cpus.format_list(share) if share != cpus.allowed() else None

    def _lock(self, device: str) -> anyio.Lock:
        return self._locks.setdefault(device, anyio.Lock())

    async def _start(self, device: str) -> _Runner:
        logs = sub_state_dir("workers")
        log_path = logs / f"{device.replace(':', '')}-{int(time.time())}-{secrets.token_hex(3)}.stderr.log"
        env = runner_env_for(device)
        share = self._cpu_share(device)
        if share:
            env[cpus.RUNNER_CPUS] = share
        with open(log_path, "wb") as err:
            proc = await anyio.open_process(
                [sys.executable, "-m", "evokernel_mcp.runtime.runner", "--device", device],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env,
                cwd=str(logs), start_new_session=True)
        w = _Runner(device, proc, log_path)
        try:
            with anyio.fail_after(settings.get().start_timeout_s):
                ev = await w.next_event()
            if ev.event != "ready":
                raise protocol.DecodeError(f"expected ready, got {ev.event}")
        except BaseException as e:
            await w.kill()
            if isinstance(e, Exception):
                raise RuntimeError(f"runner for {device} failed to start: {e!r}\n{w.log_tail()}") from e
            raise
        w.info = ev.info
        log.info("runner %s started for %s: %s", w.pid, device, w.info)
        return w

    async def ensure_runner(self, device: str) -> _Runner:
        w = self._runners.get(device)
        if w is None or w.proc.returncode is not None:
            w = self._runners[device] = await self._start(device)
        return w

    async def warm(self, device: str | None = None) -> bool:
        """Start `device`'s runner (and with it its spare children) now, off any call's clock: the server does
        it at start-up (settings.warm_start), so the first verify does not wait for torch, the device context
        and the spares. Under the device's lock, as a call's start is; a call that comes meanwhile waits for
        this start instead of making a second. False where the start failed (the next call tries again)."""
        device = self.check_device(device)
        t0 = time.perf_counter()
        scope = anyio.CancelScope()
        self._warms.add(scope)
        try:
            with scope:
                async with self._lock(device):
                    await self.ensure_runner(device)
                log.info("runner for %s warmed at start-up in %.1f s", device, time.perf_counter() - t0)
                return True
        except Exception as e:  # noqa: BLE001 - warming is an extra: the first call starts a runner as ever
            log.warning("warming the runner for %s failed (the first call starts one): %s", device, e)
        finally:
            self._warms.discard(scope)
        return False  # failed, or cancelled by aclose

    async def _drop(self, device: str) -> None:
        w = self._runners.pop(device, None)
        if w is not None:
            self.restarts[device] = self.restarts.get(device, 0) + 1
            await w.kill()

    async def call(self, device: str, op: str, payload: dict | BaseModel, *, timeout_s: float,
                   on_progress: ProgressFn | None = None, scratch_dir: str | Path | None = None) -> WorkerReply:
        """Run `op` (a runtime/ops.py name) with `payload` (its request model, or a dict of its fields) on `device`'s
        runner; the reply's result is checked against the op's reply model.

        timeout_s limits the op itself (not the runner's cold start). Returns a WorkerReply; errors of
        kind timeout/crash/gpu_fault/oom mean the runner was killed and will be replaced. Cancelling
        the caller kills the runner (its state mid-op is unknown) and re-raises the cancellation."""
        device = self.check_device(device)
        try:
            call = ops.make_call(self._next_id + 1, op, payload, None)
        except ValidationError as e:
            return WorkerReply(ok=False, device=device, error=ErrorInfo(
                kind="exception", message=f"the payload of runner op {op!r} does not match its model "
                f"({e.error_count()} problems)", detail=str(e)[:6000]))
        except ValueError as e:  # an op no runner serves
            return WorkerReply(ok=False, device=device, error=ErrorInfo(kind="exception", message=str(e)[:2000]))
        scratch = Path(scratch_dir) if scratch_dir else sub_state_dir("scratch") / secrets.token_hex(6)
        scratch.mkdir(parents=True, exist_ok=True)
        if not scratch_dir:
            prune_old_dirs(scratch.parent)
        async with self._lock(device):
            try:
                w = await self.ensure_runner(device)
            except RuntimeError as e:
                return WorkerReply(ok=False, device=device, error=ErrorInfo(
                    kind="internal", message=f"could not start the runner for {device}", detail=str(e)))
            self._next_id += 1
            req = call.model_copy(update={"id": self._next_id, "scratch": str(scratch)})
            return await self._exchange(w, req, timeout_s, on_progress, scratch)

    async def _exchange(self, w: _Runner, req: RunnerRequest, timeout_s: float, on_progress: ProgressFn | None,
                        scratch: Path) -> WorkerReply:
        t0 = time.perf_counter()
        base = {"device": w.device, "worker_pid": w.pid, "worker_info": w.info}
        try:
            with anyio.fail_after(timeout_s):
                await w.proc.stdin.send(protocol.encode(req))
                while True:
                    ev = await w.next_event()
                    if getattr(ev, "id", None) != req.id:  # a stale or forged event: never attribute it to this job
                        raise protocol.DecodeError(f"{ev.event} event for request {getattr(ev, 'id', None)!r} while "
                                                   f"request {req.id} is in flight")
                    if isinstance(ev, ProgressEvent) and on_progress is not None:
                        res = on_progress(ev.done, ev.total, ev.message)
                        if res is not None:
                            await res
                    elif isinstance(ev, (ResultEvent, ErrorEvent)):
                        break
        except TimeoutError:
            await self._drop(w.device)
            out, err = _read_capture(scratch)
            return WorkerReply(ok=False, stdout=out, stderr=err, worker_replaced=True, **base,
                               duration_s=time.perf_counter() - t0, error=ErrorInfo(
                                   kind="timeout", message=f"{req.op} did not finish within {timeout_s:g} s; "
                                   "the runner was killed and is replaced. Look for an endless loop or a deadlock (a "
                                   "kernel waiting on a flag, a grid that never ends), or raise timeout_s for a big "
                                   "problem",
                                   detail=protocol.tail(err, 2000) or None))
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, anyio.ClosedResourceError,
                anyio.DelimiterNotFound, protocol.DecodeError, OSError) as e:
            return await self._lost(w, req, scratch, t0, base, e)
        except BaseException:
            await self._drop(w.device)  # cancelled mid-op: the runner's state is unknown
            raise
        out, err = ev.stdout, ev.stderr
        dur = ev.duration_s if ev.duration_s is not None else time.perf_counter() - t0
        if ev.events:
            log.info("%s on %s: %.2f s; %s", req.op, w.device, dur, _events_text(ev.events))
        if isinstance(ev, ResultEvent):
            try:
                result = ops.reply_dict(ops.reply_of(req.op, ev.result), ev.result)
            except ValidationError as e:  # harness code answered off its model: a defect, said as such
                return WorkerReply(ok=False, stdout=out, stderr=err, duration_s=dur, **base, error=ErrorInfo(
                    kind="internal", message=f"the runner's reply to {req.op} does not match its model "
                    f"({e.error_count()} problems)", detail=str(e)[:6000]))
            return WorkerReply(ok=True, result=result, stdout=out, stderr=err, duration_s=dur, **base)
        if ev.fatal:
            await self._drop(w.device)
        return WorkerReply(ok=False, error=ev.error, stdout=out, stderr=err, duration_s=dur,
                           worker_replaced=ev.fatal, **base)

    async def _lost(self, w: _Runner, req: RunnerRequest, scratch: Path, t0: float, base: dict, e: BaseException) -> WorkerReply:
        with anyio.move_on_after(0.2 if isinstance(e, protocol.DecodeError) else 5):  # garbled but alive: no exit to wait for
            await w.proc.wait()
        rc = w.proc.returncode
        await self._drop(w.device)
        out, err = _read_capture(scratch)
        said = err + "\n" + w.log_tail()
        device_msg = protocol.tail(said, 3000).strip()
        fatal = next((ln for ln in said.splitlines() if ln.startswith("Fatal Python error:")), "")
        if fatal and fatal not in device_msg:  # faulthandler's first line, before a dump of every thread's stack
            device_msg = fatal + "\n" + device_msg
        if rc is not None and rc < 0:
            try:
                how = f"was killed by {signal.Signals(-rc).name}"
            except ValueError:
                how = f"was killed by signal {-rc}"
        elif rc is not None:
            how = f"exited with code {rc}"
        else:
            how = f"stopped speaking the protocol ({e!r})"
        kind = protocol.classify_text(device_msg) or "crash"
        msg = f"the runner, running {req.op}, {how}; it is replaced before the next job"
        if device_msg:
            msg += ". Device/runner message: " + _key_line(device_msg)
        return WorkerReply(ok=False, stdout=out, stderr=err, worker_replaced=True, duration_s=time.perf_counter() - t0,
                           error=ErrorInfo(kind=kind, message=msg, detail=device_msg or None), **base)

    async def aclose(self) -> None:
        for scope in list(self._warms):  # a runner still starting is killed by its start's own cleanup
            scope.cancel()
        for device in list(self._runners):
            w = self._runners.pop(device)
            with anyio.CancelScope(shield=True):
                try:
                    await w.proc.stdin.aclose()
                except Exception:  # noqa: BLE001
                    pass
                with anyio.move_on_after(2):
                    await w.proc.wait()
                await w.kill()


def _read_capture(scratch: Path) -> tuple[str, str]:
    return protocol.read_tail(scratch / "stdout.txt"), protocol.read_tail(scratch / "stderr.txt")


def _key_line(text: str) -> str:
    """The line of a crash log that says what happened (a fault/error line), else the last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if protocol.classify_text(ln) or "fatal" in ln.lower() or "error" in ln.lower():
            return ln[:500]
    return lines[-1][:500] if lines else ""
