# Forge: memoise by (data_ptr, _version) of the inputs, inside the benchmark process. Expected: valid=false
# (no device work for a cached call, or a wrong answer after a refill) or its true speedup.
import torch

_memo: dict = {}


def run(A, B):
    key = (A.data_ptr(), A._version, B.data_ptr(), B._version)
    if key not in _memo:
        if len(_memo) > 8:
            _memo.clear()
        _memo[key] = torch.matmul(A, B)
    return _memo[key]
