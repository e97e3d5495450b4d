"""The runner: `python -m evokernel_mcp.runtime.runner --device cpu|cuda:N|rocm:N`, one per device, started
by pool.py. It is made of harness code only and NEVER imports agent code: it owns the verdict.

Agent code (candidates, references) runs in sandboxed children (spares.py, child.py) that each serve
one source; the runner sends them inputs, receives their outputs as tensors (frames.py: numbers, no
pickle), compares, checks and builds the result. The runner is a child subreaper, so whatever a
child starts (setsid included) stays in reach of kill_tree until it is gone.

Protocol with the server (protocol.py, messages.py; each op's request and reply models in ops.py): requests on
stdin; events on a private dup of the original stdout (fd 1 re-pointed to stderr, so nothing we import can write protocol lines).
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import sys
import time
import traceback
from typing import Any

from evokernel_mcp.models import ErrorInfo
from evokernel_mcp.runtime import child_proc, ops, protocol, pycache, sandbox, spares, zygote_link
from evokernel_mcp.runtime.context import RunnerContext
from evokernel_mcp.runtime.devmem import release_cached
from evokernel_mcp.runtime.messages import ErrorEvent, ProgressEvent, ReadyEvent, ResultEvent, RunnerEvent


class Channel:
    def __init__(self, fd: int):
        self._fd = fd

    def send(self, msg: RunnerEvent) -> None:
        data = protocol.encode(msg)
        while data:
            n = os.write(self._fd, data)
            data = data[n:]


class Capture:
    """Point fd 1 and fd 2 at files in the scratch dir for the duration of one op."""

    def __init__(self, scratch: str):
        self.paths = (os.path.join(scratch, "stdout.txt"), os.path.join(scratch, "stderr.txt"))

    def __enter__(self) -> "Capture":
        sys.stdout.flush()
        sys.stderr.flush()
        self._saved = (os.dup(1), os.dup(2))
        for fd, path in zip((1, 2), self.paths):
            f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(f, fd)
            os.close(f)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, saved in zip((1, 2), self._saved):
            os.dup2(saved, fd)
            os.close(saved)

    def read(self) -> tuple[str, str]:
        return protocol.read_tail(self.paths[0]), protocol.read_tail(self.paths[1])


def _import_stack(device: str) -> dict[str, Any]:
    from evokernel_mcp.runtime.cpus import allowed, format_list

    info: dict[str, Any] = {"python": sys.version.split()[0], "cpus": format_list(allowed())}
    try:
        import torch

        info["torch"] = torch.__version__
        info["hip"] = getattr(torch.version, "hip", None)
        info["cuda"] = getattr(torch.version, "cuda", None)
        if device != "cpu" and torch.cuda.is_available():
            torch.cuda.init()
            info["device_name"] = torch.cuda.get_device_name(0)
            # bind the timer (events, elapsed_time, synchronize) before any candidate can patch torch
            from evokernel_mcp.benchmark import timing as _timing

            _timing.bind_event_api()  # (the profiler for the activity clock starts in the first benchmark)
            from evokernel_mcp import settings
            from evokernel_mcp.runtime.cuda_stack import limit_stack

            info["cuda_stack_bytes"] = limit_stack(settings.get().cuda_stack_bytes)  # its context, made now
        else:
            info["device_name"] = "cpu"
    except Exception as e:  # noqa: BLE001 - reported to the pool, not fatal for ping
        info["torch_error"] = repr(e)
    try:
        import triton

        info["triton"] = triton.__version__
    except Exception as e:  # noqa: BLE001
        info["triton_error"] = repr(e)
    try:  # warm the verify path so the first verify pays no import
        import evokernel_mcp.verify.runner_side  # noqa: F401
    except Exception:  # noqa: BLE001
        log_exc()
    return info


def _cpu_s() -> float:
    """This process's CPU time (user + system, all its threads)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _error_event(req_id: int, e: BaseException) -> ErrorEvent:
    text = f"{type(e).__name__}: {e}"
    kind = protocol.classify_text(text) or "exception"
    role = None
    if isinstance(e, MemoryError) or (kind == "oom" and not hasattr(e, "role")):  # the runner's own (harness code)
        kind, role = "oom", "runner"
        text = f"the runner process (harness code) ran out of memory: {text}"
    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    # After any device error the CUDA/HIP context may be poisoned (sticky): ask for a new runner.
    fatal = kind in ("gpu_fault", "oom") or protocol.classify_text(tb) == "gpu_fault"
    return ErrorEvent(event="error", id=req_id, fatal=fatal, error=ErrorInfo(
        kind=kind, message=protocol.tail(text, 2000), detail=protocol.tail(tb, 6000), role=role))


def log_exc() -> None:
    traceback.print_exc(file=sys.stderr)


def _start_reaper(every_s: float = 0.5) -> None:
    """Orphans of killed children re-parent to us (a subreaper) and may die after the op that killed them
    ended: collected every every_s, so a long-lived runner keeps no zombies between jobs."""
    import threading

    def loop() -> None:
        while True:
            time.sleep(every_s)
            try:
                sandbox.reap_zombies()
            except Exception:  # noqa: BLE001 - /proc racing a process's exit; next round
                pass

    threading.Thread(target=loop, daemon=True, name="evokernel-reaper").start()


def serve(device: str, chan: Channel) -> None:
    sandbox.become_subreaper()
    _start_reaper()
    t0 = time.perf_counter()
    if pycache.prepare():  # before the first spare: where torch ships no bytecode, children read ours
        child_proc.note("bytecode for children written in %.1f s (%s)", time.perf_counter() - t0, pycache.ACTIVE)
    ctx = RunnerContext(device)  # what every op gets, as its first argument
    ctx.spares.replenish()
    chan.send(ReadyEvent(event="ready", pid=os.getpid(), device=device, info=_import_stack(device)))
    home = os.getcwd()
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        req = protocol.decode_request(line)
        scratch = req.scratch or home
        os.makedirs(scratch, exist_ok=True)

        def progress(done: float, total: float, message: str = "", _id: int = req.id) -> None:
            chan.send(ProgressEvent(event="progress", id=_id, done=done, total=total, message=message))

        cap = Capture(scratch)
        child_proc.reset_requests()
        cpu0 = _cpu_s()
        t0 = time.perf_counter()
        try:
            fn = ops.resolve(req.op)  # (an unknown op: ValueError naming the known ones)
            call = ops.RUNNER_CALL.validate_python(req.model_dump())  # the payload as its op's model
            os.chdir(scratch)
            with cap:
                given = fn(ctx, call.payload, progress)
            done: ResultEvent | ErrorEvent = ResultEvent(event="result", id=req.id, result=ops.reply_dict(
                ops.reply_of(req.op, given), given))
        except Exception as e:  # noqa: BLE001 - every failure becomes an error event
            done = _error_event(req.id, e)
        finally:
            os.chdir(home)
            try:
                ctx.spares.end_hold()  # spares given back for this job's room start again
                ctx.spares.trim_references()  # cached reference processes within their memory budget
            except Exception:  # noqa: BLE001 - a /proc race; the next job trims again
                log_exc()
            sandbox.reap_zombies()
            release_cached()  # what this job left cached: the next job's children need it
        done.duration_s = time.perf_counter() - t0
        asked = child_proc.reset_requests()  # first: the server logs the first events of a long list only
        done.events = [f"op {req.op}: {done.duration_s:.2f} s, {asked['n']} child requests "
                       f"{asked['wall_s']:.2f} s ({asked['child_s']:.2f} s in the children), runner CPU "
                       f"{_cpu_s() - cpu0:.2f} s", *spares.drain_events()]
        done.stdout, done.stderr = cap.read()
        chan.send(done)
        if isinstance(done, ErrorEvent) and done.fatal:
            ctx.spares.close()
            os._exit(70)
    ctx.spares.close()
    zygote_link.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    from evokernel_mcp.runtime.cpus import apply_runner_cpus
    from evokernel_mcp.runtime.proctree import name_self

    name_self("runner")
    from evokernel_mcp.runtime.devmem import runner_alloc_env

    runner_alloc_env(os.environ)  # before torch: no small allocation pins a big cached block (devmem.py)

    apply_runner_cpus()  # this GPU's share of the CPUs (the cpu_split setting), before torch sizes its thread pool
    proto_fd = os.dup(1)
    os.dup2(2, 1)  # print() in anything we import goes to stderr, never to the protocol pipe
    faulthandler.enable(file=sys.stderr, all_threads=True)
    serve(args.device, Channel(proto_fd))
    # end of input: the server is done with this runner and its children are gone. Skip the interpreter's
    # teardown (seconds of garbage collection with torch loaded, which the server would wait for, then kill).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
