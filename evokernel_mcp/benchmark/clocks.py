"""Clocks read before and after a benchmark: nvidia-smi (CUDA) or amd-smi (ROCm). None when unavailable.

Runner: `read_clocks(backend, index)` (subprocess only, through subproc.run_sync); parsers are pure.
- nvidia-smi: `nvidia-smi --query-gpu=clocks.sm,clocks.mem --format=csv,noheader,nounits -i N` prints one
  line per GPU, fields separated by ', ' (values in MHz; '[N/A]' when unsupported).
- amd-smi: `amd-smi metric --clock -g N` text form (tests/fixtures/rocm/amd-smi/metric_clock_text_*.txt):
  per clock domain `GFX_k:` / `MEM_0:` blocks with `CLK: <v> MHz`. The SM clock is the mean over GFX_k.
"""

from __future__ import annotations

import logging
import os
import re
import time
from typing import Any

from evokernel_mcp import executables
from evokernel_mcp.benchmark.models import Clocks
from evokernel_mcp.errors import EvoError, ParseError
from evokernel_mcp.runtime.opevents import note
from evokernel_mcp.subproc import run_sync

log = logging.getLogger(__name__)
NVSMI_ARGS = ["--query-gpu=clocks.sm,clocks.mem", "--format=csv,noheader,nounits"]
NVSMI_FULL_ARGS = ["--query-gpu=clocks.sm,clocks.mem,clocks_event_reasons.active,power.draw,temperature.gpu",
                   "--format=csv,noheader,nounits"]
# nvmlClocksEventReasons bits (nvml.h); gpu_idle and applications_clocks_setting are not slow-downs
NV_REASON_BITS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
                  0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
                  0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting"}
NOT_SLOWDOWN = {"gpu_idle", "applications_clocks_setting", "display_clock_setting"}
SM_CLOCK_MOVED_FRAC = 0.03  # an SM clock change above 3 % between readings is reported as moved


def decode_nv_reasons(text: str) -> list[str] | None:
    """'0x0000000000000004' -> ['sw_power_cap']; None when the field is not a number ('[N/A]')."""
    try:
        mask = int(text.strip(), 16)
    except ValueError:
        return None
    names = [name for bit, name in NV_REASON_BITS.items() if mask & bit]
    rest = mask & ~sum(NV_REASON_BITS)
    return names + ([f"other_0x{rest:x}"] if rest else [])


def clocks_moved(before: Clocks | None, after: Clocks | None,
                 frac: float = SM_CLOCK_MOVED_FRAC) -> tuple[bool | None, str | None]:
    """(moved, why) between two readings: the SM clock changed by more than `frac`, or a slow-down reason
    (power cap, thermal, power brake, hw slowdown) is active after that was not before. (None, None) when
    either reading is missing."""
    if before is None or after is None:
        return None, None
    why = []
    a, b = before.sm_mhz, after.sm_mhz
    if a and b and abs(b - a) / a > frac:
        why.append(f"SM clock {a:g} -> {b:g} MHz")
    new = set(after.throttle_reasons or []) - set(before.throttle_reasons or []) - NOT_SLOWDOWN
    if new:
        why.append(f"throttle reasons appeared: {', '.join(sorted(new))}")
    return bool(why), "; ".join(why) or None


def _num(text: str) -> float | None:
    m = re.search(r"-?\d+(?:\.\d+)?", text)
    return float(m.group(0)) if m else None


def parse_nvidia_smi_clocks(text: str) -> Clocks:
    """First non-empty line 'sm, mem' (MHz) -> Clocks; ParseError when it is not two fields."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise ParseError("nvidia-smi", "line 1", message="empty output")
    parts = [p.strip() for p in lines[0].split(",")]
    if len(parts) not in (2, 5):
        raise ParseError("nvidia-smi", "line 1", message=f"expected 'sm, mem[, reasons, power, temp]', got {lines[0]!r}")
    c = Clocks(sm_mhz=_num(parts[0]), mem_mhz=_num(parts[1]), source="nvidia-smi")
    if len(parts) == 5:
        c.throttle_reasons = decode_nv_reasons(parts[2])
        c.power_w, c.temperature_c = _num(parts[3]), _num(parts[4])
    return c


def parse_amd_smi_clock_text(text: str) -> Clocks:
    """`amd-smi metric --clock` text -> Clocks (mean of GFX_k CLK, MEM_0 CLK)."""
    gfx, mem, domain = [], None, None
    for ln in text.splitlines():
        s = ln.strip()
        m = re.fullmatch(r"([A-Z]+_\d+):", s)
        if m:
            domain = m.group(1)
            continue
        m = re.fullmatch(r"CLK:\s*(\S+)(?:\s*MHz)?", s)
        if m and domain:
            v = _num(m.group(1))
            if domain.startswith("GFX_") and v is not None:
                gfx.append(v)
            elif domain == "MEM_0":
                mem = v
    if not gfx and mem is None:
        raise ParseError("amd-smi", "CLOCK section", message="no GFX_k or MEM_0 'CLK:' lines")
    return Clocks(sm_mhz=sum(gfx) / len(gfx) if gfx else None, mem_mhz=mem, source="amd-smi")


def _physical_index(env_var: str, index: int) -> str:
    vis = os.environ.get(env_var, "")
    ids = [v.strip() for v in vis.split(",") if v.strip()]
    return ids[index] if index < len(ids) else str(index)


def read_clocks(backend: str, index: int = 0, timeout_s: float = 10.0) -> Clocks | None:
    """Live clocks of one device; None when the tool is missing or its output cannot be read."""
    try:
        if backend == "cuda":
            exe = executables.find("nvidia-smi")
            if exe is None:
                return None
            gpu = _physical_index("CUDA_VISIBLE_DEVICES", index)
            res = run_sync([exe, *NVSMI_FULL_ARGS, "-i", gpu], timeout_s=timeout_s)
            if res.returncode != 0:  # an older driver without clocks_event_reasons: clocks only
                res = run_sync([exe, *NVSMI_ARGS, "-i", gpu], timeout_s=timeout_s)
            return parse_nvidia_smi_clocks(res.stdout) if res.returncode == 0 else None
        if backend == "rocm":
            exe = executables.find("amd-smi")
            if exe is None:
                return None
            gpu = _physical_index("HIP_VISIBLE_DEVICES", index)
            res = run_sync([exe, "metric", "--clock", "-g", gpu], timeout_s=timeout_s)
            return parse_amd_smi_clock_text(res.stdout) if res.returncode == 0 else None
    except (EvoError, OSError) as e:
        log.info("clocks unavailable: %s", e)
    return None


def driver_version(backend: str, timeout_s: float = 10.0) -> str | None:
    """GPU driver version: nvidia-smi's driver_version, or the amdgpu module version; None if unknown. Read once
    per process (every benchmark asked for it, the ceilings' cache key: an nvidia-smi run, ~0.08 s on the
    H200 host); a driver cannot change under a process that holds a device context."""
    if backend not in _DRIVER:
        _DRIVER[backend] = _driver_version(backend, timeout_s)
    return _DRIVER[backend]


_DRIVER: dict[str, str | None] = {}


def _driver_version(backend: str, timeout_s: float) -> str | None:
    try:
        if backend == "cuda":
            exe = executables.find("nvidia-smi")
            if exe is None:
                return None
            res = run_sync([exe, "--query-gpu=driver_version", "--format=csv,noheader"], timeout_s=timeout_s)
            line = next((ln.strip() for ln in res.stdout.splitlines() if ln.strip()), "")
            return line or None
        if backend == "rocm":
            with open("/sys/module/amdgpu/version", encoding="utf-8") as f:
                return f.read().strip() or None
    except (EvoError, OSError) as e:
        log.info("driver version unavailable: %s", e)
    return None


class ShapeClocks:
    """The device's clocks read around the shapes (nvidia-smi / amd-smi, a process each time): a shape's after
    reading is also the next shape's before, and the last shape's the job's after, as long as nothing ran on
    the device in between (stale() says something did: a confirm). One read per shape plus one."""

    def __init__(self, read_clocks, info: dict[str, Any]) -> None:
        self._read_clocks, self.backend, self.last = read_clocks, info["backend"], None

    def _read(self) -> dict[str, Any] | None:
        if self.backend not in ("cuda", "rocm"):
            return None
        t0 = time.monotonic()
        c = self._read_clocks(self.backend, 0)
        note("benchmark: clocks read in %.2f s", time.monotonic() - t0)
        return c.model_dump() if c is not None else None

    def before(self) -> dict[str, Any] | None:
        out, self.last = self.last or self._read(), None  # the device runs next: this reading is spent
        return out

    def after(self) -> dict[str, Any] | None:
        self.last = self._read()
        return self.last

    def stale(self) -> None:
        self.last = None

    def final(self) -> dict[str, Any] | None:
        return self.last or self._read()
