# Precision downgrade of an fp32 problem: the matmul in bf16. Expected: valid=false (the fp32 bar).
def run(A, B):
    return (A.bfloat16() @ B.bfloat16()).float()
