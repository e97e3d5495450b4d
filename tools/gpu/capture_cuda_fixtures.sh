#!/usr/bin/env bash
# Records genuine NVIDIA tool outputs on a GPU host, for CPU parser tests (tests/fixtures/cuda/).
# Usage (on the GPU machine, from the repo root): bash tools/gpu/capture_cuda_fixtures.sh DIR
set -uo pipefail
D=${1:-${OUT:-/tmp}/cuda_capture}
mkdir -p "$D"
date -u +%Y-%m-%dT%H:%M:%SZ > "$D/date.txt"
nvidia-smi -q -x > "$D/nvidia-smi-q-x.xml" 2>"$D/nvidia-smi.err"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,memory.total,driver_version --format=csv > "$D/nvidia-smi-query.csv" 2>&1
nvidia-smi > "$D/nvidia-smi.txt" 2>&1
(ncu --version; nvcc --version; python3 -c 'import sys,torch,triton; print(sys.version); print("torch", torch.__version__, torch.version.cuda); print("triton", triton.__version__)') > "$D/versions.txt" 2>&1
python3 - > "$D/torch_props.json" 2>"$D/torch_props.err" <<'PY'
import json, torch
p = torch.cuda.get_device_properties(0)
out = {}
for k in dir(p):
    if k.startswith("_"):
        continue
    v = getattr(p, k)
    if callable(v):
        continue
    try:
        json.dumps(v); out[k] = v
    except TypeError:
        out[k] = str(v)
out["torch_version"] = torch.__version__
print(json.dumps(out, indent=1, sort_keys=True))
PY
cat > "$D/axpy.py" <<'PY'
import sys, torch, triton, triton.language as tl
@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    tl.store(out_ptr + offs, a * x + y, mask=m)

@triton.jit
def fma_loop_kernel(x_ptr, out_ptr, n, ITERS: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    acc = x
    for i in range(ITERS):
        acc = acc * 1.0001 + 0.5
    tl.store(out_ptr + offs, acc, mask=m)

n = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 26
x = torch.randn(n, device="cuda"); y = torch.randn(n, device="cuda"); o = torch.empty_like(x)
grid = (triton.cdiv(n, 1024),)
for _ in range(3):
    axpy_kernel[grid](x, y, o, 2.0, n, BLOCK=1024)
    fma_loop_kernel[grid](x, o, n, ITERS=256, BLOCK=1024)
torch.cuda.synchronize()
print("ok", float((o - (2*x+y)).abs().max()) if False else "done")
PY
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,smsp__sass_thread_inst_executed_op_fadd_pred_on.sum,smsp__sass_thread_inst_executed_op_fmul_pred_on.sum,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__occupancy_limit_registers,sm__maximum_warps_per_active_cycle_pct
timeout 240 ncu --csv --metrics "$M" --cache-control all --clock-control none --kernel-name regex:"axpy|fma_loop" --launch-count 4 python3 "$D/axpy.py" > "$D/ncu_metrics.csv" 2> "$D/ncu_metrics.err"
timeout 240 ncu --set full --import-source yes --cache-control all --clock-control none --kernel-name regex:axpy --launch-count 1 -o "$D/axpy_full" -f python3 "$D/axpy.py" 16777216 > "$D/ncu_full.log" 2>&1
timeout 120 ncu --import "$D/axpy_full.ncu-rep" --page source --csv --print-source sass > "$D/ncu_source_sass.csv" 2> "$D/ncu_source.err"
timeout 120 ncu --import "$D/axpy_full.ncu-rep" --page details --csv > "$D/ncu_details.csv" 2> "$D/ncu_details.err"
timeout 120 ncu --import "$D/axpy_full.ncu-rep" --page raw --csv > "$D/ncu_raw.csv" 2> "$D/ncu_raw.err"
timeout 240 ncu --section SourceCounters --section WarpStateStats --import-source yes --cache-control all --clock-control none --kernel-name regex:fma_loop --launch-count 1 -o "$D/fma_src" -f python3 "$D/axpy.py" 16777216 > "$D/ncu_src.log" 2>&1
timeout 120 ncu --import "$D/fma_src.ncu-rep" --page source --csv --print-source sass > "$D/ncu_source_sass_fma.csv" 2>> "$D/ncu_source.err"
ncu --list-sets > "$D/ncu_list_sets.txt" 2>&1
ncu --list-sections > "$D/ncu_list_sections.txt" 2>&1
ncu --help > "$D/ncu_help.txt" 2>&1
ls -la "$D"
