# Precision downgrade of an fp32 problem: the matmul in fp16. Expected: valid=false (the fp32 bar).
def run(A, B):
    return (A.half() @ B.half()).float()
