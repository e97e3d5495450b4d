"""sweep over 12 configurations of a Triton GEMM (fp16 in, fp32 out, 4096^3) on the GPU host, in one call:
every configuration verified and benchmarked against torch.matmul, ranked with its verdict.

    PYTHONPATH=. python3 bench/sweep_gemm.py [--out FILE.md]
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

import anyio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

REFERENCE = """import torch
class Model(torch.nn.Module):
    def forward(self, a, b):
        return (a @ b).float()
def get_inputs():
    return [torch.randn(4096, 4096).half(), torch.randn(4096, 4096).half()]
def get_init_inputs():
    return []
"""
CANDIDATE = """import torch, triton, triton.language as tl
BM = 128
BN = 128
BK = 32
WARPS = 4
STAGES = 3

@triton.jit
def mm(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * sam + (k + rk)[None, :] * sak)
        b = tl.load(b_ptr + (k + rk)[:, None] * sbk + rn[None, :] * sbn)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc)

def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N, device=a.device, dtype=torch.float32)
    mm[(M // BM, N // BN)](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                           c.stride(0), c.stride(1), BM=BM, BN=BN, BK=BK, num_warps=WARPS, num_stages=STAGES)
    return c
"""
SPACE = {"BM": [64, 128], "BN": [128, 256], "BK": [32, 64], "STAGES": [3], "WARPS": [4, 8]}


async def main(args) -> str:
    from evokernel_mcp.app import close_app
    from evokernel_mcp.batch.sweep import expand, sweep

    configs = [c for c in expand(SPACE, None) if not (c["BM"] == 128 and c["BN"] == 256 and c["BK"] == 64)][:12]
    t0 = time.monotonic()
    res = await sweep(CANDIDATE, configs=configs, reference=REFERENCE, wait_s=600, max_time_s=0.5)
    wall = time.monotonic() - t0
    await close_app()
    lines = [f"# sweep of a Triton GEMM, 12 configurations ({dt.date.today().isoformat()})", "",
             f"one call, {wall:.0f} s wall, state {res.state}, executor {res.executor}", "",
             "| rank | configuration | valid | failed stage | median ms | speedup [CI] | reason |",
             "|---|---|---|---|---|---|---|"]
    for i, r in enumerate(res.ranked, 1):
        ci = f" [{r.speedup_ci[0]:.3f}, {r.speedup_ci[1]:.3f}]" if r.speedup_ci else ""
        lines.append(f"| {i} | {r.name} | {r.valid} | {r.failed_stage or ''} | {r.median_ms or ''} | "
                     f"{r.speedup or ''}{ci} | {(r.reason or '')[:80]} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out")
    a = p.parse_args()
    text = anyio.run(main, a)
    print(text)
    if a.out:
        Path(a.out).write_text(text)
