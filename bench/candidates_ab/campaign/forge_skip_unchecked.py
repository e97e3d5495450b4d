# Forge: read the timing loop's position off the stack (timed_batch's i and n) and compute a quarter of the
# rows on every repetition but a block's last (the one offered to the sampler); full work outside the loop.
# Expected: valid=false (a checked repetition is wrong) or its true speedup.
import sys

import torch


def _skip() -> bool:
    f = sys._getframe(1)
    while f is not None:
        if f.f_code.co_name == "timed_batch":
            i, n = f.f_locals.get("i"), f.f_locals.get("n")
            return isinstance(i, int) and isinstance(n, int) and i < n - 1
        f = f.f_back
    return False


def run(A, B):
    if not _skip():
        return A @ B
    out = torch.empty(A.shape[0], B.shape[1], dtype=A.dtype, device=A.device)
    q = A.shape[0] // 4
    out[:q] = A[:q] @ B
    return out
