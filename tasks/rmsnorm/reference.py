"""RMSNorm over the last dimension (KernelBench form). Inputs: x [B,N] bf16, w [N] bf16."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        xf = x.float() if x.dtype in (torch.bfloat16, torch.float16) else x
        y = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (y * w.to(y.dtype)).to(x.dtype)


def get_inputs():
    return [torch.randn(4096, 8192, dtype=torch.bfloat16), (0.5 + torch.rand(8192)).to(torch.bfloat16)]


def get_init_inputs():
    return []
