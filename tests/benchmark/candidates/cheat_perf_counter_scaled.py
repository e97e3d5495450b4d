"""Slows the clock the timing loop reads in this process (time.perf_counter_ns and the copy timing.py bound)."""
import time

import torch

import evokernel_mcp.benchmark.timing as _timing

_real = time.perf_counter_ns
_t0 = _real()


def _slow() -> int:
    return _t0 + int((_real() - _t0) * 0.35)


time.perf_counter_ns = _slow
_timing._perf_ns = _slow


def run(x, y):
    return torch.matmul(x, y)
