"""Row softmax (KernelBench form). Input: x [B,N] fp32."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [2.0 * torch.randn(4096, 8192)]


def get_init_inputs():
    return []
