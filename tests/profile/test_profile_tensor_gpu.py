"""On a CUDA GPU with ncu: profile_pmc on a four-kernel candidate whose main kernels are Triton tensor-core GEMMs,
and thread_trace on one of them (the acceptance of what these tools tell an agent)."""

from __future__ import annotations

import shutil

import anyio
import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.cuda,
              pytest.mark.skipif(shutil.which("ncu") is None, reason="needs Nsight Compute (ncu)")]

REF = """import torch
class Model(torch.nn.Module):
    def forward(self, a, b):
        return torch.nn.functional.silu(a @ b) + (a.to(torch.bfloat16).float() @ b.to(torch.bfloat16).float())
def get_inputs():
    return [torch.randn(2048, 2048), torch.randn(2048, 2048)]
def get_init_inputs():
    return []
"""
CAND = """import torch, triton, triton.language as tl

@triton.jit
def zero_kernel(p, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(p + offs, tl.zeros([BLOCK], tl.float32), mask=offs < n)

@triton.jit
def gemm_kernel(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros([BM, BN], tl.float32)
    for k in range(0, K, BK):
        x = tl.load(a + rm[:, None] * K + (k + rk)[None, :])
        y = tl.load(b + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(x, y)
    tl.store(c + rm[:, None] * N + rn[None, :], acc + tl.load(c + rm[:, None] * N + rn[None, :]))

@triton.jit
def silu_kernel(x, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + offs, mask=offs < n)
    tl.store(x + offs, v * tl.sigmoid(v), mask=offs < n)

def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N, device=a.device)
    d = torch.empty(M, N, device=a.device)
    zero_kernel[(triton.cdiv(M * N, 1024),)](c, M * N, BLOCK=1024)
    zero_kernel[(triton.cdiv(M * N, 1024),)](d, M * N, BLOCK=1024)
    gemm_kernel[(M // 128, N // 128)](a, b, c, M, N, K, BM=128, BN=128, BK=32, num_warps=8, num_stages=3)
    silu_kernel[(triton.cdiv(M * N, 1024),)](c, M * N, BLOCK=1024)
    a16, b16 = a.to(torch.bfloat16), b.to(torch.bfloat16)
    gemm_kernel[(M // 128, N // 128)](a16, b16, d, M, N, K, BM=128, BN=128, BK=64, num_warps=8, num_stages=3)
    return c + d
"""


@pytest.fixture(scope="module", autouse=True)
def _close_jobs():
    yield
    from evokernel_mcp.app import close_app

    anyio.run(close_app)


def test_profile_pmc_four_kernels_tensor_pipe_and_roofline():
    from evokernel_mcp.profile import api

    res = anyio.run(lambda: api.profile_pmc(candidate=CAND, reference=REF, device="cuda:0", iters=1,
                                            max_dispatches=4, wait_s=600))
    names = {r.kernel for r in res.dispatch_table}
    assert {"zero_kernel", "gemm_kernel", "silu_kernel"} <= names and len(res.dispatch_table) == res.dispatches_total
    assert not any(k.startswith("device__attribute_") for d in res.dispatches for k in d.counters)
    gemm = res.dispatches[0]
    assert gemm.kernel == "gemm_kernel"  # the heaviest first
    assert gemm.derived["tensor_pipe_busy"].value > 5 and gemm.derived["tensor_flops"].value > 0
    assert "roofline_fraction" in gemm.derived or any("roofline does not apply" in n for n in gemm.notes)
    shown = {(d.kernel, str(d.dispatch_id)) for d in res.dispatches}
    assert res.findings and all((f.evidence["kernel"], f.evidence["dispatch"]) in shown for f in res.findings)
    assert not any("move the math onto matrix cores" in f.text for f in res.findings if "gemm" in f.text)


def test_thread_trace_triton_gemm_source_lines_and_findings():
    from evokernel_mcp.profile import api

    res = anyio.run(lambda: api.thread_trace(candidate=CAND, reference=REF, kernel_filter="gemm_kernel",
                                             device="cuda:0", wait_s=600))
    assert res.source_lines and any(h.source_line for h in res.hot_instructions), res.notes
    assert res.findings and all(f.evidence for f in res.findings)


def test_profile_pmc_stalls_preset_names_where_the_gemm_waits():
    """ncu accepts every metric of the stalls preset on this GPU, and the heaviest kernel gets the breakdown."""
    from evokernel_mcp.profile import api

    res = anyio.run(lambda: api.profile_pmc(candidate=CAND, reference=REF, device="cuda:0", iters=1, preset="stalls",
                                            max_dispatches=2, wait_s=600))
    assert not res.degraded, res.degraded_reasons
    gemm = res.dispatches[0]
    assert gemm.kernel == "gemm_kernel"
    per_issue = gemm.derived["cycles_per_issue"].value
    reasons = {k: v.value for k, v in gemm.derived.items() if k.startswith("stall_")}
    assert per_issue >= 1 and reasons and max(reasons.values()) <= per_issue
    (f,) = [f for f in res.findings if f.kind == "stall"]
    assert "stalled mostly on" in f.text and f.evidence["kernel"] == "gemm_kernel"
