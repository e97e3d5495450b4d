"""On a CUDA GPU: compile_kernel's report equals the kernel Triton's JIT launched (registers, shared memory),
for a pipelined GEMM where the launch's divisibility facts decide async copies and the stage buffers."""

from __future__ import annotations

import anyio
import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.cuda]

GEMM = '''\
import triton
import triton.language as tl


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
'''
SIG = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32", "sam": "i32",
       "sak": "i32", "sbk": "i32", "sbn": "i32", "scm": "i32", "scn": "i32"}
CONST = {"BM": 128, "BN": 128, "BK": 64}


def test_compile_report_equals_the_launched_kernel(tmp_path):
    import importlib.util
    import sys

    import torch

    from evokernel_mcp.compile.api import compile_kernel

    path = tmp_path / "gemm_mod.py"
    path.write_text(GEMM)
    spec = importlib.util.spec_from_file_location("gemm_mod", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gemm_mod"] = mod
    spec.loader.exec_module(mod)
    M = N = K = 1024
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = torch.empty(M, N, device="cuda", dtype=torch.float32)
    launched = mod.mm[(M // 128, N // 128)](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                           c.stride(0), c.stride(1), BM=128, BN=128, BK=64, num_warps=8, num_stages=3)
    torch.cuda.synchronize()
    # the launch had strides of 1 (constants) and every other int and pointer divisible by 16
    res = anyio.run(lambda: compile_kernel(GEMM, "triton", "mm", "sm_90", SIG, CONST,
                                           {"num_warps": 8, "num_stages": 3},
                                           specialize={"sak": 1, "sbn": 1, "scn": 1}))
    assert res.ok, res.diagnostics
    rep = next(k for k in res.kernels if k.name == "mm")
    assert rep.registers == launched.n_regs
    assert res.kernels and launched.metadata.shared == next(
        (v for k, v in ((kk.name, kk.dynamic_lds_bytes or kk.lds_bytes) for kk in res.kernels) if k == "mm"), None)
