"""The profile area: the AMD roofline peak matches the counted MFMA dtype, a partial device
(one GCD) scales its FLOP peaks like its bandwidth, integer v_mad is not an FP FMA, bad regexes are refused."""

import shutil

import anyio
import pytest

from evokernel_mcp.errors import BadInput
from evokernel_mcp.profile import api, collect
from evokernel_mcp.profile.derived import DeviceSpec, derive
from evokernel_mcp.profile.trace import classify_amd
from tests.conftest import ROCM_FIXTURES

# MI355X table peaks (resources/gpu_arch/arch.yaml#gfx950.products.MI355X.peak_tflops), bandwidth 8 TB/s
MI355X = DeviceSpec(arch="gfx950", vendor="amd", compute_units=256, peak_gbs=8000.0,
                    peak_tflops={"bf16_matrix": 2516.6, "fp8_matrix_scaled": 5033.2, "fp6_fp4_matrix": 10066.3})


def test_bf16_mfma_roofline_uses_the_bf16_peak_not_the_fp4_one():
    # 1e9 MOPS * 512 = 5.12e11 FLOP over 1e8 B (AI 5120 FLOP/B) in 1e6 ns -> 512 TFLOP/s achieved
    c = {"FETCH_SIZE": 1e8 / 1024, "WRITE_SIZE": 0.0, "SQ_INSTS_VALU_MFMA_MOPS_BF16": 1e9}
    out = derive(c, 1e6, MI355X)
    assert abs(out["roofline_ridge_point"].value - 2516.6e3 / 8000) < 1e-3  # not 10066.3e3 / 8000
    assert abs(out["roofline_fraction"].value - 100 * 512 / 2516.6) < 1e-2
    assert "bf16_matrix" in out["roofline_ridge_point"].formula


def test_amd_roofline_absent_when_the_counted_dtype_has_no_peak():
    spec = DeviceSpec(arch="gfx950", vendor="amd", compute_units=256, peak_gbs=8000.0,
                      peak_tflops={"fp6_fp4_matrix": 10066.3})
    out = derive({"FETCH_SIZE": 1e5, "WRITE_SIZE": 0.0, "SQ_INSTS_VALU_MFMA_MOPS_BF16": 1e9}, 1e6, spec)
    assert "arithmetic_intensity" in out and "roofline_fraction" not in out


def test_partial_device_scales_flop_peaks_like_bandwidth(tmp_path):
    src = ROCM_FIXTURES / "rocprofv3" / "att_gfx950_rocm6.4_skinny_M128" / "bg-126-035d" / "49424_agent_info.csv"
    shutil.copy(src, tmp_path / src.name)  # recorded MI350X agent: 256 CUs
    base = DeviceSpec(arch="gfx950", vendor="amd", compute_units=512, peak_gbs=16000.0,
                      peak_tflops={"bf16_matrix": 4000.0})  # a package twice the recorded device
    spec = collect._amd_spec(base, tmp_path)
    assert spec.compute_units == 256
    assert spec.peak_gbs == pytest.approx(8000.0)
    assert spec.peak_tflops["bf16_matrix"] == pytest.approx(2000.0)


@pytest.mark.parametrize("inst", ["v_mad_u64_u32 v[2:3], s[0:1], s2, v[0:1]", "v_mad_u32_u24 v1, v2, v3, v4"])
def test_trace_integer_mad_is_not_valu_fma(inst):
    assert classify_amd(inst) == "VALU other"
    assert classify_amd("v_mad_f32 v1, v2, v3, v4") == "VALU FMA"


@pytest.mark.parametrize("tool", ["profile_pmc", "thread_trace"])
def test_bad_kernel_filter_regex_is_refused_up_front(tool):
    fn = getattr(api, tool)
    with pytest.raises(BadInput, match="not a valid regex"):
        anyio.run(lambda: fn(candidate="def run(x):\n    return x\n", reference="class Model: pass",
                             kernel_filter="matmul(", device="rocm:0"))


def test_integer_mfma_ops_are_not_flops():
    c = {"FETCH_SIZE": 1e8 / 1024, "WRITE_SIZE": 0.0, "SQ_INSTS_VALU_MFMA_MOPS_I8": 1e9,
         "SQ_INSTS_VALU_MFMA_MOPS_BF16": 1e6}
    out = derive(c, 1e6, MI355X)
    assert out["flops"].value == 512 * 1e6 and "I8" not in out["flops"].formula
    assert out["int_mfma_ops"].value == 512 * 1e9 and out["int_mfma_ops"].unit == "OP"
    only_int = derive({"FETCH_SIZE": 1e5, "WRITE_SIZE": 0.0, "SQ_INSTS_VALU_MFMA_MOPS_I8": 1e9}, 1e6, MI355X)
    assert "flops" not in only_int and "roofline_fraction" not in only_int
