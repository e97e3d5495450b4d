# Precision downgrade of an fp32 problem: TF32 tensor cores for the matmul. Expected: valid=false (the fp32 bar).
import torch

torch.backends.cuda.matmul.allow_tf32 = True


def run(A, B):
    return A @ B
