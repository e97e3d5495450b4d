# Cheat: return an output at once and let a background thread fill it after the call returned.
# Expected: valid=false, work_pending_at_return.
import threading

import torch


def run(A, B):
    out = torch.empty(A.shape[0], B.shape[1], dtype=A.dtype, device=A.device)

    def finish():
        if A.is_cuda:
            with torch.cuda.stream(torch.cuda.Stream(device=A.device)):
                torch.matmul(A, B, out=out)
        else:
            torch.matmul(A, B, out=out)

    threading.Thread(target=finish, daemon=True).start()
    return out
