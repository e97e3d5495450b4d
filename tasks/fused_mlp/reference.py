"""MLP block (KernelBench form): y = gelu_tanh(x @ w1 + b1) @ w2, bf16."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, w1, b1, w2):
        return F.gelu(x @ w1 + b1, approximate="tanh") @ w2


def get_inputs():
    M, K, H = 4096, 2048, 8192
    return [torch.randn(M, K, dtype=torch.bfloat16), (torch.randn(K, H) * K ** -0.5).to(torch.bfloat16),
            (0.1 * torch.randn(H)).to(torch.bfloat16), (torch.randn(H, K) * H ** -0.5).to(torch.bfloat16)]


def get_init_inputs():
    return []
