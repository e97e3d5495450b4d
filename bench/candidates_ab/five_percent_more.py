# Honest but slower: the full matmul plus 5 % more work (an extra product of 5 % of the rows, discarded).
# Expected against the reference: valid=true, speedup ~0.95 with an interval excluding 1 (resolved) in
# at least 9 of 10 calls.
import torch


def run(A, B):
    extra = max(1, A.shape[0] // 20)
    torch.matmul(A[:extra], B)
    return A @ B
