"""Roofline of profiled dispatches: the right peak for the counted FLOPs, and no division by zero
when the counters see no CUDA-core FLOPs (a tensor-core matmul, seen on the H200)."""

from evokernel_mcp.profile.derived import DeviceSpec, derive

H200 = DeviceSpec(arch="sm_90", vendor="nvidia", peak_gbs=4800.0,
                  peak_tflops={"fp32": 66.9, "fp16_bf16_tensor_dense": 989.4})


def test_tensor_core_kernel_without_counted_flops_does_not_divide_by_zero():
    c = {"dram__bytes_read.sum": 1e9, "dram__bytes_write.sum": 1e8,
         "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 0.0,
         "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum": 0.0,
         "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum": 0.0}
    out = derive(c, 1e6, H200)
    assert "roofline_fraction" not in out and "arithmetic_intensity" not in out


def test_cuda_core_flops_use_the_fp32_peak():
    c = {"dram__bytes_read.sum": 1e9, "dram__bytes_write.sum": 0.0,
         "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 1e11}
    out = derive(c, 1e7, H200)
    # 2e11 FLOP / 1e9 B = 200 FLOP/B; ridge = 66.9e3/4800 = 13.9 -> compute side, attainable 66.9 TFLOP/s
    assert abs(out["roofline_ridge_point"].value - 66.9e3 / 4800) < 1e-3
    achieved = 2e11 / 1e7 / 1e3  # 20 TFLOP/s
    assert abs(out["roofline_fraction"].value - 100 * achieved / 66.9) < 1e-2


def test_no_cuda_core_peak_means_no_roofline_rather_than_a_tensor_core_one():
    spec = DeviceSpec(arch="sm_90", vendor="nvidia", peak_gbs=4800.0, peak_tflops={"fp8_tensor_dense": 1978.9})
    c = {"dram__bytes_read.sum": 1e9, "dram__bytes_write.sum": 0.0,
         "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 1e11}
    out = derive(c, 1e7, spec)
    assert "arithmetic_intensity" in out and "roofline_fraction" not in out
