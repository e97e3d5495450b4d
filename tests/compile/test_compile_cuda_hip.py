"""compile_kernel on CUDA C++ (nvcc) and HIP C++ (offline clang-19 / Triton's LLVM), CPU only, plus the
ptxas -v / cuobjdump -res-usage parsers on output recorded here (nvcc 13.0 V13.0.88, triton-wheel cuobjdump 13.1)."""

from __future__ import annotations

import re

import anyio
import pytest

from evokernel_mcp import artifacts
from evokernel_mcp.compile.api import compile_kernel
from evokernel_mcp.compile.cuda_backend import nvcc_path
from evokernel_mcp.compile.nv_resources import parse_cuobjdump_res_usage, parse_ptxas_verbose
from evokernel_mcp.errors import EvoError, ParseError

PTXAS_V = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z5otherPf' for 'sm_90'
ptxas info    : Function properties for _Z5otherPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers, 512 bytes smem
ptxas info    : Compile time = 5.037 ms
ptxas info    : Compiling entry function 'spilly' for 'sm_90'
ptxas info    : Function properties for spilly
    1120 bytes stack frame, 2212 bytes spill stores, 2328 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 1120 bytes cumulative stack size
ptxas info    : Compile time = 2444.244 ms
"""
RES_USAGE = """
Resource usage:
 Common:
  GLOBAL:0
 Function _Z5otherPf:
  REG:10 STACK:0 SHARED:1536 LOCAL:0 CONSTANT[0]:536 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function spilly:
  REG:32 STACK:1120 SHARED:0 LOCAL:0 CONSTANT[0]:548 TEXTURE:0 SURFACE:0 SAMPLER:0
"""


def test_parse_ptxas_verbose_recorded():
    other, spilly = parse_ptxas_verbose(PTXAS_V)
    assert (other.name, other.registers, other.shared_bytes, other.barriers) == ("_Z5otherPf", 10, 512, 1)
    assert (spilly.registers, spilly.spill_stores_bytes, spilly.spill_loads_bytes, spilly.stack_frame_bytes) == \
        (32, 2212, 2328, 1120)
    assert spilly.shared_bytes == 0


def test_parse_ptxas_verbose_truncated_and_empty():
    cut = PTXAS_V[: PTXAS_V.index("ptxas info    : Used 32")]
    with pytest.raises(ParseError, match="spilly"):
        parse_ptxas_verbose(cut)
    assert parse_ptxas_verbose("") == []


def test_parse_cuobjdump_res_usage_recorded():
    other, spilly = parse_cuobjdump_res_usage(RES_USAGE)
    assert (other.registers, other.shared_bytes, spilly.stack_frame_bytes) == (10, 1536, 1120)
    with pytest.raises(ParseError):
        parse_cuobjdump_res_usage(RES_USAGE.rsplit("\n", 2)[0])


CUDA_SPILL = """\
#define N 40
extern "C" __global__ void spilly(const float* __restrict__ a, float* __restrict__ out) {
  float acc[N];
  int t = blockIdx.x * blockDim.x + threadIdx.x;
#pragma unroll
  for (int i = 0; i < N; ++i) acc[i] = a[t * N + i];
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int i = 0; i < N; ++i) acc[i] = acc[i] * acc[(i * 7 + r) % N] + acc[(i + 1) % N];
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < N; ++i) s += acc[i];
  out[t] = s;
}
"""


def _have_nvcc() -> bool:
    try:
        return bool(nvcc_path())
    except EvoError:
        return False


@pytest.mark.skipif(not _have_nvcc(), reason="needs nvcc")
def test_cuda_kernel_with_spills_reports_them():
    r = anyio.run(lambda: compile_kernel(CUDA_SPILL, "cuda", "spilly", "sm_90",
                                         options={"flags": ["-maxrregcount=24"], "workgroup_size": 128}))
    assert r.ok, r.diagnostics
    k = r.kernels[0]
    assert k.name == "spilly" and k.registers <= 24
    assert k.spill_stores_bytes > 0 and k.spill_loads_bytes > 0 and k.scratch_bytes > 0
    assert r.toolchain.name == "nvcc" and "13." in (r.toolchain.version or "")
    log = artifacts.path_of(r.artifact_id, "nvcc.log").read_text()
    assert f"{k.spill_stores_bytes} bytes spill stores" in log


@pytest.mark.skipif(not _have_nvcc(), reason="needs nvcc")
def test_cuda_syntax_error_has_user_line():
    src = "__global__ void k(float* x) {\n  x[0] = 1.0f\n}\n"
    r = anyio.run(lambda: compile_kernel(src, "cuda", "k", "sm_90"))
    assert not r.ok
    assert any(d.severity == "error" and d.line in (2, 3) for d in r.diagnostics), r.diagnostics


HIP_LDS = """\
#include <hip/hip_runtime.h>
extern "C" __global__ void __launch_bounds__(256) lds_fma(const float* __restrict__ x, float* __restrict__ y) {
  __shared__ float tile[256];
  int t = threadIdx.x;
  tile[t] = x[blockIdx.x * 256 + t];
  __syncthreads();
  float a = tile[(t + 1) & 255], b = tile[(t + 7) & 255];
  __builtin_amdgcn_sched_group_barrier(0x100, 2, 0);
  __builtin_amdgcn_sched_group_barrier(0x002, 1, 0);
  y[blockIdx.x * 256 + t] = __builtin_fmaf(a, b, y[blockIdx.x * 256 + t]);
}
"""


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
def test_hip_lds_kernel_end_to_end(target):
    r = anyio.run(lambda: compile_kernel(HIP_LDS, "hip", "lds_fma", target))
    if not r.ok and any("not found" in d.message for d in r.diagnostics):
        pytest.skip(f"no HIP toolchain: {r.diagnostics}")
    assert r.ok, r.diagnostics
    k = r.kernels[0]
    assert k.name == "lds_fma" and k.lds_bytes == 1024 and k.max_workgroup_size == 256
    asm = artifacts.path_of(r.artifact_id, "kernel.amdgcn.s").read_text()
    assert k.vgpr_count == int(re.search(r"\.vgpr_count:\s+(\d+)", asm).group(1))
    assert k.isa_summary.classes.get("ds_read", 0) >= 1
    assert k.isa_summary.classes.get("sched_group_barrier") == 2


def test_hip_compile_survives_a_state_dir_that_moved_away(tmp_path, monkeypatch):
    """The offline ROCm root lives in the state dir: a process that compiled in one state dir, which is then
    removed, compiles again in another (the root was once cached per process, pointing into the first)."""
    import shutil

    first = tmp_path / "first"
    monkeypatch.setenv("EVOKERNEL_HOME", str(first))
    r = anyio.run(lambda: compile_kernel(HIP_LDS, "hip", "lds_fma", "gfx942"))
    if not r.ok and any("not found" in d.message for d in r.diagnostics):
        pytest.skip(f"no HIP toolchain: {r.diagnostics}")
    assert r.ok, r.diagnostics
    shutil.rmtree(first)
    monkeypatch.setenv("EVOKERNEL_HOME", str(tmp_path / "second"))
    again = anyio.run(lambda: compile_kernel(HIP_LDS + "// another source: no cache hit\n", "hip", "lds_fma", "gfx942"))
    assert again.ok, again.diagnostics
