"""step5_scheduled: candidate run(x, weight) for the conv3d_depthwise task, launching conv3d_dw_scheduled from kernel.cu.

Imported from the repo, it takes the launcher (../_cxx.py) and kernel.cu from beside it; as a server
candidate, _cxx.candidate_source() inlines both above this text.
"""
from pathlib import Path

import torch

if "build_kernel" not in globals():  # imported from the repo, not inlined
    _cxx = Path(__file__).resolve().parent.parent / "_cxx.py"
    exec(compile(_cxx.read_text(), str(_cxx), "exec"))
if "CUDA_SRC" not in globals():
    CUDA_SRC = (Path(__file__).resolve().parent / "kernel.cu").read_text()

KERNEL = "conv3d_dw_scheduled"
THREADS = 128  # must match kernel.cu


def run(x, weight):
    N, C, D, H, W = x.shape
    if N != 1 or W % 8 or W > 8 * THREADS or tuple(weight.shape) != (C, 1, 3, 5, 5) or x.dtype != torch.bfloat16:
        raise ValueError("this step handles N = 1, W % 8 == 0, W <= 1024, a [C,1,3,5,5] bf16 filter")
    x, weight = x.contiguous(), weight.contiguous()
    y = torch.empty((N, C, D - 2, H, W), dtype=x.dtype, device=x.device)
    HC = H if H <= 64 else 32  # output rows per thread: the 4 halo rows cost 4 / HC extra FMAs
    strips = W // 8
    ppb = max(1, THREADS // strips)  # output planes per block
    grid = ((H + HC - 1) // HC, (D - 2 + ppb - 1) // ppb, C)
    build_kernel(CUDA_SRC, KERNEL)(grid, (strips * ppb, 1, 1), 0, x, weight, y, D, H, W, ppb, HC)
    return y
