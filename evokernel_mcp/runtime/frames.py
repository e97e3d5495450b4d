"""Messages with tensors between the runner and a sandboxed child, over pipes, with no pickle.

A message is one JSON line (at most MAX_HEADER bytes) followed by the raw bytes of its tensors:
    {"msg": {...}, "tensors": [{"dtype": "float32", "shape": [2, 3], "nbytes": 24}, ...]}\\n<bytes><bytes>...
Inside "msg", a tensor stands as {"__t__": i} (its index in "tensors"); a tuple as {"__tuple__": [...]}.
The runner decodes what a child sends with limits it sets (bytes in all, dtypes allowed), so a
child that lies, floods or sends garbage gets an error for its own job and nothing else: no code
crosses, only numbers (the trust model in docs/security.md).
With a courier (courier.py), a tensor of THRESHOLD bytes or more goes by file descriptor on a unix
socket instead (a CUDA one device to device); its spec then says "via" ("vmm" | "memfd") and carries no
bytes in the pipe.
"""

from __future__ import annotations

import json
import math
import re
from typing import IO, Any

from evokernel_mcp.runtime.courier import Courier, CourierError
from evokernel_mcp.runtime.devmem import release_cached
from evokernel_mcp.runtime.protocol import classify_text

MAX_HEADER = 16 * 1024 * 1024
MAX_DEPTH = 64  # nesting of the header (a result is a dict of lists of tuples: a handful of levels)
MAX_TENSORS = 1 << 16
MAX_DIMS = 16
MAX_DIM = 1 << 48  # elements in one dimension, and in a whole tensor
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


def write(stream: IO[bytes], msg: dict[str, Any] | list, courier: Courier | None = None) -> None:
    """Send one message (blocking). Tensors may be on any device: through the pipe they are copied to the
    host; with a courier, big ones go by fd (device to device for CUDA) before the header is written.
    `msg` may be a list holding the message as its only item: the message is then taken out of it, and
    each tensor sent by fd is let go as soon as it is sent (its device memory back to the driver when
    big), so a reply of many gigabytes never needs twice its size on the device."""
    tensors: list = []
    consume = isinstance(msg, list)
    body = _pack(msg.pop() if consume else msg, tensors)
    if len(tensors) > MAX_TENSORS:  # what read() refuses, refused before the specs are built (seconds for 200k)
        raise FrameError(f"{len(tensors)} tensors in one message, more than {MAX_TENSORS}")
    specs, raws = [], []
    if courier is not None:
        courier.plan(tensors)
    for i, t in enumerate(tensors):
        spec = {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
                "nbytes": t.numel() * t.element_size()}
        via = courier.route(t, i) if courier is not None else None
        extra = courier.send(t, via, i) if via else None  # None: no room for the export, the pipe takes it
        if extra is not None:
            spec.update(extra)
            if consume:
                tensors[i] = t = None
                if via == "vmm" and spec["nbytes"] >= _TRIM_BYTES:
                    release_cached()
        else:
            raws.append(_raw_bytes(t))
            if courier is not None:
                courier.count("pipe", len(raws[-1]), 0.0)
        specs.append(spec)
    if courier is not None:
        courier.sent()
    stream.write(json.dumps({"msg": body, "tensors": specs}, separators=(",", ":")).encode() + b"\n")
    for r in raws:
        for i in range(0, len(r), CHUNK):
            stream.write(r[i:i + CHUNK])
    stream.flush()


_TRIM_BYTES = 256 << 20


def _read_exact(stream: IO[bytes], n: int) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = stream.readinto(view[got:got + CHUNK])
        if not k:
            raise EOFError(f"stream ended after {got} of {n} bytes")
        got += k
    return buf


def read(stream: IO[bytes], *, max_bytes: int, device: str | None = None,
         courier: Courier | None = None) -> dict[str, Any]:
    """Receive one message; tensors arrive on `device` (default: the host, or the CUDA device for one
    sent device to device). EOFError at end of stream; FrameError when the message is malformed, its
    tensors exceed max_bytes in all, or what came by fd does not check out. With a courier, a complete
    read means the peer has answered: what we exported to it before is freed."""
    import torch

    line = stream.readline(MAX_HEADER + 1)
    if not line:
        raise EOFError("stream closed")
    if len(line) > MAX_HEADER or not line.endswith(b"\n"):
        raise FrameError(f"header line over {MAX_HEADER} bytes or cut")
    head = _header(line)
    specs, total = head.get("tensors", []), 0
    if len(specs) > MAX_TENSORS:
        raise FrameError(f"{len(specs)} tensors in one message, more than {MAX_TENSORS}")
    for s in specs:
        if not isinstance(s, dict) or not isinstance(s.get("shape"), list) or len(s["shape"]) > MAX_DIMS or \
                not all(type(d) is int and 0 <= d <= MAX_DIM for d in s["shape"]) or type(s.get("nbytes")) is not int:
            raise FrameError(f"bad tensor spec {str(s)[:200]}")
        dt = _dtype(s.get("dtype"))
        numel = math.prod(s["shape"])
        if numel > MAX_DIM or s["nbytes"] != numel * torch.empty((), dtype=dt).element_size():
            raise FrameError(f"tensor spec {str(s)[:200]} does not add up")
        total += s["nbytes"]
    if total > max_bytes:
        raise FrameError(f"message carries {total} bytes of tensors, more than the {max_bytes} allowed")
    try:
        tensors = _tensors(stream, specs, device, courier)
        if courier is not None:
            courier.settle()
        return _unpack(head.get("msg"), tensors)
    except (RuntimeError, TypeError, ValueError, OverflowError, KeyError, AttributeError) as e:
        if classify_text(str(e)) and not isinstance(e, RecursionError):
            raise  # the device's own trouble (out of memory, a fault) stays what it is
        # whatever else the specs led torch to do with the bytes is the sender's fault
        raise FrameError(f"message does not decode: {type(e).__name__}: {str(e)[:300]}") from e


def _header(line: bytes) -> dict[str, Any]:
    """The JSON header, nested at most MAX_DEPTH deep (checked on the bytes before json parses them, so a
    header nested 200,000 deep costs a scan, not a recursion)."""
    if _depth(line) > MAX_DEPTH:
        raise FrameError(f"header nested more than {MAX_DEPTH} deep")
    try:
        head = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise FrameError(f"header is not JSON: {line[:120]!r}") from e
    if not isinstance(head, dict) or not isinstance(head.get("tensors", []), list):
        raise FrameError("header must be an object with a tensors list")
    return head


_BRACKETS = re.compile(rb'[\[\]{}]|"(?:[^"\\]|\\.)*"')


def _depth(line: bytes) -> int:
    """The deepest nesting of [ and { in a JSON text, brackets inside strings not counted."""
    depth = deepest = 0
    for m in _BRACKETS.finditer(line):
        c = m.group()
        if c in (b"[", b"{"):
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    break
        elif c in (b"]", b"}"):
            depth -= 1
    return deepest


def _typed(raw, dt, shape: list[int]):
    """The received bytes (uint8) as a tensor of dtype dt and `shape` on the same storage, made with set_ rather
    than as a view: a view keeps its uint8 base alive, so a receiver that gives the tensor other storage (a
    parked benchmark arm: blocks.BlockTimer.park) would still hold the bytes (a whole input set on the device)."""
    import torch

    size = dt.itemsize
    if raw.storage_offset() % size or not raw.is_contiguous() or raw.numel() != math.prod(shape) * size:
        return raw.view(dt).reshape(shape)  # (bytes that do not make the shape fail here, as they always did)
    strides, step = [], 1
    for n in reversed(shape):  # contiguous, row-major
        strides.insert(0, step)
        step *= max(n, 1)
    return torch.empty(0, dtype=dt, device=raw.device).set_(raw.untyped_storage(), raw.storage_offset() // size,
                                                            shape, strides)


def _tensors(stream: IO[bytes], specs: list, device: str | None, courier: Courier | None) -> list:
    import torch

    tensors = []
    for s in specs:
        dt = _dtype(s["dtype"])
        if "via" in s:
            if courier is None:
                raise FrameError("a tensor was sent by fd on a channel without an fd socket")
            try:
                t = _typed(courier.recv(s, device), dt, s["shape"])
            except CourierError as e:
                raise FrameError(f"tensor sent by fd: {e}") from e
        elif s["nbytes"] == 0:
            t = torch.empty(s["shape"], dtype=dt)
        else:
            t = torch.frombuffer(_read_exact(stream, s["nbytes"]), dtype=dt).reshape(s["shape"])
        tensors.append(t.to(device) if device else t)
    return tensors
