"""The error of an fp32 GEMM on each path a kernel may take (PyTorch fp32 and TF32, Triton tl.dot with
input_precision "ieee", "tf32" and "tf32x3"), and of K-term sums by accumulator, against float64; for the docs
pages resources/gpu_arch/split_precision_gemm.md and accumulation_precision.md.

Error = max |out - float64| / RMS(float64), randn inputs, seed 0. On a GPU with Triton, all paths; on a CPU,
the emulated ones (TF32 rounding of the inputs, products summed in float64).

    python bench/precision_gemm_errors.py [--out FILE.json]
    python bench/precision_gemm_errors.py --accumulators   # K-term sums by accumulator (CPU, slow: minutes)
"""

from __future__ import annotations

import argparse
import json
import platform
import sys

import torch


def tf32(x):
    """Round float32 to TF32 (10 explicit mantissa bits), round to nearest even; kept in float32."""
    i = x.contiguous().view(torch.int32).to(torch.int64)
    i = ((i + 0x0FFF + ((i >> 13) & 1)) >> 13) << 13
    return i.to(torch.int32).view(torch.float32)


def rel(out, ref) -> float:
    return float((out.double() - ref).abs().max() / ref.pow(2).mean().sqrt())


def emulated(a, b, ref) -> dict[str, float]:
    def split(f):
        ab, bb = f(a), f(b)
        asm, bsm = f(a - ab), f(b - bb)
        return ab.double() @ bb.double() + ab.double() @ bsm.double() + asm.double() @ bb.double()

    bf16 = lambda x: x.bfloat16().float()  # noqa: E731
    return {"tf32 inputs (emulated)": rel(tf32(a).double() @ tf32(b).double(), ref),
            "tf32x3 inputs (emulated)": rel(split(tf32), ref),
            "bf16 inputs (emulated)": rel(bf16(a).double() @ bf16(b).double(), ref),
            "bf16x3 inputs (emulated)": rel(split(bf16), ref)}


def triton_paths(a, b, ref) -> dict[str, float]:
    import triton
    import triton.language as tl

    @triton.jit
    def mm(a_ptr, b_ptr, c_ptr, M, N, K, PREC: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pm, pn = tl.program_id(0), tl.program_id(1)
        rm, rn, rk = pm * BM + tl.arange(0, BM), pn * BN + tl.arange(0, BN), tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            x = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
            y = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
            acc += tl.dot(x, y, input_precision=PREC)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)

    m, k = a.shape
    n = b.shape[1]
    out = {}
    for prec in ("ieee", "tf32", "tf32x3"):
        c = torch.empty(m, n, device=a.device)
        mm[(m // 64, n // 64)](a, b, c, m, n, k, PREC=prec, BM=64, BN=64, BK=32)
        out[f"triton tl.dot {prec}"] = rel(c, ref)
    return out


def accumulators() -> list[dict]:
    """K-term dot products of bf16 inputs (products exact in fp32), 64 x 64 outputs, summed term by term in
    fp16, bf16, fp32, fp32 with Kahan compensation, and by torch.sum (pairwise); error vs float64."""
    torch.manual_seed(0)
    rows = []
    for k in (1024, 4096):
        a, b = torch.randn(64, k).bfloat16().float(), torch.randn(k, 64).bfloat16().float()
        prods = a[:, :, None] * b[None, :, :]
        ref = prods.double().sum(1)
        row: dict = {"K": k}
        for name, dt in (("fp16", torch.float16), ("bf16", torch.bfloat16), ("fp32", torch.float32)):
            acc = torch.zeros(64, 64, dtype=dt)
            for i in range(k):
                acc = acc + prods[:, i].to(dt)
            row[f"{name} sequential"] = rel(acc, ref)
        s, c = torch.zeros(64, 64), torch.zeros(64, 64)
        for i in range(k):
            y = prods[:, i] - c
            t = s + y
            c, s = (t - s) - y, t
        row["fp32 kahan"] = rel(s, ref)
        row["fp32 pairwise (torch.sum)"] = rel(prods.sum(1), ref)
        rows.append(row)
    return rows


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out")
    p.add_argument("--accumulators", action="store_true")
    args = p.parse_args()
    if args.accumulators:
        print(json.dumps({"metric": "max |out - float64| / RMS(float64)", "rows": accumulators()}, indent=1))
        return
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    rows = []
    for k in (1024, 4096, 16384):
        g = torch.Generator().manual_seed(0)
        a, b = torch.randn(256, k, generator=g), torch.randn(k, 256, generator=g)
        ref = (a.double() @ b.double())
        row = {"K": k, "shape": [256, k, 256]}
        a, b = a.to(dev), b.to(dev)
        refd = ref.to(dev)
        if dev == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = False
            row["torch fp32 (allow_tf32=False)"] = rel(a @ b, refd)
            torch.backends.cuda.matmul.allow_tf32 = True
            row["torch tf32 (allow_tf32=True)"] = rel(a @ b, refd)
            torch.backends.cuda.matmul.allow_tf32 = False
            try:
                row.update(triton_paths(a, b, refd))
            except Exception as e:  # noqa: BLE001 - report what ran
                row["triton error"] = f"{type(e).__name__}: {e}"[:300]
        else:
            row["torch fp32 (cpu)"] = rel(a @ b, refd)
        row.update(emulated(a.cpu(), b.cpu(), ref))
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    meta = {"device": torch.cuda.get_device_name() if dev == "cuda" else platform.processor() or "cpu",
            "torch": torch.__version__, "metric": "max |out - float64| / RMS(float64)", "rows": rows}
    try:
        import triton

        meta["triton"] = triton.__version__
    except ImportError:
        pass
    text = json.dumps(meta, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
