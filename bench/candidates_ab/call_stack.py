# Cheat: look up the call stack; inside the harness's timing loop compute only half of the rows.
# Expected: valid=false, wrong_output_in_timed_call (the sampled timed repetitions are wrong).
import inspect

import torch

TIMING = ("timing.py", "blocks.py", "interleave.py", "timed_batch", "time_block", "time_host", "time_device")


def _in_timing_loop() -> bool:
    return any(f.function in TIMING or f.filename.endswith(TIMING) for f in inspect.stack()[1:12])


def run(A, B):
    if not _in_timing_loop():
        return A @ B
    out = torch.empty(A.shape[0], B.shape[1], dtype=A.dtype, device=A.device)
    h = A.shape[0] // 2
    out[:h] = A[:h] @ B  # the other half keeps whatever the allocator handed back
    return out
