"""Reference of the attack tests: an fp32 matmul, compute-bound on the CPU path (the harness's work around each
timed call, refills and probes, is small beside it)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(512, 512), torch.randn(512, 512)]


def get_init_inputs():
    return []
