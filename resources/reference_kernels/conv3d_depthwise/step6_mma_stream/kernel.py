"""step6_mma_stream: candidate run(x, weight) for the conv3d_depthwise task, launching conv3d_dw_mma_stream from kernel.cu.

Imported from the repo, it takes the launcher (../_cxx.py) and kernel.cu from beside it; as a server
candidate, _cxx.candidate_source() inlines both above this text.
"""
import re
from pathlib import Path

import torch

if "build_kernel" not in globals():  # imported from the repo, not inlined
    _cxx = Path(__file__).resolve().parent.parent / "_cxx.py"
    exec(compile(_cxx.read_text(), str(_cxx), "exec"))
if "CUDA_SRC" not in globals():
    CUDA_SRC = (Path(__file__).resolve().parent / "kernel.cu").read_text()

KERNEL = "conv3d_dw_mma_stream"
_CFG = {}


def _config(src):
    """WARPS, NP, IPW, RING, CH as #defined in the C++ source (warps per block, output planes per warp,
    work items per warp, staged rows per warp, 16-byte chunks per staged row)."""
    if src not in _CFG:
        _CFG[src] = tuple(int(re.search(rf"#define {k} (\d+)", src).group(1)) for k in ("WARPS", "NP", "IPW", "RING", "CH"))
    return _CFG[src]


def run(x, weight):
    N, C, D, H, W = x.shape
    if N != 1 or W % 2 or D < 3 or tuple(weight.shape) != (C, 1, 3, 5, 5) or x.dtype != torch.bfloat16:
        raise ValueError("this step handles N = 1, even W, D >= 3, a [C,1,3,5,5] bf16 filter")
    x, weight = x.contiguous(), weight.contiguous()
    y = torch.empty((N, C, D - 2, H, W), dtype=x.dtype, device=x.device)
    warps, planes, ipw, ring, ch = _config(CUDA_SRC)
    lanes, tile_w = (64, 192) if torch.version.hip else (32, 80)  # SEG * NSEG of kernel.cu
    HC = H if H <= 64 else 32  # output rows per warp: the 4 halo rows cost 4 / HC extra MMAs
    items = (D - 2 + planes - 1) // planes * ((W + tile_w - 1) // tile_w) * ((H + HC - 1) // HC)
    grid = ((items + warps * ipw - 1) // (warps * ipw), C, 1)
    smem = 0 if torch.version.hip else warps * ring * (planes + 2) * ch * 8 * 2  # the cp.async ring (NVIDIA)
    if not torch.version.hip and W % 8:
        raise ValueError("this step handles W % 8 == 0 on NVIDIA (16-byte row chunks)")
    build_kernel(CUDA_SRC, KERNEL)(grid, (warps * lanes, 1, 1), smem, x, weight, y, D, H, W, HC)
    return y
