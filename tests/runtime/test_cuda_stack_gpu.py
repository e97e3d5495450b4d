"""The CUDA stack limit of our processes (runtime/cuda_stack.py): set low, and a kernel that needs a deep stack
still runs right in such a process, the driver raising the limit for its launch."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# 4,096 bytes of local array a thread (ptxas: "4096 bytes stack frame"), four times the driver's default limit
# and sixteen times ours: out[g] = (k & 1023) + g, read back through the array at an index known only at run time
DEEP_PTX = r"""
.version 7.0
.target sm_70
.address_size 64
.visible .entry deep(.param .u64 out_p, .param .u32 k_p)
{
    .local .align 4 .b8 buf[4096];
    .reg .pred %p<2>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<12>;
    ld.param.u64 %rd1, [out_p];
    cvta.to.global.u64 %rd1, %rd1;
    ld.param.u32 %r1, [k_p];
    mov.u32 %r2, %tid.x;
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mad.lo.u32 %r5, %r3, %r4, %r2;
    mov.u64 %rd2, buf;
    mov.u32 %r6, 0;
FILL:
    mul.wide.u32 %rd3, %r6, 4;
    add.u64 %rd4, %rd2, %rd3;
    add.u32 %r7, %r6, %r5;
    st.local.u32 [%rd4], %r7;
    add.u32 %r6, %r6, 1;
    setp.lt.u32 %p1, %r6, 1024;
    @%p1 bra FILL;
    and.b32 %r8, %r1, 1023;
    mul.wide.u32 %rd5, %r8, 4;
    add.u64 %rd6, %rd2, %rd5;
    ld.local.u32 %r9, [%rd6];
    mul.wide.u32 %rd7, %r5, 4;
    add.u64 %rd8, %rd1, %rd7;
    st.global.u32 [%rd8], %r9;
    ret;
}
"""

SCRIPT = r"""
import ctypes, json, sys, torch
from evokernel_mcp.runtime.cuda_stack import limit_stack
set_to = limit_stack(256)
cu = ctypes.CDLL("libcuda.so.1")
def ok(r, what):
    if r != 0: raise SystemExit(f"{what}: CUresult {r}")
def stack():
    n = ctypes.c_size_t(); ok(cu.cuCtxGetLimit(ctypes.byref(n), 0), "cuCtxGetLimit"); return n.value
before = stack()
mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
ok(cu.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(sys.argv[1].encode() + b"\0")), "cuModuleLoadData")
ok(cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"deep"), "cuModuleGetFunction")
blocks, threads, k = 264, 256, 777
out = torch.full((blocks * threads,), -1, dtype=torch.int32, device="cuda")
p_out, p_k = ctypes.c_uint64(out.data_ptr()), ctypes.c_uint32(k)
params = (ctypes.c_void_p * 2)(ctypes.cast(ctypes.byref(p_out), ctypes.c_void_p),
                               ctypes.cast(ctypes.byref(p_k), ctypes.c_void_p))
cu.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 6 + [ctypes.c_uint, ctypes.c_void_p,
                                                                       ctypes.c_void_p, ctypes.c_void_p]
ok(cu.cuLaunchKernel(fn, blocks, 1, 1, threads, 1, 1, 0, None, params, None), "cuLaunchKernel")
torch.cuda.synchronize()
want = torch.arange(blocks * threads, dtype=torch.int32, device="cuda") + k
print(json.dumps({"set_to": set_to, "before": before, "after": stack(), "right": bool(torch.equal(out, want))}))
"""


@pytest.mark.gpu
def test_gpu_a_low_stack_limit_still_runs_a_kernel_with_a_deep_stack():
    """Our processes' contexts reserve 256 bytes a thread; a kernel with a 4 KiB stack frame launched there runs
    and computes right, and the driver's limit is raised for it (so no kernel depends on the default)."""
    res = subprocess.run([sys.executable, "-c", SCRIPT, DEEP_PTX], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["set_to"] == 256 and got["before"] == 256, got
    assert got["right"] is True, got
    assert got["after"] >= 4096, got


@pytest.mark.gpu
def test_gpu_the_runner_and_a_sandboxed_child_start_with_the_low_stack_limit():
    """The setting reaches the runner and a sandboxed child: each reports the limit the driver holds."""
    import anyio

    from evokernel_mcp import settings
    from evokernel_mcp.runtime import sandbox
    from evokernel_mcp.runtime.child_proc import Child
    from evokernel_mcp.runtime.pool import RunnerPool

    async def runner_info():
        pool = RunnerPool(["cuda:0"])
        try:
            return dict((await pool.ensure_runner("cuda:0")).info)
        finally:
            await pool.aclose()
    info = anyio.run(runner_info)
    assert settings.get().cuda_stack_bytes == 256
    assert info.get("cuda_stack_bytes") == 256, info
    child = Child("cuda:0", sandbox.level_candidates()[0], warm=False)
    try:
        ready = child.wait_ready(timeout_s=120)
    finally:
        child.discard()
    assert ready.get("cuda_stack_bytes") == 256, ready
