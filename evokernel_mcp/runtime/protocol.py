"""Messages between the server (pool.py) and a runner process (runner.py): JSON lines.

Server -> runner (the runner's stdin), one request per line (messages.py RunnerRequest; the payload the op's
request model, runtime/ops.py):
    {"id": int, "op": str, "payload": {...}, "scratch": "/path"}
Runner -> server (a private dup of the runner's original stdout; fd 1 itself is re-pointed to
stderr in the runner, so nothing printed can ever forge a message), a closed set of events (messages.py
RunnerEvent; a result's body the op's reply model):
    {"event": "ready",    "pid": int, "device": str, "info": {...}}
    {"event": "progress", "id": int, "done": float, "total": float, "message": str}
    {"event": "result",   "id": int, "result": {...}, "stdout": str, "stderr": str}
    {"event": "error",    "id": int, "error": ErrorInfo, "fatal": bool, "stdout": str, "stderr": str}
EOF, a line that is not JSON, or an unknown event means the runner is down: the in-flight call gets
a failed reply (kind "crash") and the pool starts a new runner before the next call.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from evokernel_mcp.models import ErrorInfo, Model
from evokernel_mcp.runtime import safefs
from evokernel_mcp.runtime.messages import RUNNER_EVENT, RunnerEvent, RunnerRequest

OUTPUT_TAIL_CHARS = 8000


class WorkerReply(Model):
    """What one op on a runner produced: a result dict, or an error (the candidate hung, crashed,
    faulted, raised). stdout/stderr are the candidate's captured output (tails, truncated)."""

    ok: bool
    result: dict[str, Any] | None = None
    error: ErrorInfo | None = None
    stdout: str = ""
    stderr: str = ""
    device: str = Field(description="Pool device id the op ran on ('cpu', 'cuda:0', 'rocm:0').")
    worker_pid: int | None = None
    worker_replaced: bool = Field(default=False, description="The runner was killed/lost after this op.")
    duration_s: float | None = Field(default=None, description="Wall time of the op inside the call, seconds.")
    worker_info: dict[str, Any] = Field(default_factory=dict, description="torch/triton versions, device name.")


class DecodeError(Exception):
    """A line from the runner is not a protocol event (the runner is considered down)."""


def _clean(obj: Any) -> Any:
    """Replace non-finite floats by strings so every message is strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def encode(msg: BaseModel | dict[str, Any]) -> bytes:
    """A message model (or its dump) as one JSON line; non-finite floats as strings."""
    if isinstance(msg, BaseModel):
        msg = msg.model_dump(by_alias=True, exclude_unset=False)
    return (json.dumps(_clean(msg), separators=(",", ":"), default=str) + "\n").encode()


def decode_event(line: bytes) -> RunnerEvent:
    """One runner line -> its event model; DecodeError for anything outside the closed set."""
    try:
        return RUNNER_EVENT.validate_json(line)
    except ValidationError as e:
        raise DecodeError(f"not a runner event ({e.error_count()} problems): {line[:200]!r}") from e


def decode_request(line: bytes) -> RunnerRequest:
    """One server line -> the request envelope (its payload is checked against the op's model next)."""
    try:
        return RunnerRequest.model_validate_json(line)
    except ValidationError as e:
        raise DecodeError(f"bad request ({e.error_count()} problems): {line[:200]!r}") from e


def tail(text: str, n: int = OUTPUT_TAIL_CHARS) -> str:
    return text if len(text) <= n else f"...[{len(text) - n} chars cut]...\n" + text[-n:]


def read_tail(path: str | os.PathLike, n: int = OUTPUT_TAIL_CHARS) -> str:
    """The last n characters of a capture file, reading only its end: a candidate that prints gigabytes
    before it hangs must not make the reader (the server, on a timeout) load them all. The file is opened
    without following a link or blocking, and only a regular file is read (safefs.py); '' otherwise."""
    return safefs.tail_file(path, n)


ErrorKind = Literal["timeout", "crash", "exception", "gpu_fault", "oom", "cancelled", "internal"]

_GPU_FAULT_MARKERS = (
    "illegal memory access", "illegal address", "memory access fault", "hsa_status_error",
    "cuda error", "hip error", "hiperror", "device-side assert", "unspecified launch failure",
    "misaligned address", "an illegal instruction", "gpu coredump", "page not present",
)
_OOM_MARKERS = ("out of memory", "outofmemoryerror", "hipErrorOutOfMemory".lower(), "cuda_error_out_of_memory")


def classify_text(text: str) -> ErrorKind | None:
    """'oom' / 'gpu_fault' when a message carries the device's words for them, else None."""
    low = text.lower()
    if any(m in low for m in _OOM_MARKERS):
        return "oom"
    if any(m in low for m in _GPU_FAULT_MARKERS):
        return "gpu_fault"
    return None
