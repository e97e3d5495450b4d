"""A sandboxed child: `python -m evokernel_mcp.runtime.child --device cpu|cuda`, started by the runner
inside the sandbox (sandbox.py). It imports torch and triton and creates the device context, says
"ready", then waits (a spare). Its first request loads ONE source (a candidate, or a reference) and it
serves only that source until it is killed: no process ever runs code from two sources.

Protocol (frames.py): requests on stdin, replies on a private dup of the original stdout; fd 1 and 2
point at capped files in the scratch dir (stdout.txt, stderr.txt; the runner made them and reads them
through its own descriptors, whatever the agent later puts at those names) from the start, so nothing the agent
prints can reach the protocol except by writing to it on purpose, which only spoils its own job.
Replies: {"ok": true, "result": ...} or {"ok": false, "error": {kind, message, detail}} (messages.py: ChildOk,
ChildErr; the requests are messages.py ChildRequest, one model per op, checked on receipt).
The ops (verify/sides.py, benchmark/sides.py) are harness code that calls into the loaded module.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import importlib
import os
import sys
import time
import traceback
from typing import Any

from pydantic import BaseModel

from evokernel_mcp.runtime import frames
from evokernel_mcp.runtime.devmem import map_tensors, release_cached
from evokernel_mcp.runtime.messages import CHILD_REQUEST, ChildErr, ChildError, ChildGate, ChildOk, ChildReady

_ARM = {op: f"evokernel_mcp.benchmark.sides:{op}" for op in ("arm_init", "arm_ready", "arm_park", "arm_block",
                                                                 "arm_times", "arm_report", "arm_close")}
OPS = {
    "reference": {"case": "evokernel_mcp.verify.sides:ref_case", "plan": "evokernel_mcp.verify.sides:ref_plan",
                  "expected": "evokernel_mcp.verify.sides:ref_expected", **_ARM},
    "candidate": {"run": "evokernel_mcp.verify.cand_side:cand_run", **_ARM,
                  "settled": "evokernel_mcp.benchmark.sides:cand_settled",
                  "bench_checks": "evokernel_mcp.benchmark.sides:cand_checks",
                  "profile_run": "evokernel_mcp.profile.sides:profile_run"},
}
# After these ops the process gives the device memory its allocator caches back to the driver: GPU memory
# one process caches is memory no other can use (the runner, the candidate, the next job's reference).
# Never after timing ops: the timed callable's allocations must stay as warm as the warm-up left them.
TRIM_AFTER = frozenset({"load", "case", "expected", "run", "settled", "bench_checks", "arm_report", "arm_close"})
MAX_REQUEST_BYTES = 1 << 40  # the runner is trusted: its requests are not limited


class Loaded:
    """What the one load request produced: the role, the module, the task, per-seed built models."""

    def __init__(self, role: str, module: Any, task: Any, device: str):
        self.role, self.module, self.task, self.device = role, module, task, device
        self.models: dict[Any, Any] = {}


def warm_profiler() -> dict[str, Any]:
    """The first profiler session in a process loads and starts CUPTI (seconds): done once while the process
    is a spare (started with --warm-profiler, or op "warm_profiler" before it loads a source), so that a
    benchmark's activity clock starts warm. Only the benchmark's timed arms need it."""
    t0 = time.perf_counter()
    try:
        import torch

        from evokernel_mcp.benchmark.activity import TorchActivity  # the session the timed arms open

        with TorchActivity():
            (torch.ones(16, device="cuda") + 1).sum().item()
    except Exception as e:  # noqa: BLE001 - the benchmark reports a profiler that cannot start
        return {"profiler_warm_error": repr(e), "profiler_s": round(time.perf_counter() - t0, 2)}
    return {"profiler_s": round(time.perf_counter() - t0, 2)}


def _triton_key() -> str:
    """Triton's key of its own install: hashes of its compiler and backend files, cached per process, asked for
    by a process's first JIT call (cache hit or not; ~0.5 s on a GPU host, 1.3 s on a small VM). The first
    spare computes it; the runner hands it to later ones (_EVOKERNEL_TRITON_KEY, from that spare's ready info,
    sent before any agent code ran there), and it replaces the function where Triton's modules hold it, as
    Triton's own preload workers do (triton.runtime.cache.triton_key = lambda: key)."""
    given = os.environ.pop("_EVOKERNEL_TRITON_KEY", "")
    try:
        from triton.compiler.compiler import triton_key as orig
    except ImportError:  # moved in later Triton releases
        from triton.runtime.cache import triton_key as orig
    if not given:
        return orig()

    def fixed() -> str:
        return given

    for name, mod in list(sys.modules.items()):
        if mod is not None and (name == "triton" or name.startswith("triton.")):
            for attr, val in list(vars(mod).items()):
                if val is orig:
                    setattr(mod, attr, fixed)
    return given


def _info(device: str, warm: bool = True, gate=None, stack_bytes: int = 0) -> dict[str, Any]:
    info: dict[str, Any] = {"python": sys.version.split()[0], "pid": os.getpid(), "uid": os.getuid()}
    if sys.pycache_prefix:  # the runner's bytecode (runtime/pycache.py)
        info["pycache_prefix"] = sys.pycache_prefix
    boot: dict[str, float] = {}  # where a spare's start goes (seconds per phase), for the job's events
    try:  # from the runner's Popen to here: the sandbox, the interpreter, the imports before torch
        boot["exec"] = round(time.time() - float(os.environ.pop("_EVOKERNEL_SPAWNED_AT")), 2)
    except (KeyError, ValueError):
        pass
    t = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        boot[name], t = round(now - t, 2), now

    import torch

    info["torch"] = torch.__version__
    lap("torch")
    if device != "cpu":  # CPU work first, then the device (the gate holds only the device phase back)
        try:
            import triton

            info["triton"] = triton.__version__
            info["triton_key"] = _triton_key()
        except Exception as e:  # noqa: BLE001
            info["triton_error"] = repr(e)
        lap("triton_key")
    if device != "cpu" and not warm:
        # a process's first op on meta tensors imports torch._dynamo (1-4 s, ~150 MB): a KernelBench reference's
        # first case (and a big case of a declared-shape task) plans its memory on meta (verify/memory.py), and the
        # cached reference is a cold (untimed) child, so a cold GPU spare pays it now, not the first verify of a
        # new reference; before the device gate (no device work), so a benchmark's timing never waits for it.
        # Timed arms never run meta ops and stay without it; the CPU path (few cores, many spares in tests) pays
        # it in the case.
        meta = torch.empty(2, device="meta")
        meta + meta  # noqa: B018
        lap("meta")
    if gate is not None:  # the device is touched from here on: only when the runner says
        gate()  # (it holds spares back from the GPU while a benchmark times there)
        lap("gate")
    if device != "cpu" and torch.cuda.is_available():
        torch.cuda.init()
        torch.zeros(1, device="cuda")  # the context, ahead of the job
        info["device_name"] = torch.cuda.get_device_name(0)
        if stack_bytes:  # before any agent code: the context's reserved stack (runtime/cuda_stack.py)
            from evokernel_mcp.runtime.cuda_stack import limit_stack

            info["cuda_stack_bytes"] = limit_stack(stack_bytes)
    else:
        info["device_name"] = "cpu"
    lap("device")
    if info["device_name"] == "cpu":  # the version only: importing Triton costs a CPU child's start 0.16 s of its
        import importlib.metadata  # 1.4 s, and a CPU candidate that uses Triton imports it itself

        try:
            info["triton"] = importlib.metadata.version("triton")
        except importlib.metadata.PackageNotFoundError as e:
            info["triton_error"] = repr(e)
    else:
        try:
            import triton

            info["triton"] = triton.__version__
            # Triton builds its driver module (a C compile) on first use: now, while this process is a spare
            from triton.runtime import driver

            driver.active.get_current_device()
            # a fresh process's first JIT call asks ptxas for its version (cached per process), cache hit or not
            from triton.compiler.compiler import make_backend

            make_backend(driver.active.get_current_target()).hash()
        except Exception as e:  # noqa: BLE001
            info["triton_error"] = repr(e)
    lap("triton")
    if warm and info["device_name"] != "cpu":
        info.update(warm_profiler())
        lap("profiler")
    import evokernel_mcp.benchmark.sides  # noqa: F401 - warm the harness sides, off the job's clock
    import evokernel_mcp.verify.cand_side  # noqa: F401
    import evokernel_mcp.verify.sides  # noqa: F401
    lap("harness")
    info["boot_s"] = boot
    return info


def _load(req: dict[str, Any], device: str) -> Loaded:
    from evokernel_mcp import candidate as cand
    from evokernel_mcp.runtime.proctree import name_self
    from evokernel_mcp.tasks import Task

    role, task = req["role"], Task(**req["task"])
    name_self(role)
    if role == "reference":
        mod = cand.load_module(task.reference_source, "reference", ".")
    elif role == "candidate":
        mod = cand.load_candidate_module(req["source"], ".")
    else:
        raise ValueError(f"unknown role {role!r}")
    return Loaded(role, mod, task, "cuda" if device != "cpu" else "cpu")


def _error(e: BaseException, kind: str | None = None) -> ChildError:
    from evokernel_mcp.runtime.protocol import classify_text, tail

    text = f"{type(e).__name__}: {e}"
    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    k = kind or getattr(e, "kind", None) or classify_text(text) or "exception"
    if not isinstance(k, str) or len(k) > 64:  # an exception of the agent's with a `kind` of its own making
        k = "bad_candidate"
    return ChildError(kind=k, message=tail(text, 2000), detail=tail(tb, 6000))


def _peak_reset(device: str) -> None:
    if device != "cpu":
        import torch

        torch.cuda.reset_peak_memory_stats()


def _peak(device: str) -> int | None:
    """The allocator's peak reserved bytes since _peak_reset (GPU), for the runner's log."""
    if device == "cpu":
        return None
    import torch

    return int(torch.cuda.max_memory_reserved())


def _side(target: str):
    """The harness function a "module:function" target of OPS names."""
    module, _, func = target.partition(":")
    return getattr(importlib.import_module(module), func)


def _send(out, model: BaseModel, courier=None) -> None:
    """A reply or event model to the runner (frames.py); tensors in it stay tensors (model_dump keeps them)."""
    box = [model.model_dump(exclude_unset=True)]
    frames.write(out, box, courier)


def serve(device: str, out, courier=None, warm: bool = True, gated: bool = False, stack_bytes: int = 0) -> None:
    from evokernel_mcp import candidate as cand

    def gate() -> None:
        _send(out, ChildGate(event="gate"))
        CHILD_REQUEST.validate_python(frames.read(sys.stdin.buffer, max_bytes=0, device=None, courier=courier))  # go

    _send(out, ChildReady(event="ready", info=_info(device, warm, gate if gated else None, stack_bytes)))
    loaded: Loaded | None = None
    inp = sys.stdin.buffer
    while True:
        try:
            req = frames.read(inp, max_bytes=MAX_REQUEST_BYTES, device=None, courier=courier)
        except EOFError:
            return
        except Exception as e:  # noqa: BLE001 - e.g. no device memory for the inputs: say so, then stop (the
            _send(out, ChildErr(ok=False, error=_error(e)))  # stream may be out of step with the runner)
            return
        t0 = time.perf_counter()
        try:
            CHILD_REQUEST.validate_python(req)  # the runner builds it from these models: a check, no copy of tensors
            if req.get("op") == "warm_profiler":  # harness code, only before any source is loaded
                if loaded is not None:
                    raise RuntimeError("warm_profiler is served only before a source is loaded")
                result = warm_profiler() if device != "cpu" else {}
            elif req.get("op") == "load":
                if loaded is not None:
                    raise RuntimeError("this process has loaded a source already")
                loaded = _load(req, device)
                result: Any = {"loaded": req["role"]}
            else:
                if loaded is None:
                    raise RuntimeError("load a source first")
                target = OPS[loaded.role].get(req.get("op"))
                if target is None:
                    raise ValueError(f"op {req.get('op')!r} is not served to a {loaded.role}")
                _peak_reset(loaded.device)
                result = _side(target)(loaded, req)
            reply: BaseModel = ChildOk(ok=True, result=result, duration_s=time.perf_counter() - t0,
                                       peak_reserved_bytes=_peak(loaded.device if loaded is not None else "cpu"))
        except cand.CandidateError as e:
            reply = ChildErr(ok=False, error=_error(e, "bad_candidate"))
        except Exception as e:  # noqa: BLE001 - every failure becomes an error reply
            reply = ChildErr(ok=False, error=_error(e))
        op = req.get("op")
        # through_host: the runner keeps this reply in host memory; its tensors leave the device here first, so
        # the export each is sent by (courier.from_host) is its only device copy, not a second one beside it
        via_host = courier is not None and req.get("through_host") is True
        box = [reply.model_dump(exclude_unset=True)]  # frames.write takes the reply out and lets each big tensor
        reply = result = req = None  # go once it is sent
        if via_host:
            box = [map_tensors(box[0], lambda t: t.cpu())]
        if op in TRIM_AFTER:  # before the reply: what the op cached (a clone of the inputs, a forward's
            release_cached(256 << 20)  # temporaries) is not held while the reply's export copies are made
        try:
            with courier.from_host() if via_host else contextlib.nullcontext():
                frames.write(out, box, courier)
        except Exception as e:  # noqa: BLE001 - an output the wire cannot carry: this job's error, not a crash
            broken = courier is not None and courier.sent_fds()  # fds went without their header: the runner's
            _send(out, ChildErr(ok=False, error=_error(e, "bad_candidate" if isinstance(e, frames.FrameError)
                                                       else None)), courier)
            if broken:  # count of them is now behind ours: this process serves nothing more (the error stands)
                return
        if op in TRIM_AFTER:
            release_cached(256 << 20)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--fd-sock", type=int, default=None, help="unix socket for tensors sent by fd")
    ap.add_argument("--warm-profiler", action="store_true", help="start and stop a profiler session while a spare")
    ap.add_argument("--gpu-gate", action="store_true", help="wait for the runner's go before touching the device")
    ap.add_argument("--cuda-stack", type=int, default=0, help="the context's per-thread stack limit in bytes "
                    "(0: the driver's default)")
    ap.add_argument("--capture-fds", default=None, help="OUT,ERR: fds of the capture files the runner opened; "
                    "without it (a child under a profiler, which may not pass descriptors on) the files of those "
                    "names the runner made in the scratch dir, opened before any agent code runs")
    args = ap.parse_args()
    from evokernel_mcp.runtime.proctree import name_self
    from evokernel_mcp.runtime.sandbox import not_dumpable

    not_dumpable()
    name_self("spare")
    proto = os.fdopen(os.dup(1), "wb", buffering=1 << 20)
    if args.capture_fds:
        given = [int(x) for x in args.capture_fds.split(",")]
    else:  # the same files by name: nothing of the candidate has run yet, so the names are still the runner's
        given = [os.open(n, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW) for n in ("stdout.txt", "stderr.txt")]
    for fd, g in zip((1, 2), given):
        os.dup2(g, fd)  # the capture files the runner made and reads through its own descriptors
        os.close(g)
    faulthandler.enable(file=sys.stderr, all_threads=True)
    courier = None
    if args.fd_sock is not None:
        import socket

        from evokernel_mcp.runtime.courier import Courier

        os.set_inheritable(args.fd_sock, False)  # nothing the candidate starts gets it
        courier = Courier(socket.socket(fileno=args.fd_sock), adopt=True)  # its peer is the runner
    serve(args.device, proto, courier, warm=args.warm_profiler, gated=args.gpu_gate, stack_bytes=args.cuda_stack)


if __name__ == "__main__":
    main()
