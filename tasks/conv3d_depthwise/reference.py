"""3D depthwise convolution (KernelBench form). Inputs: x [N,C,D,H,W] bf16, weight [C,1,3,5,5] bf16."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return F.conv3d(x, weight, bias=None, stride=1, padding=(0, 2, 2), groups=x.shape[1])


def get_inputs():
    x = torch.randn(1, 512, 61, 45, 80, dtype=torch.bfloat16)
    weight = (0.2 * torch.randn(512, 1, 3, 5, 5)).to(torch.bfloat16)
    return [x, weight]


def get_init_inputs():
    return []
