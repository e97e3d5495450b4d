"""Offline compile targets: which GPU targets this machine can compile for without the GPU, and with what.

Each compiler is asked which targets it supports (clang: -print-supported-cpus, nvcc: --list-gpu-arch), once
per path per process, so a clang that predates gfx950 is not offered for gfx950.
"""

from __future__ import annotations

import functools
import importlib.metadata
import re

from evokernel_mcp.arch import table
from evokernel_mcp.devices.models import OfflineTarget
from evokernel_mcp.subproc import resolve_executable, run_sync

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
    for name, env in (("hipcc", "HIPCC"), ("amdclang++", None)):
        path = resolve_executable(name, env_var=env)
        if path:
            found.append((name, path, None))
    lld = resolve_executable("ld.lld-19") or resolve_executable("ld.lld")
    for i, name in enumerate(("clang-19", "clang")):
        path = resolve_executable(name, env_var="EVOKERNEL_CLANG" if i == 0 else None)
        if path and lld:
            found.append((f"{name} + ld.lld", path, _clang_cpus(path)))
            break
    return found


def offline_targets() -> list[OfflineTarget]:
    """AMD gfx90a/gfx942/gfx950 and NVIDIA sm_90/sm_80, each with the compilers here that can target it."""
    amd = _amd_compilers()
    nvcc = resolve_executable("nvcc", env_var="NVCC")
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
