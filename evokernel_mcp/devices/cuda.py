"""NVIDIA side of discovery: a pure parser for `nvidia-smi -q -x` (nvsmi_device DTD: <nvidia_smi_log> with
<driver_version>, <cuda_version> and one <gpu id="PCI bus id"> per device), and torch device properties
collected in a subprocess (torch_probe.py) so the server never creates a CUDA context."""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from evokernel_mcp.devices.models import NvsmiGpu, NvsmiReport, TorchDeviceProps, TorchProbe
from evokernel_mcp.devices.torch_probe import ATTRS
from evokernel_mcp.errors import ParseError, ToolFailed
from evokernel_mcp.subproc import run_sync, tail

_QTY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")
_MEM_UNITS = {"MIB": 1024**2, "GIB": 1024**3, "KIB": 1024, "MB": 1024**2, "B": 1}
TORCH_PROBE = Path(__file__).with_name("torch_probe.py")


def _text(el: ET.Element | None, path: str) -> str | None:
    if el is None:
        return None
    found = el.find(path)
    if found is None or found.text is None:
        return None
    t = found.text.strip()
    return None if t in ("", "N/A", "[N/A]", "Unknown Error") else t


def _mhz(el: ET.Element, path: str) -> int | None:
    t = _text(el, path)
    m = _QTY.match(t or "")
    return int(float(m.group(1))) if m and m.group(2).upper() in ("MHZ", "") else None


def _mem_bytes(el: ET.Element, path: str) -> int | None:
    t = _text(el, path)
    m = _QTY.match(t or "")
    if not m or m.group(2).upper() not in _MEM_UNITS:
        return None
    return int(float(m.group(1)) * _MEM_UNITS[m.group(2).upper()])


def _gpu(index: int, g: ET.Element) -> NvsmiGpu:
    return NvsmiGpu(
        index=index,
        pci_bus_id=g.get("id") or _text(g, "pci/pci_bus_id"),
        product_name=_text(g, "product_name"),
        product_architecture=_text(g, "product_architecture"),
        uuid=_text(g, "uuid"),
        memory_total_bytes=_mem_bytes(g, "fb_memory_usage/total"),
        max_sm_clock_mhz=_mhz(g, "max_clocks/sm_clock"),
        max_graphics_clock_mhz=_mhz(g, "max_clocks/graphics_clock"),
        max_mem_clock_mhz=_mhz(g, "max_clocks/mem_clock"),
        sm_clock_mhz=_mhz(g, "clocks/sm_clock"),
        mem_clock_mhz=_mhz(g, "clocks/mem_clock"),
        compute_cap=_text(g, "compute_cap"),
    )


def parse_nvidia_smi_xml(text: str) -> NvsmiReport:
    """Parse `nvidia-smi -q -x`. Raises ParseError (with line/column) on malformed or non-nvidia-smi XML."""
    body = text.strip()
    if not body:
        raise ParseError("nvidia-smi", "line 1", message="empty output")
    try:
        root = ET.fromstring(body)
    except ET.ParseError as e:
        line, col = e.position
        raise ParseError("nvidia-smi", f"line {line} column {col}", message=f"malformed XML ({e})") from None
    if root.tag != "nvidia_smi_log":
        raise ParseError("nvidia-smi", "root element", message=f"expected <nvidia_smi_log>, got <{root.tag}>")
    gpus = root.findall("gpu")
    first = gpus[0] if gpus else None
    return NvsmiReport(
        driver_version=_text(root, "driver_version") or _text(first, "driver_version"),
        cuda_version=_text(root, "cuda_version") or _text(first, "cuda_version"),
        gpus=[_gpu(i, g) for i, g in enumerate(gpus)],
    )


def _load_json_object(text: str) -> dict:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        line = next((ln for ln in reversed(text.strip().splitlines()) if ln.startswith("{")), "")
        return json.loads(line)


def parse_torch_probe(text: str) -> TorchProbe:
    """torch_probe.py's JSON ({"torch_version", "devices": [...]}) or one device's properties as a JSON object
    (a recording); device keys are torch's attribute names (L2_cache_size, clock_rate ...)."""
    try:
        data = _load_json_object(text)
        if not isinstance(data, dict):
            raise ValueError("expected a JSON object")
        raw = data.get("devices") if "devices" in data else [dict(data, index=data.get("index", 0))]
        devices = [TorchDeviceProps(**{field: d.get(attr, d.get(field)) for field, attr in ATTRS.items()},
                                    index=d.get("index", i)) for i, d in enumerate(raw or [])]
        return TorchProbe(torch_version=data.get("torch_version"), cuda_version=data.get("cuda_version"),
                          hip_version=data.get("hip_version"), error=data.get("error"), devices=devices)
    except (json.JSONDecodeError, ValueError, TypeError, AttributeError) as e:
        raise ParseError("torch probe", "stdout", message=f"{e}".splitlines()[0]) from None


def run_torch_probe(timeout_s: float = 120.0, python: str | None = None) -> TorchProbe:
    """Run torch_probe.py in a fresh interpreter (CUDA devices in PCI bus order, like nvidia-smi)."""
    import os

    env = dict(os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID")
    res = run_sync([python or sys.executable, str(TORCH_PROBE)], timeout_s=timeout_s, env=env, tool="torch probe")
    if res.returncode != 0:
        raise ToolFailed("torch probe", res.returncode, tail(res.stderr))
    return parse_torch_probe(res.stdout)


def sm_arch(major: int | None, minor: int | None) -> str | None:
    return f"sm_{major}{minor}" if major is not None and minor is not None else None


# nvidia-smi product_architecture -> arch, used only when torch did not answer.
ARCH_BY_FAMILY = {"Hopper": "sm_90"}
