# Honest but slower: the full matmul plus 2 % more work (an extra product of 2 % of the rows, discarded).
# Expected against the reference (fp32, >= 1 ms): valid=true, resolved as slower in at least 8 of 10 calls.
import torch


def run(A, B):
    extra = max(1, A.shape[0] // 50)
    torch.matmul(A[:extra], B)
    return A @ B
