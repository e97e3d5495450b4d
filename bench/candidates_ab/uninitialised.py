# Cheat: compute for the first calls, then return an uninitialised tensor of the right shape; the caching
# allocator hands back the block the previous (correct) output lived in, so it often reads right.
# Expected: valid=false, wrong_output_in_timed_call / wrong_output_after_timing (inputs are refilled).
import torch

_calls = 0


def run(A, B):
    global _calls
    _calls += 1
    if _calls <= 3:
        return A @ B
    return torch.empty(A.shape[0], B.shape[1], dtype=A.dtype, device=A.device)
