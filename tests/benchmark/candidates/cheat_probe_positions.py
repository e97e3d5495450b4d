"""Finds the harness's probe position table in its own process and computes only those output elements (the
rest of its output stays zero): what a candidate that reads which repetitions' positions are checked does."""
import gc

import torch


def _table():
    from evokernel_mcp.benchmark.probes import Prober

    for o in gc.get_objects():
        if isinstance(o, Prober):
            return o.idx.reshape(-1)
    return None


def run(x, y):
    idx = _table()
    if idx is None:
        return torch.matmul(x, y)
    out = torch.zeros(x.shape[0], y.shape[1], dtype=x.dtype)
    pos = torch.unique(idx % out.numel())
    i, j = pos // out.shape[1], pos % out.shape[1]
    out.view(-1)[pos] = (x[i] * y[:, j].T).sum(1)
    return out
