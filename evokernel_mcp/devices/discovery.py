"""query_rocminfo: find the GPUs (ROCm first, then CUDA), merge live facts with the arch table, cache per process.

Runners only here (subprocesses with timeouts); parsing lives in rocm.py / amdsmi.py / cuda.py and merging in
builders.py. A tool that is missing, fails or prints something unreadable becomes a note, and discovery moves
on to the next source, ending with backend "none" and the offline compile targets.
"""

from __future__ import annotations

import datetime as _dt
import logging
import re
import threading
from typing import Annotated

from pydantic import Field

from evokernel_mcp import executables
from evokernel_mcp.devices.amdsmi import parse_amdsmi_json, parse_rocmsmi_json
from evokernel_mcp.devices.builders import build_amd_device, build_nvidia_device
from evokernel_mcp.devices.cuda import parse_nvidia_smi_xml, run_torch_probe
from evokernel_mcp.devices.models import (
    AmdSmiGpu,
    DeviceInfo,
    DeviceReport,
    NvsmiGpu,
    RocmAgent,
    TorchDeviceProps,
    TorchProbe,
)
from evokernel_mcp.devices.rocm import parse_rocminfo
from evokernel_mcp.devices.targets import offline_targets
from evokernel_mcp.errors import EvoError
from evokernel_mcp.models import Provenance, ToolchainInfo
from evokernel_mcp.subproc import Completed, run_sync, tail

log = logging.getLogger(__name__)
TOOL_TIMEOUT_S = 30.0
TORCH_PROBE_TIMEOUT_S = 120.0

_lock = threading.Lock()
_cached: DeviceReport | None = None


class _Found:
    def __init__(self) -> None:
        self.devices: list[DeviceInfo] = []
        self.provenance: list[Provenance] = []
        self.tools: list[ToolchainInfo] = []
        self.notes: list[str] = []

    def add(self, built: tuple[DeviceInfo, list[Provenance]]) -> None:
        self.devices.append(built[0])
        self.provenance.extend(built[1])


def _run(name: str, env_var: str | None, args: list[str], found: _Found) -> tuple[str, Completed] | None:
    """Resolve and run a tool; None (with a note saying why) when it is missing, hangs or fails."""
    path = executables.find(name)
    if path is None:
        where = f"${env_var}, " if env_var else ""
        found.notes.append(f"{name} not found ({where}$ROCM_PATH/bin, /usr/local/cuda/bin, PATH).")
        return None
    try:
        res = run_sync([path, *args], timeout_s=TOOL_TIMEOUT_S, tool=name)
    except EvoError as e:
        found.notes.append(f"{name} ({path}) could not run: {e}")
        return None
    if res.returncode != 0:
        found.notes.append(f"{name} ({path}) exited with {res.returncode}: {tail(res.stderr or res.stdout, 400)}")
        return None
    return path, res


def _discover_rocm(found: _Found) -> None:
    ran = _run("rocminfo", "ROCMINFO", [], found)
    if ran is None:
        return
    path, res = ran
    try:
        report = parse_rocminfo(res.stdout)
    except EvoError as e:
        found.notes.append(f"rocminfo output could not be used: {e}")
        return
    if not report.gpus:
        found.notes.append("rocminfo ran but lists no GPU agent (only CPU agents).")
        return
    version = f"ROCk {report.rock_version or '?'}, HSA runtime {report.runtime_version or '?'}"
    found.tools.append(ToolchainInfo(name="rocminfo", version=version, path=path))
    smi = _pair_smi(report.gpus, _amd_smi(found), found)
    for i, agent in enumerate(report.gpus):
        found.add(build_amd_device(i, agent, f"rocminfo ({version})", smi[i]))


def _amd_smi(found: _Found) -> list[AmdSmiGpu]:
    """VRAM size (and clocks when printed) from `amd-smi static --json`, else `rocm-smi --json`."""
    if executables.find("amd-smi"):
        ran = _run("amd-smi", "AMD_SMI", ["static", "--json"], found)
        if ran is not None:
            try:
                gpus = parse_amdsmi_json(ran[1].stdout)
                found.tools.append(ToolchainInfo(name="amd-smi", path=ran[0]))
                return gpus
            except EvoError as e:
                found.notes.append(f"amd-smi output could not be used: {e}")
    if executables.find("rocm-smi"):
        ran = _run("rocm-smi", None, ["--showmeminfo", "vram", "--json"], found)
        if ran is not None:
            try:
                cards = parse_rocmsmi_json(ran[1].stdout)
            except EvoError as e:
                found.notes.append(f"rocm-smi output could not be used: {e}")
                return []
            found.tools.append(ToolchainInfo(name="rocm-smi", path=ran[0]))
            order = sorted(cards, key=lambda c: int(re.sub(r"\D", "", c) or 0))
            return [AmdSmiGpu(tool="rocm-smi", gpu=i, vram_bytes=cards[c]) for i, c in enumerate(order)]
    return []


def _bdf_of(bdfid: int | None) -> str | None:
    if not bdfid:
        return None
    return f"{bdfid >> 8:02x}:{(bdfid >> 3) & 0x1F:02x}.{bdfid & 7:x}"


def _pair_smi(gpus: list[RocmAgent], smi: list[AmdSmiGpu], found: _Found) -> list[AmdSmiGpu | None]:
    """Match amd-smi GPUs to rocminfo agents by PCI address (BDFID), else by order when the counts agree."""
    if not smi:
        return [None] * len(gpus)
    by_bdf = {s.bdf.lower().split(":", 1)[-1]: s for s in smi if s.bdf}
    paired = [by_bdf.get(_bdf_of(a.bdfid) or "") for a in gpus]
    if all(p is not None for p in paired):
        return paired
    if len(smi) == len(gpus):
        return list(smi)
    found.notes.append(f"{smi[0].tool} lists {len(smi)} GPUs and rocminfo {len(gpus)}; could not pair them, "
                       f"{smi[0].tool} facts not used.")
    return [None] * len(gpus)


def _discover_cuda(found: _Found) -> None:
    ran = _run("nvidia-smi", "NVIDIA_SMI", ["-q", "-x"], found)
    if ran is None:
        return
    path, res = ran
    try:
        smi = parse_nvidia_smi_xml(res.stdout)
    except EvoError as e:
        found.notes.append(f"nvidia-smi output could not be used: {e}")
        return
    if not smi.gpus:
        found.notes.append("nvidia-smi ran but lists no GPU.")
        return
    found.tools.append(ToolchainInfo(name="nvidia-smi", path=path,
                                     version=f"driver {smi.driver_version}, CUDA {smi.cuda_version}"))
    probe = _torch_probe(found)
    props = _pair_torch(smi.gpus, probe.devices if probe else [])
    smi_detail = f"nvidia-smi -q -x (driver {smi.driver_version})"
    torch_detail = f"torch {probe.torch_version if probe else '?'} (subprocess)"
    for i, g in enumerate(smi.gpus):
        found.add(build_nvidia_device(i, g, props[i], smi_detail, torch_detail))


def _torch_probe(found: _Found) -> TorchProbe | None:
    try:
        probe = run_torch_probe(TORCH_PROBE_TIMEOUT_S)
    except EvoError as e:
        found.notes.append(f"torch device properties not collected: {e}")
        return None
    if probe.error:
        found.notes.append(f"torch device properties not collected: {probe.error}")
    found.tools.append(ToolchainInfo(name="torch", version=f"{probe.torch_version} (CUDA {probe.cuda_version})"))
    return probe


def _pair_torch(gpus: list[NvsmiGpu], props: list[TorchDeviceProps]) -> list[TorchDeviceProps | None]:
    """Match torch devices to nvidia-smi GPUs by UUID, else by (PCI-bus) order when the counts agree."""
    by_uuid = {str(p.uuid).removeprefix("GPU-").lower(): p for p in props if p.uuid}
    paired = [by_uuid.get((g.uuid or "").removeprefix("GPU-").lower()) for g in gpus]
    if any(p is not None for p in paired) or len(props) != len(gpus):
        return paired
    return list(props)


def discover() -> DeviceReport:
    """Run discovery now (no cache): ROCm, then CUDA, else backend 'none'."""
    found, backend = _Found(), "none"
    _discover_rocm(found)
    if found.devices:
        backend = "rocm"
    else:
        _discover_cuda(found)
        backend = "cuda" if found.devices else "none"
    if backend == "none":
        found.notes.append("No GPU found on this machine: device facts below are absent; compile offline for one "
                           "of offline_targets and read per-arch facts with search_docs/read_doc.")
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    probed = ", ".join(t.name for t in found.tools) or "no GPU tool answered"
    found.provenance.insert(0, Provenance(field="backend", source="discovery",
                                          detail=f"tools that answered: {probed}; see notes for what was tried"))
    found.provenance.append(Provenance(field="offline_targets", source="compiler probes",
                                       detail="clang -print-supported-cpus, nvcc --list-gpu-arch, triton package"))
    return DeviceReport(backend=backend, devices=found.devices, offline_targets=offline_targets(),
                        provenance=found.provenance, tools=found.tools, notes=found.notes, collected_at=now)


def query_rocminfo(
    refresh: Annotated[bool, Field(description="Re-run the device tools instead of returning the cached "
                                               "answer of this server process.")] = False,
) -> DeviceReport:
    """Report the GPUs on this machine and their real limits. Call this first, before writing a kernel.

    For each GPU: arch (gfx942, gfx950, gfx90a, sm_90 ...), compute units (SMs on NVIDIA), wavefront/warp size,
    max waves per CU, VGPR/SGPR budgets, LDS (shared memory) per workgroup in bytes, L1/L2/L3 bytes, max clock
    in MHz, memory bytes, peak bandwidth in GB/s and peak TFLOP/s per dtype. Each number's source is in
    `provenance` (rocminfo, amd-smi, nvidia-smi, torch, or resources/gpu_arch/arch.yaml with its citation).
    Live values win over the arch table; disagreements are listed in each device's `conflicts` (trust the live
    value). backend "none" means no GPU was found: use `offline_targets` to compile without one.
    The answer is cached per server process; pass refresh=true after a driver/partition change.
    """
    global _cached
    with _lock:
        if _cached is not None and not refresh:
            return _cached.model_copy(update={"cached": True})
        _cached = discover()
        return _cached
