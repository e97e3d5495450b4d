"""Vector add in Triton: the reference for a memory-bound elementwise kernel.

run(x, y) -> x + y for two tensors of the same shape, dtype and device.
Works on CUDA and ROCm GPUs, and on CPU through the Triton interpreter
(set TRITON_INTERPRET=1 before importing this module).
"""

import torch
import triton
import triton.language as tl

BLOCK_SIZE = 1024  # elements per program; 16 bytes per lane for fp32 on wave64 or warp32


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def run(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Return x + y computed by the Triton kernel (same shape, dtype, device)."""
    if x.shape != y.shape or x.dtype != y.dtype or x.device != y.device:
        raise ValueError(
            f"x and y must match: shapes {tuple(x.shape)} vs {tuple(y.shape)}, "
            f"dtypes {x.dtype} vs {y.dtype}, devices {x.device} vs {y.device}"
        )
    x_c, y_c = x.contiguous(), y.contiguous()
    out = torch.empty_like(x_c)
    n = out.numel()
    if n == 0:
        return out
    grid = (triton.cdiv(n, BLOCK_SIZE),)
    _add_kernel[grid](x_c, y_c, out, n, BLOCK_SIZE=BLOCK_SIZE)
    return out


def reference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The PyTorch result that run() must match exactly."""
    return x + y
