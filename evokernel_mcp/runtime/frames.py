"""Messages with tensors between the runner and a sandboxed child, over pipes, with no pickle.

A message is one JSON line (at most MAX_HEADER bytes) followed by the raw bytes of its tensors:
    {"msg": {...}, "tensors": [{"dtype": "float32", "shape": [2, 3], "nbytes": 24}, ...]}\\n<bytes><bytes>...
Inside "msg", a tensor stands as {"__t__": i} (its index in "tensors"); a tuple as {"__tuple__": [...]}.
The runner decodes what a child sends with limits it sets (bytes in all, dtypes allowed), so a
child that lies, floods or sends garbage gets an error for its own job and nothing else: no code
crosses, only numbers (the trust model in ARCHITECTURE.md).
"""

from __future__ import annotations

import json
import math
from typing import IO, Any

MAX_HEADER = 16 * 1024 * 1024
DTYPES = ("float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "int64", "int32",
          "int16", "int8", "uint8", "bool", "complex64", "complex128")
CHUNK = 8 * 1024 * 1024


class FrameError(Exception):
    """A message is malformed or over its limits (the sender is not trusted: this ends its job)."""


def _dtype(name: str):
    import torch

    if name not in DTYPES:
        raise FrameError(f"tensor dtype {name!r} is not allowed (allowed: {', '.join(DTYPES)})")
    return getattr(torch, name)


def _clean(x: float) -> Any:
    return x if math.isfinite(x) else {"__f__": repr(x)}


def _pack(obj: Any, tensors: list) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        tensors.append(obj)
        return {"__t__": len(tensors) - 1}
    if isinstance(obj, tuple):
        return {"__tuple__": [_pack(v, tensors) for v in obj]}
    if isinstance(obj, list):
        return [_pack(v, tensors) for v in obj]
    if isinstance(obj, dict):
        return {str(k): _pack(v, tensors) for k, v in obj.items()}
    if isinstance(obj, float):
        return _clean(obj)
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    raise FrameError(f"cannot send a {type(obj).__name__}")


def _unpack(obj: Any, tensors: list) -> Any:
    if isinstance(obj, dict):
        if set(obj) == {"__t__"}:
            i = obj["__t__"]
            if not isinstance(i, int) or not 0 <= i < len(tensors):
                raise FrameError(f"bad tensor reference {i!r}")
            return tensors[i]
        if set(obj) == {"__tuple__"} and isinstance(obj["__tuple__"], list):
            return tuple(_unpack(v, tensors) for v in obj["__tuple__"])
        if set(obj) == {"__f__"} and obj["__f__"] in ("nan", "inf", "-inf"):
            return float(obj["__f__"])
        return {k: _unpack(v, tensors) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_unpack(v, tensors) for v in obj]
    return obj


def _raw_bytes(t) -> memoryview:
    import torch

    flat = t.detach().to("cpu").contiguous().reshape(-1)
    if flat.numel() == 0:
        return memoryview(b"")
    return memoryview(flat.view(torch.uint8).numpy()).cast("B")


def write(stream: IO[bytes], msg: dict[str, Any]) -> None:
    """Send one message (blocking). Tensors may be on any device: they are copied to the host."""
    tensors: list = []
    body = _pack(msg, tensors)
    raws = [_raw_bytes(t) for t in tensors]
    specs = [{"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "nbytes": len(r)}
             for t, r in zip(tensors, raws)]
    stream.write(json.dumps({"msg": body, "tensors": specs}, separators=(",", ":")).encode() + b"\n")
    for r in raws:
        for i in range(0, len(r), CHUNK):
            stream.write(r[i:i + CHUNK])
    stream.flush()


def _read_exact(stream: IO[bytes], n: int) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = stream.readinto(view[got:got + CHUNK])
        if not k:
            raise EOFError(f"stream ended after {got} of {n} bytes")
        got += k
    return buf


def read(stream: IO[bytes], *, max_bytes: int, device: str | None = None) -> dict[str, Any]:
    """Receive one message; tensors arrive on `device` (default the host). EOFError at end of stream;
    FrameError when the message is malformed or its tensors exceed max_bytes in all."""
    import torch

    line = stream.readline(MAX_HEADER + 1)
    if not line:
        raise EOFError("stream closed")
    if len(line) > MAX_HEADER or not line.endswith(b"\n"):
        raise FrameError(f"header line over {MAX_HEADER} bytes or cut")
    try:
        head = json.loads(line)
    except (ValueError, UnicodeDecodeError) as e:
        raise FrameError(f"header is not JSON: {line[:120]!r}") from e
    if not isinstance(head, dict) or not isinstance(head.get("tensors", []), list):
        raise FrameError("header must be an object with a tensors list")
    specs, total = head.get("tensors", []), 0
    for s in specs:
        if not isinstance(s, dict) or not isinstance(s.get("shape"), list) or \
                not all(isinstance(d, int) and d >= 0 for d in s["shape"]) or not isinstance(s.get("nbytes"), int):
            raise FrameError(f"bad tensor spec {str(s)[:200]}")
        dt = _dtype(s.get("dtype"))
        numel = math.prod(s["shape"])
        if s["nbytes"] != numel * torch.empty((), dtype=dt).element_size():
            raise FrameError(f"tensor spec {s} does not add up")
        total += s["nbytes"]
    if total > max_bytes:
        raise FrameError(f"message carries {total} bytes of tensors, more than the {max_bytes} allowed")
    tensors = []
    for s in specs:
        dt = _dtype(s["dtype"])
        if s["nbytes"] == 0:
            t = torch.empty(s["shape"], dtype=dt)
        else:
            t = torch.frombuffer(_read_exact(stream, s["nbytes"]), dtype=dt).reshape(s["shape"])
        tensors.append(t.to(device) if device else t)
    return _unpack(head.get("msg"), tensors)
