"""Worker process entry: `python -m evokernel_mcp.runtime.worker --device cpu|cuda:N|rocm:N`.

Started by pool.py, pinned to one device by CUDA_VISIBLE_DEVICES/HIP_VISIBLE_DEVICES (so torch sees
it as cuda:0), or on CPU with TRITON_INTERPRET=1. Imports torch and triton once, then serves ops
(runtime/ops.py) one at a time from stdin until EOF.

Tamper check: before each op the worker snapshots torch's functions, global torch settings and the
harness's functions (guard.py); an op after which any of them changed fails as "bad_candidate" and the
worker exits, so the next job gets a clean process.

Protocol fd: at start the original stdout (the pipe the pool reads) is dup'ed to a private fd and
fd 1 is re-pointed to stderr; during an op fd 1 and fd 2 go to capture files in the op's scratch
dir. Candidate output therefore never mixes with protocol messages (see protocol.py).
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import sys
import time
import traceback
from typing import Any

from evokernel_mcp.runtime import guard, protocol
from evokernel_mcp.runtime.ops import resolve


class Channel:
    def __init__(self, fd: int):
        self._fd = fd

    def send(self, msg: dict[str, Any]) -> None:
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
    info: dict[str, Any] = {"python": sys.version.split()[0]}
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

            _timing._bind_event_api()  # (the profiler for the activity clock starts in the first benchmark)
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
        import evokernel_mcp.verify  # noqa: F401
    except Exception:  # noqa: BLE001
        pass
    return info


def _error_event(req_id: int, e: BaseException) -> dict[str, Any]:
    text = f"{type(e).__name__}: {e}"
    kind = protocol.classify_text(text) or "exception"
    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    # After any device error the CUDA/HIP context may be poisoned (sticky): ask for a new worker.
    fatal = kind in ("gpu_fault", "oom") or protocol.classify_text(tb) == "gpu_fault"
    return {"event": "error", "id": req_id, "fatal": fatal,
            "error": {"kind": kind, "message": protocol.tail(text, 2000), "detail": protocol.tail(tb, 6000)}}


def serve(device: str, chan: Channel) -> None:
    chan.send({"event": "ready", "pid": os.getpid(), "device": device, "info": _import_stack(device)})
    home = os.getcwd()
    snapshot, changes, tamper_error = guard.snapshot, guard.changes, guard.tamper_error  # bound before any op
    arm_rebase = guard.arm_rebase
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        req = protocol.decode_request(line)
        req_id, scratch = req["id"], req.get("scratch") or home
        os.makedirs(scratch, exist_ok=True)

        def progress(done: float, total: float, message: str = "", _id: int = req_id) -> None:
            chan.send({"event": "progress", "id": _id, "done": done, "total": total, "message": message})

        cap = Capture(scratch)
        state = {"before": snapshot()}
        arm_rebase(lambda st=state: st.update(before=snapshot()))
        t0 = time.perf_counter()
        try:
            fn = resolve(req["op"])
            os.chdir(scratch)
            with cap:
                result = fn(req["payload"], progress)
            msg: dict[str, Any] = {"event": "result", "id": req_id, "result": result}
        except Exception as e:  # noqa: BLE001 - every failure becomes an error event
            msg = _error_event(req_id, e)
        finally:
            os.chdir(home)
            arm_rebase(None)
        changed = changes(state["before"])
        if changed:  # torch/harness patched: nothing this worker computes from now on can be trusted
            msg = {"event": "error", "id": req_id, "fatal": True, "error": tamper_error(changed)}
        msg["duration_s"] = time.perf_counter() - t0
        msg["stdout"], msg["stderr"] = cap.read()
        chan.send(msg)
        if msg.get("fatal"):
            os._exit(70)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    proto_fd = os.dup(1)
    os.dup2(2, 1)  # print() in anything we import goes to stderr, never to the protocol pipe
    faulthandler.enable(file=sys.stderr, all_threads=True)
    serve(args.device, Channel(proto_fd))


if __name__ == "__main__":
    main()
