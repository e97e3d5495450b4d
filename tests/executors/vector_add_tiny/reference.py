"""Vector add (KernelBench form): out = x + y, fp32."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y


def get_inputs():
    n = 1 << 28
    return [torch.randn(n), torch.randn(n)]


def get_init_inputs():
    return []
