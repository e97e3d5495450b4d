"""RMSNorm over the last dimension in Triton: one program per row, the whole row in registers.

y = x / sqrt(mean(x^2) + eps) * w, bf16 in/out, fp32 math. The row is read once, reduced, scaled and
written once: 2 bytes read + 2 written per element (+ w, which stays in L2), the minimum traffic.
Candidate run(x, w) for the rmsnorm task.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _rmsnorm(x_ptr, w_ptr, y_ptr, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    m = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=m, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
    r = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    tl.store(y_ptr + row * N + cols, (x * r * w).to(y_ptr.dtype.element_ty), mask=m)


def run(x, w, eps=1e-6):
    if x.shape[-1] != w.shape[0]:
        raise ValueError(f"w has {w.shape[0]} entries, x's last dim is {x.shape[-1]}")
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty_like(x2)
    N = x2.shape[1]
    BLOCK = triton.next_power_of_2(N)
    num_warps = min(32, max(1, BLOCK // 512))  # 16 bytes of bf16 (8 values) per lane per pass
    _rmsnorm[(x2.shape[0],)](x2, w.contiguous(), y, N, eps, BLOCK=BLOCK, num_warps=num_warps)
    return y.reshape(x.shape)


def reference(x, w, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)
