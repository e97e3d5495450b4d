# Cheat: the matmul runs on a side stream the call never joins back; the timed window (events on the
# current stream) closes before it finishes. Expected: valid=false, device_work_outside_timed_window
# (or work_pending_at_return when the profiler is unavailable).
import torch

_side = None


def run(A, B):
    global _side
    _side = _side or torch.cuda.Stream()
    with torch.cuda.stream(_side):
        return A @ B
