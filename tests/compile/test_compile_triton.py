"""compile_kernel on Triton, CPU only: gfx942, gfx950, gfx90a (AMD) and sm_90 (NVIDIA).

Parsed numbers are checked against an independent read of the code object: the HSACO's NT_AMDGPU_METADATA
note via llvm-readelf-19 --notes (AMD) and cuobjdump -res-usage on the cubin (NVIDIA). One compile per target,
all four concurrently in a module-scoped fixture.
"""

from __future__ import annotations

import re
import shutil

import anyio
import pytest
import yaml

from evokernel_mcp import artifacts
from evokernel_mcp.compile import cache
from evokernel_mcp.compile.api import compile_kernel
from evokernel_mcp.compile.cuda_backend import cuobjdump_path
from evokernel_mcp.compile.options import parse_options
from evokernel_mcp.subproc import run_sync

DOT_SRC = '''\
import triton
import triton.language as tl


@triton.jit
def small_mm(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)
'''
SIG = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "K": "i32"}
CONST = {"BM": 32, "BN": 32, "BK": 32}
OPTS = {"num_warps": 4}
TARGETS = ("gfx942", "gfx950", "gfx90a", "sm_90")


def compile_dot(target: str, **kw):
    return compile_kernel(DOT_SRC, "triton", "small_mm", target, SIG, CONST, kw.get("options", OPTS))


@pytest.fixture(scope="module")
def results():
    out = {}

    async def one(t):
        out[t] = await compile_dot(t)

    async def main():
        async with anyio.create_task_group() as tg:
            for t in TARGETS:
                tg.start_soon(one, t)

    anyio.run(main)
    return out


def _notes_yaml(hsaco_path) -> dict:
    text = run_sync(["llvm-readelf-19", "--notes", str(hsaco_path)], timeout_s=30).stdout
    body = text.split("AMDGPU Metadata:", 1)[1]
    body = body[: body.index("\n ...") if "\n ..." in body else len(body)]
    return yaml.safe_load(re.sub(r"^\s*---\s*$", "", body, count=1, flags=re.M))


@pytest.mark.parametrize("target", ["gfx942", "gfx950", "gfx90a"])
@pytest.mark.skipif(shutil.which("llvm-readelf-19") is None, reason="needs llvm-readelf-19")
def test_amd_resources_match_code_object_notes(results, target):
    r = results[target]
    assert r.ok, r.diagnostics
    assert r.target == target and not r.cached
    k = r.kernels[0]
    meta = _notes_yaml(artifacts.path_of(r.artifact_id, "kernel.hsaco"))["amdhsa.kernels"][0]
    assert k.name == meta[".name"] == "small_mm"
    assert k.vgpr_count == meta[".vgpr_count"] and k.sgpr_count == meta[".sgpr_count"]
    assert k.agpr_count == meta[".agpr_count"]
    assert k.lds_bytes == meta[".group_segment_fixed_size"]
    assert k.scratch_bytes == meta[".private_segment_fixed_size"]
    assert k.wavefront_size == meta[".wavefront_size"] == 64
    assert k.dynamic_lds_bytes and k.dynamic_lds_bytes > 0  # tl.dot stages A/B tiles through LDS
    assert any(p.field.startswith("kernels[0].vgpr_count") and "amdgpu metadata" in p.source for p in r.provenance)


@pytest.mark.parametrize("target", ["gfx942", "gfx950", "gfx90a"])
def test_amd_isa_summary_counts_what_is_in_the_asm(results, target):
    r = results[target]
    s = r.kernels[0].isa_summary
    asm = artifacts.path_of(r.artifact_id, "kernel.amdgcn.s").read_text()
    body = asm.split(".Lfunc_end0")[0]
    n_mfma = len(re.findall(r"^\s+v_mfma\w*", body, re.M))
    n_ds_read = len(re.findall(r"^\s+ds_(?:read|load)\w*", body, re.M))
    assert n_mfma > 0 and s.classes.get("mfma") == n_mfma
    assert n_ds_read > 0 and s.classes.get("ds_read") == n_ds_read
    assert s.total > n_mfma
    assert "kernel.amdgcn.s" in r.artifact_files and "kernel.ttgir" in r.artifact_files
    assert len(r.model_dump_json()) < 20_000  # the full assembly stays in the artifact


@pytest.mark.skipif(cuobjdump_path() is None, reason="needs cuobjdump (the triton wheel ships one)")
def test_sm90_resources_match_cuobjdump(results):
    r = results["sm_90"]
    assert r.ok, r.diagnostics
    k = r.kernels[0]
    res = run_sync([cuobjdump_path(), "-res-usage", str(artifacts.path_of(r.artifact_id, "kernel.cubin"))],
                   timeout_s=30).stdout
    regs = int(re.search(r"Function small_mm:\s*\n\s*REG:(\d+)", res).group(1))
    assert k.registers == regs
    assert k.spill_stores_bytes == 0 and k.wavefront_size == 32
    assert k.dynamic_lds_bytes and k.dynamic_lds_bytes > 0
    sass = artifacts.path_of(r.artifact_id, "kernel.sass").read_text()
    assert k.isa_summary.total > 0 and r.artifact_files[0] == "kernel.sass" and "small_mm" in sass
    assert "ptxas" in r.toolchain.version


def test_repeat_compile_is_served_from_cache(results):
    first = results["gfx942"]
    again = anyio.run(lambda: compile_dot("gfx942"))
    assert again.cached and again.artifact_id == first.artifact_id
    assert again.kernels == first.kernels
    base = {"source": DOT_SRC, "language": "triton", "kernel": "small_mm", "target": "gfx942", "signature": SIG,
            "constexprs": CONST, "options": parse_options(OPTS, "triton").stable_dict(), "toolchain": "t"}
    keys = {cache.cache_key(**base)}
    for change in ({"options": {"num_warps": 8}}, {"constexprs": {**CONST, "BK": 64}}, {"target": "gfx950"},
                   {"source": DOT_SRC + "\n"}, {"toolchain": "t2"}, {"signature": {**SIG, "K": "i64"}}):
        keys.add(cache.cache_key(**(base | change)))
    assert len(keys) == 7  # every input of the compile is part of the key


def test_occupancy_reported_with_limits(results):
    k = results["gfx942"].kernels[0]
    if k.occupancy is None:
        pytest.skip(f"arch/occupancy.py not available yet: {results['gfx942'].diagnostics}")
    assert k.occupancy.waves_per_simd >= 1 and k.occupancy.limiter in k.occupancy.limits
    assert any(p.field == "kernels[0].occupancy" and p.source.endswith("arch.yaml") for p in results["gfx942"].provenance)
