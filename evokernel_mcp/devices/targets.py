"""Offline compile targets: which GPU targets this machine can compile for without the GPU, and with what.

Each compiler is asked which targets it supports (clang: -print-supported-cpus, nvcc: --list-gpu-arch), once
per path per process, so a clang that predates gfx950 is not offered for gfx950.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import re

from evokernel_mcp import executables
from evokernel_mcp.arch import table
from evokernel_mcp.devices.models import OfflineTarget
from evokernel_mcp.subproc import run_sync

AMD_TARGETS = ("gfx90a", "gfx942", "gfx950")
NVIDIA_TARGETS = ("sm_90", "sm_80")
PROBE_TIMEOUT_S = 15.0


@functools.lru_cache(maxsize=16)
def _clang_cpus(path: str) -> frozenset[str]:
    try:
        res = run_sync([path, "--target=amdgcn-amd-amdhsa", "-nogpulib", "-print-supported-cpus"],
                       timeout_s=PROBE_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - a probe failure means "cannot tell", reported as unsupported
        return frozenset()
    return frozenset(re.findall(r"\b(gfx[0-9a-f]+)\b", res.stdout + res.stderr))


@functools.lru_cache(maxsize=8)
def _nvcc_archs(path: str) -> frozenset[str]:
    try:
        res = run_sync([path, "--list-gpu-arch"], timeout_s=PROBE_TIMEOUT_S)
    except Exception:  # noqa: BLE001
        return frozenset()
    return frozenset("sm_" + m for m in re.findall(r"compute_(\d+)", res.stdout))


def _amd_compilers() -> list[tuple[str, str, frozenset[str] | None]]:
    """(name, path, supported targets or None = assume all ROCm targets) for each AMD compiler found."""
    found: list[tuple[str, str, frozenset[str] | None]] = []
    hipcc = executables.find("hipcc")
    if hipcc:
        found.append((os.path.basename(hipcc), hipcc, None))
    clang, lld = executables.find("clang"), executables.find("ld.lld")
    if clang and lld:  # the offline path compile_kernel takes (compile/hip_offline.py)
        found.append(("clang-19 + ld.lld", clang, _clang_cpus(clang)))
    return found


def offline_targets() -> list[OfflineTarget]:
    """AMD gfx90a/gfx942/gfx950 and NVIDIA sm_90/sm_80, each with the compilers here that can target it."""
    amd = _amd_compilers()
    nvcc = executables.find("nvcc")
    nv_archs = _nvcc_archs(nvcc) if nvcc else frozenset()
    known = set(table.arch_names())
    triton = _triton_compiler()
    out: list[OfflineTarget] = []
    for t in AMD_TARGETS:
        comps = [f"{n} ({p})" for n, p, cpus in amd if cpus is None or t in cpus] + triton
        out.append(_target(t, "amd", comps, t in known))
    for t in NVIDIA_TARGETS:
        comps = ([f"nvcc ({nvcc})"] if nvcc and t in nv_archs else []) + triton
        out.append(_target(t, "nvidia", comps, t in known))
    return out


def _triton_compiler() -> list[str]:
    """Triton compiles its kernels for every AMD and NVIDIA target without a GPU (its own bundled LLVM,
    which also gives the HIP path its gfx950 code generation)."""
    try:
        return [f"triton {importlib.metadata.version('triton')} (bundled LLVM)"]
    except importlib.metadata.PackageNotFoundError:
        return []


def _target(t: str, vendor: str, comps: list[str], known: bool) -> OfflineTarget:
    return OfflineTarget(target=t, vendor=vendor, available=bool(comps), compilers=comps, in_arch_table=known)
