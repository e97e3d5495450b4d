import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv3d(cin, cout, 3)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(1, 4, 6, 10, 10)]


def get_init_inputs():
    return [4, 8]
