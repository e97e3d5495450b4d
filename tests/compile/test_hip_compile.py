"""compile_hip end to end on this CPU-only machine (offline clang-19 path; gfx950 via Triton's LLVM).

Each parsed number is checked against a second, independent read: llvm-readelf-19 --notes on the HSACO
(the code object's own metadata) and a plain grep of the assembly.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from evokernel_mcp.compile.amd_meta import parse_amdgpu_metadata
from evokernel_mcp.compile.hip import compile_hip
from evokernel_mcp.compile.isa import extract_kernel_asm, summarize_amdgcn

READELF = shutil.which("llvm-readelf-19") or shutil.which("llvm-readelf")
pytestmark = pytest.mark.skipif(shutil.which("clang-19") is None and shutil.which("hipcc") is None,
                                reason="needs clang-19 (offline HIP) or hipcc")

LDS_KERNEL = textwrap.dedent("""\
    #include <hip/hip_runtime.h>
    extern "C" __global__ void __launch_bounds__(256) lds_fma(const float* __restrict__ a, float* __restrict__ out,
                                                              int n) {
      __shared__ float tile[256 * 4];   // 4096 bytes of LDS
      int t = threadIdx.x;
      int base = blockIdx.x * 1024;
      for (int i = 0; i < 4; ++i) tile[t + 256 * i] = a[base + t + 256 * i];
      __syncthreads();
      float acc = 0.f;
      for (int k = 0; k < n; ++k) {
        acc = __builtin_fmaf(tile[(t + k) & 1023], tile[(t * 3 + k) & 1023], acc);
        __builtin_amdgcn_sched_group_barrier(0x100, 2, 0);  // 2 DS reads
        __builtin_amdgcn_sched_group_barrier(0x002, 1, 0);  // then 1 VALU
      }
      out[base + t] = acc;
    }
    """)

SPILL_KERNEL = textwrap.dedent("""\
    #include <hip/hip_runtime.h>
    extern "C" __global__ void __attribute__((amdgpu_num_vgpr(24))) spill(const float4* in, float* out, int n) {
      int t = threadIdx.x;
      float4 v[16];
    #pragma unroll
      for (int i = 0; i < 16; ++i) v[i] = in[t * 16 + i];
      float s = 0.f;
      for (int j = 0; j < n; ++j) {
    #pragma unroll
        for (int i = 0; i < 16; ++i) s += v[i].x * v[(i + 1) & 15].y + v[i].z * v[i].w * (float)j;
      }
      out[t] = s;
    }
    """)

MFMA_KERNEL = textwrap.dedent("""\
    #include <hip/hip_runtime.h>
    typedef _Float16 half4 __attribute__((ext_vector_type(4)));
    typedef float float16 __attribute__((ext_vector_type(16)));
    extern "C" __global__ void mfma_k(const half4* a, const half4* b, float16* d) {
      float16 acc = {0};
      int t = threadIdx.x;
      for (int k = 0; k < 8; ++k)
        acc = __builtin_amdgcn_mfma_f32_32x32x8f16(a[t + 64 * k], b[t + 64 * k], acc, 0, 0, 0);
      d[t] = acc;
    }
    """)


@pytest.fixture(scope="module", params=["gfx942", "gfx950"])
def lds_build(request, tmp_path_factory):
    target = request.param
    out = compile_hip(LDS_KERNEL, "lds_fma", target, flags=[], workdir=tmp_path_factory.mktemp(target),
                      timeout_s=120)
    assert out.ok, out.log
    return target, out


def test_toolchain_is_named_exactly(lds_build):
    target, out = lds_build
    assert out.toolchain.path and out.toolchain.version
    if target == "gfx950":
        assert "clang-19 (frontend" in out.toolchain.name and "triton-bundled LLVM" in out.toolchain.name
        assert "kernel.gfx942.ll" in out.files and "define" in out.files["kernel.gfx942.ll"]
    assert f"{target}" in out.asm.split(".amdgcn_target", 1)[1].splitlines()[0]


@pytest.mark.skipif(READELF is None, reason="needs llvm-readelf")
def test_metadata_matches_the_code_objects_own_notes(lds_build, tmp_path):
    target, out = lds_build
    (from_asm,) = parse_amdgpu_metadata(out.asm)
    assert out.binary, "no HSACO produced"
    hsaco = tmp_path / "k.hsaco"
    hsaco.write_bytes(out.binary)
    notes = subprocess.run([READELF, "--notes", str(hsaco)], capture_output=True, text=True, check=True).stdout
    (from_elf,) = parse_amdgpu_metadata(notes)
    for f in ("vgpr_count", "agpr_count", "sgpr_count", "group_segment_fixed_size", "private_segment_fixed_size",
              "vgpr_spill_count", "max_flat_workgroup_size", "wavefront_size"):
        assert getattr(from_asm, f) == getattr(from_elf, f), f
    # and against the raw YAML lines themselves (a third read, no parser)
    assert int(re.search(r"\.vgpr_count:\s+(\d+)", notes).group(1)) == from_asm.vgpr_count
    assert int(re.search(r"\.sgpr_count:\s+(\d+)", notes).group(1)) == from_asm.sgpr_count
    assert from_asm.group_segment_fixed_size == 4096 and from_asm.max_flat_workgroup_size == 256
    assert from_asm.name == "lds_fma" and target in from_asm.target


def test_isa_summary_counts_what_grep_finds(lds_build):
    _, out = lds_build
    body = extract_kernel_asm(out.asm, "lds_fma")
    grep = lambda rx: len(re.findall(rx, body, re.M))  # noqa: E731
    s = summarize_amdgcn(out.asm, "lds_fma")
    assert s.classes["ds_read"] == grep(r"^\s*ds_read") > 0
    assert s.classes["ds_write"] == grep(r"^\s*ds_write") > 0
    assert s.classes["valu_fma"] >= grep(r"^\s*v_fmac_") > 0
    assert s.classes["sched_group_barrier"] == grep(r";\s*sched_group_barrier") >= 2
    assert s.classes["s_barrier"] == grep(r"^\s*s_barrier\b") >= 1
    assert s.classes["s_waitcnt"] == grep(r"^\s*s_waitcnt")
    assert s.hottest_loop and s.hottest_loop["ds_read"] >= 2 and s.hottest_loop["sched_group_barrier"] >= 2
    assert s.hottest_loop_label and re.search(rf"^{re.escape(s.hottest_loop_label)}:", body, re.M)


def test_syntax_error_comes_back_with_the_users_line(tmp_path):
    src = ('#include <hip/hip_runtime.h>\nextern "C" __global__ void bad(float* x) {\n'
           '  int t = threadIdx.x\n  x[t] = 1;\n}\n')
    out = compile_hip(src, "bad", "gfx942", flags=[], workdir=tmp_path, timeout_s=120)
    assert not out.ok
    err = next(d for d in out.diagnostics if d.severity == "error")
    assert (err.line, err.column) == (3, 22) and "expected ';'" in err.message


def test_spills_are_reported(tmp_path):
    out = compile_hip(SPILL_KERNEL, "spill", "gfx942", flags=[], workdir=tmp_path, timeout_s=120)
    assert out.ok, out.log
    (k,) = parse_amdgpu_metadata(out.asm)
    assert k.vgpr_spill_count > 0 and k.private_segment_fixed_size > 0
    s = summarize_amdgcn(out.asm, "spill")
    assert s.classes.get("scratch_store", 0) > 0 and any("scratch" in n for n in s.notable)


def test_mfma_builtin_for_gfx950(tmp_path):
    out = compile_hip(MFMA_KERNEL, "mfma_k", "gfx950", flags=["-O2"], workdir=tmp_path, timeout_s=120)
    assert out.ok, out.log
    body = extract_kernel_asm(out.asm, "mfma_k")
    assert summarize_amdgcn(out.asm, "mfma_k").classes["mfma"] == len(re.findall(r"^\s*v_mfma", body, re.M)) > 0


def test_timeout_is_a_diagnostic_not_an_exception(tmp_path, monkeypatch):
    """A stand-in compiler that never finishes (it answers --version, then sleeps) is killed at the budget,
    and the timeout comes back as a diagnostic: nothing here depends on how fast the real compiler is."""
    never = tmp_path / "bin" / "hipcc"
    never.parent.mkdir()
    never.write_text('#!/bin/sh\n[ "$1" = --version ] && { echo "stand-in hipcc version 0"; exit 0; }\n'
                     "exec sleep 600\n")
    never.chmod(0o755)
    monkeypatch.setenv("HIPCC", str(never))
    out = compile_hip(SPILL_KERNEL, "spill", "gfx942", flags=[], workdir=tmp_path / "w", timeout_s=1)
    assert not out.ok and out.toolchain.name == "hipcc"
    assert any("did not finish within 1 s" in d.message and "compile timeout" in d.message
               for d in out.diagnostics), out.diagnostics


def test_an_exhausted_budget_is_a_timeout_without_running_the_compiler(tmp_path, monkeypatch):
    """The budget is honoured exactly: with nothing left, no step starts (the stand-in would record it)."""
    ran = tmp_path / "ran"
    spy = tmp_path / "bin" / "hipcc"
    spy.parent.mkdir()
    spy.write_text(f'#!/bin/sh\n[ "$1" = --version ] && {{ echo "stand-in hipcc version 0"; exit 0; }}\n'
                   f"touch {ran}\n")
    spy.chmod(0o755)
    monkeypatch.setenv("HIPCC", str(spy))
    monkeypatch.setenv("EVOKERNEL_SANDBOX", "process")  # the spy writes beside itself
    out = compile_hip(SPILL_KERNEL, "spill", "gfx942", flags=[], workdir=tmp_path / "w", timeout_s=1e-9)
    assert not out.ok and any("did not finish" in d.message for d in out.diagnostics)
    assert not ran.exists()


def test_unknown_target_and_missing_kernel(tmp_path):
    out = compile_hip(LDS_KERNEL, "lds_fma", "gfx1100", flags=[], workdir=tmp_path, timeout_s=60)
    assert not out.ok and "gfx942" in out.diagnostics[0].message
    out = compile_hip(LDS_KERNEL, "nope", "gfx90a", flags=[], workdir=tmp_path / "b", timeout_s=120)
    assert out.ok and any(d.severity == "warning" and "lds_fma" in d.message for d in out.diagnostics)


def test_rocm_path_replay_uses_hipcc_argv_without_a_shell(tmp_path, monkeypatch, lds_build, use_settings):
    """A fake hipcc (replay of a recorded gfx942 assembly) stands in for ROCm: checks how we call it."""
    _, out = lds_build
    recorded = tmp_path / "recorded.s"
    recorded.write_text(out.asm)
    log = tmp_path / "argv.txt"
    fake = tmp_path / "hipcc"
    fake.write_text(f"#!{sys.executable}\nimport sys, shutil\nopen({str(log)!r}, 'w').write('\\n'.join(sys.argv))\n"
                    f"shutil.copy({str(recorded)!r}, sys.argv[sys.argv.index('-o') + 1])\n")
    fake.chmod(0o755)
    monkeypatch.setenv("HIPCC", str(fake))
    use_settings(sandbox="process")  # the replay writes its argv log beside itself
    res = compile_hip(LDS_KERNEL, "lds_fma", "gfx942", flags=["-ffast-math"], workdir=tmp_path / "w", timeout_s=60)
    argv = log.read_text().splitlines()
    assert res.ok and res.toolchain.path == str(fake) and res.asm == out.asm
    assert "--offload-arch=gfx942" in argv and "--cuda-device-only" in argv and "-ffast-math" in argv
    assert argv[-1].endswith("kernel.hip") and "-S" in argv
