"""ISA summaries: AMDGCN produced by compile_hip here, SASS from the recorded cuobjdump listing
(tests/fixtures/cuda/sass_smem_fma_sm90.txt, see SOURCES.md)."""

from __future__ import annotations

import re
import shutil
import textwrap
from pathlib import Path

import pytest

from evokernel_mcp.compile.hip import compile_hip
from evokernel_mcp.compile.isa import extract_kernel_asm, kernel_matches, kernel_names, summarize_amdgcn, summarize_sass
from evokernel_mcp.errors import BadInput

SASS = Path(__file__).resolve().parents[1] / "fixtures" / "cuda" / "sass_smem_fma_sm90.txt"

TWO_KERNELS = textwrap.dedent("""\
    #include <hip/hip_runtime.h>
    __global__ void scale(float* x, float a) { x[threadIdx.x] *= a; }
    extern "C" __global__ void __launch_bounds__(256) lds_dma(const float* __restrict__ g, float* out, int n) {
      __shared__ float buf[256];
      float acc = 0.f;
      for (int k = 0; k < n; ++k) {
        __builtin_amdgcn_global_load_lds(g + k * 256 + threadIdx.x, buf, 4, 0, 0);
        __syncthreads();
        acc += buf[(threadIdx.x + k) & 255];
        __syncthreads();
      }
      out[threadIdx.x] = acc;
    }
    """)


@pytest.fixture(scope="module")
def two_asm(tmp_path_factory):
    if shutil.which("clang-19") is None and shutil.which("hipcc") is None:
        pytest.skip("needs clang-19 or hipcc")
    out = compile_hip(TWO_KERNELS, "lds_dma", "gfx942", flags=[], workdir=tmp_path_factory.mktemp("isa"),
                      timeout_s=120)
    assert out.ok, out.log
    return out.asm


def test_kernel_names_and_mangled_match(two_asm):
    assert kernel_names(two_asm) == ["_Z5scalePff", "lds_dma"]
    assert kernel_matches("_Z5scalePff", "scale") and not kernel_matches("_Z5scalePff", "scal")
    assert kernel_matches("_ZN2ns6kernelEPf", "kernel") and not kernel_matches("_Z7kernel2Pf", "kernel")


def test_extract_one_kernel_of_two(two_asm):
    body = extract_kernel_asm(two_asm, "scale")
    assert "global_load_dword" in body and "global_load_lds" not in body and "s_endpgm" in body
    assert "global_load_lds_dword" in extract_kernel_asm(two_asm, "lds_dma")
    assert extract_kernel_asm(two_asm, None) == two_asm  # several kernels: the whole text
    with pytest.raises(BadInput, match="_Z5scalePff, lds_dma"):
        extract_kernel_asm(two_asm, "missing")


def test_amdgcn_classes_and_loop(two_asm):
    s = summarize_amdgcn(two_asm, "lds_dma")
    body = extract_kernel_asm(two_asm, "lds_dma")
    assert s.classes["lds_dma"] == len(re.findall(r"^\s*global_load_lds_", body, re.M)) == 1
    assert s.classes["s_barrier"] == len(re.findall(r"^\s*s_barrier\b", body, re.M)) == 2
    assert s.classes["smem"] == len(re.findall(r"^\s*s_load_", body, re.M))
    assert s.total == sum(v for k, v in s.classes.items() if "." not in k)
    assert s.hottest_loop["lds_dma"] == 1 and s.hottest_loop["s_barrier"] == 2
    assert any(n.startswith(f"loop block {s.hottest_loop_label}") for n in s.notable)
    scale = summarize_amdgcn(two_asm, "scale")
    assert scale.hottest_loop is None and scale.classes["global_load.dword"] == 1


def test_sass_summary_on_recorded_listing():
    text = SASS.read_text()
    s = summarize_sass(text, "smem_fma")
    ops = re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?P\w+\s+)?([A-Z][A-Z0-9_.]*)", text)
    count = lambda prefix: sum(1 for o in ops if o.split(".")[0] == prefix)  # noqa: E731
    assert s.total == len(ops) == 112
    for cls in ("FFMA", "LDS", "MUFU", "BAR", "STS", "LDG", "STG"):
        assert s.classes[cls] == count(cls) > 0, cls
    assert s.classes["LDG.128"] == 1 and s.classes["STS.128"] == 1 and s.classes["LDS.32"] == s.classes["LDS"]
    # hottest loop: /*0210*/ .. `@P1 BRA 0x210` at /*0460*/, the 4x-unrolled body (8 LDS, 4 FFMA)
    assert s.hottest_loop_label == "/*0210*/"
    assert (s.hottest_loop["LDS"], s.hottest_loop["FFMA"], s.hottest_loop["BRA"]) == (8, 4, 1)
    assert not s.classes.get("LDL") and not s.classes.get("STL")


def test_sass_kernel_missing():
    with pytest.raises(BadInput, match="smem_fma"):
        summarize_sass(SASS.read_text(), "other")
