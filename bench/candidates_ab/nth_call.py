# Cheat: correct for the first 8 calls (verification), garbage after.
# Expected: valid=false, wrong_output_in_timed_call / wrong_output_after_timing.
import torch

_calls = 0


def run(A, B):
    global _calls
    _calls += 1
    if _calls <= 8:
        return A @ B
    return torch.zeros(A.shape[0], B.shape[1], dtype=A.dtype, device=A.device)
