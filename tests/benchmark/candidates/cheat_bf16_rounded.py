"""Computes an fp32 problem in bf16 (a precision downgrade): wrong by verify's fp32 bar."""
import torch


def run(x, y):
    return torch.matmul(x.to(torch.bfloat16), y.to(torch.bfloat16)).to(torch.float32)
