"""Pure parsers for `amd-smi static` (JSON or human-readable text) and `rocm-smi --json` (FORMATS.md section 4).

amd-smi's text form is its JSON dict with upper-cased keys (amdsmi_logger), so both forms are read into the
same nested dict and one extractor picks the facts. Quantities are {"value", "unit"} objects (JSON), "64289 MB"
strings (text) or "N/A". amd-smi prints "MB" for mebibytes (sizes come from the driver in MiB).
"""

from __future__ import annotations

import json
import re
from typing import Any

from evokernel_mcp.devices.models import AmdSmiGpu
from evokernel_mcp.errors import ParseError

_UNIT_BYTES = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3, "KIB": 1024, "MIB": 1024**2, "GIB": 1024**3}
_QTY = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([A-Za-z/%°]*)\s*$")


def quantity(v: Any) -> tuple[float, str] | None:
    """(number, unit) from {"value","unit"}, '64289 MB', 64289; None for 'N/A' or missing."""
    if isinstance(v, dict) and "value" in v:
        return quantity(f"{v['value']} {v.get('unit') or ''}")
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return float(v), ""
    m = _QTY.match(str(v))
    return (float(m.group(1)), m.group(2)) if m else None


def _bytes(v: Any) -> int | None:
    q = quantity(v)
    if q is None:
        return None
    factor = _UNIT_BYTES.get(q[1].upper() or "B")
    return int(q[0] * factor) if factor else None


def _mhz(v: Any) -> int | None:
    q = quantity(v)
    if q is None or q[1].upper() not in ("MHZ", ""):
        return None
    return int(q[0])


def _str(v: Any) -> str | None:
    return None if v in (None, "N/A", "") else str(v)


def _max_clock(clock: dict[str, Any], prefix: str) -> int | None:
    vals = [_mhz(c.get("max_clk")) for k, c in clock.items() if k.startswith(prefix) and isinstance(c, dict)]
    vals = [v for v in vals if v is not None]
    return max(vals) if vals else None


def gpu_from_dict(d: dict[str, Any]) -> AmdSmiGpu:
    """The facts we use from one amd-smi GPU dict (lower-case keys; missing sections are fine)."""
    asic, bus, vram = d.get("asic") or {}, d.get("bus") or {}, d.get("vram") or {}
    clock = d.get("clock") or {}
    cu = quantity(asic.get("num_compute_units"))
    gpu = d.get("gpu")
    return AmdSmiGpu(
        gpu=int(gpu) if isinstance(gpu, (int, str)) and str(gpu).isdigit() else None,
        market_name=_str(asic.get("market_name")),
        target_graphics_version=_str(asic.get("target_graphics_version")),
        num_compute_units=int(cu[0]) if cu else None,
        bdf=_str(bus.get("bdf")),
        vram_bytes=_bytes(vram.get("size")),
        vram_type=_str(vram.get("type")),
        max_gfx_clock_mhz=_max_clock(clock, "gfx") if isinstance(clock, dict) else None,
        max_mem_clock_mhz=_max_clock(clock, "mem") if isinstance(clock, dict) else None,
    )


def parse_amdsmi_json(text: str) -> list[AmdSmiGpu]:
    """`amd-smi ... --json`: a list of per-GPU dicts (ROCm 6.x) or {"gpu_data": [...]} (ROCm 7.x)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ParseError("amd-smi", f"line {e.lineno} column {e.colno}", message=f"invalid JSON: {e.msg}") from None
    if isinstance(data, dict) and isinstance(data.get("gpu_data"), list):
        data = data["gpu_data"]
    elif isinstance(data, dict) and "gpu" in data:
        data = [data]
    if not isinstance(data, list) or not all(isinstance(x, dict) for x in data):
        raise ParseError("amd-smi", "top level", message="expected a list of GPU objects or {'gpu_data': [...]}")
    return [gpu_from_dict(x) for x in data if "gpu" in x]


def _text_tree(lines: list[tuple[int, int, str]]) -> dict[str, Any]:
    """Nest 'KEY: value' lines by indentation into a dict with lower-case keys."""
    root: dict[str, Any] = {}
    stack: list[tuple[int, dict[str, Any]]] = [(-1, root)]
    for _lineno, indent, content in lines:
        key, sep, value = content.partition(":")
        if not sep:
            continue
        while stack and indent <= stack[-1][0]:
            stack.pop()
        parent = stack[-1][1]
        key, value = key.strip().lower(), value.strip()
        if value:
            parent[key] = value
        else:
            child: dict[str, Any] = {}
            parent[key] = child
            stack.append((indent, child))
    return root


def parse_amdsmi_text(text: str) -> list[AmdSmiGpu]:
    """Human-readable `amd-smi static` / `amd-smi metric`: 'GPU: N' blocks of indented 'KEY: value' lines."""
    blocks: list[tuple[int, list[tuple[int, int, str]]]] = []
    current: list[tuple[int, int, str]] | None = None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        if indent == 0:
            m = re.match(r"^GPU: (\d+)$", line)
            current = None
            if m:
                current = []
                blocks.append((int(m.group(1)), current))
            continue
        if current is not None:
            current.append((lineno, indent, line.strip()))
    if not blocks:
        raise ParseError("amd-smi", "end of output", message="no 'GPU: N' block found")
    out = []
    for gpu, lines in blocks:
        tree = _text_tree(lines)
        tree["gpu"] = gpu
        out.append(gpu_from_dict(tree))
    return out


def parse_rocmsmi_json(text: str) -> dict[str, int | None]:
    """`rocm-smi --showmeminfo vram --json`: {"card0": {"VRAM Total Memory (B)": "..."}} -> {card: bytes}."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ParseError("rocm-smi", f"line {e.lineno} column {e.colno}", message=f"invalid JSON: {e.msg}") from None
    if not isinstance(data, dict):
        raise ParseError("rocm-smi", "top level", message="expected an object keyed by card")
    out: dict[str, int | None] = {}
    for card, fields in data.items():
        if not (card.startswith("card") and isinstance(fields, dict)):
            continue
        total = next((v for k, v in fields.items() if k.lower().startswith("vram total memory (b)")), None)
        out[card] = int(total) if isinstance(total, (str, int)) and str(total).isdigit() else None
    return out
