"""Development bench for the rmsnorm_triton and fused_mlp reference kernels (standalone: torch + triton).

Verifies each on its task's full shape (fresh random inputs; rmsnorm vs the fp32 PyTorch formula within
bf16 tolerance, fused_mlp by relative L2 error vs float32 PyTorch < 1e-2), then times kernel and PyTorch
with CUDA events around each launch, L2 flushed (512 MB fill) before each, median of 50. The memory-bound
rmsnorm is put against the measured copy bandwidth (a 2 GiB device-to-device copy, bytes read + written).
Run on the GPU host from the repo root:  python3 bench/families_bench.py
Writes bench/results/families_<device>_<date>.{md,json} (copies under $OUT when set).
"""
import datetime
import functools
import importlib.util
import json
import os
import shutil
import statistics
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parent.parent


def load(folder):
    spec = importlib.util.spec_from_file_location(folder, REPO / "resources/reference_kernels" / folder / "kernel.py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def timed(fn, *a, reps=50):
    flush = torch.empty(512 * 2**20, dtype=torch.uint8, device="cuda")
    for _ in range(3):
        fn(*a)
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for i, (s, e) in enumerate(ev):
        flush.fill_(i & 0xFF)
        s.record()
        fn(*a)
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in ev)


def main():
    import triton
    rep = {"device": torch.cuda.get_device_name(0), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
        timespec="seconds"), "versions": {"torch": torch.__version__, "triton": triton.__version__}}
    src = torch.empty(2**30, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    copy_ms = timed(functools.partial(dst.copy_, src), reps=20)
    rep["copy_gbs"] = 2 * src.numel() * 2 / copy_ms / 1e6
    del src, dst
    rms = load("rmsnorm_triton")
    x = torch.randn(4096, 8192, device="cuda").to(torch.bfloat16)
    w = (0.5 + torch.rand(8192, device="cuda")).to(torch.bfloat16)
    y = rms.run(x, w)
    ok = torch.allclose(y.float(), rms.reference(x, w).float(), rtol=1.6e-2, atol=1e-2)
    t_k, t_t = timed(rms.run, x, w), timed(rms.reference, x, w)
    b = 2 * (2 * x.numel() + 8192)
    rep["rmsnorm"] = {"passed": ok, "ms": t_k, "torch_ms": t_t, "gbs": b / t_k / 1e6,
                      "fraction_of_copy_bw": b / t_k / 1e6 / rep["copy_gbs"]}
    mlp = load("fused_mlp")
    M, K, H = 4096, 2048, 8192
    x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    w1 = (torch.randn(K, H, device="cuda") * K ** -0.5).to(torch.bfloat16)
    b1 = (0.1 * torch.randn(H, device="cuda")).to(torch.bfloat16)
    w2 = (torch.randn(H, K, device="cuda") * H ** -0.5).to(torch.bfloat16)
    y = mlp.run(x, w1, b1, w2).float()
    ref = F.gelu(x.float() @ w1.float() + b1.float(), approximate="tanh") @ w2.float()
    rel = float((y - ref).norm() / ref.norm())
    t_k, t_t = timed(mlp.run, x, w1, b1, w2), timed(mlp.reference, x, w1, b1, w2)
    flop = 2 * M * K * H * 2 + 8 * M * H
    rep["fused_mlp"] = {"passed": rel < 1e-2, "rel_l2": rel, "ms": t_k, "torch_ms": t_t, "tflops": flop / t_k / 1e9,
                        "torch_tflops": flop / t_t / 1e9}
    md = (f"# rmsnorm / fused_mlp development bench ({rep['device']}, {rep['date']})\n\n{rep['versions']}; CUDA events, "
          f"L2 flushed before each launch, median of 50\n\n| kernel | verified | ms | PyTorch ms | speedup | rate |\n"
          f"|---|---|---|---|---|---|\n| copy (2 GiB d2d) | - | {copy_ms:.4f} | - | - | {rep['copy_gbs']:.0f} GB/s |\n"
          f"| rmsnorm 4096x8192 | {rep['rmsnorm']['passed']} | {rep['rmsnorm']['ms']:.4f} | {rep['rmsnorm']['torch_ms']:.4f} | "
          f"{rep['rmsnorm']['torch_ms'] / rep['rmsnorm']['ms']:.2f} | {rep['rmsnorm']['gbs']:.0f} GB/s = "
          f"{100 * rep['rmsnorm']['fraction_of_copy_bw']:.1f}% of copy |\n"
          f"| fused_mlp 4096x2048x8192 | {rep['fused_mlp']['passed']} (rel L2 {rel:.2e}) | {rep['fused_mlp']['ms']:.4f} | "
          f"{rep['fused_mlp']['torch_ms']:.4f} | {rep['fused_mlp']['torch_ms'] / rep['fused_mlp']['ms']:.2f} | "
          f"{rep['fused_mlp']['tflops']:.0f} TFLOP/s (PyTorch {rep['fused_mlp']['torch_tflops']:.0f}) |\n")
    print(md)
    tag = "H200" if "H200" in rep["device"] else rep["device"].replace(" ", "_")
    out = REPO / "bench/results" / f"families_{tag}_{rep['date'][:10]}"
    out.with_suffix(".md").write_text(md)
    out.with_suffix(".json").write_text(json.dumps(rep, indent=1))
    if os.environ.get("OUT"):
        for s in (".md", ".json"):
            shutil.copy(out.with_suffix(s), Path(os.environ["OUT"]) / (out.name + s))


if __name__ == "__main__":
    main()
