"""step7_mma_tiles: candidate run(x, weight) for the conv3d_depthwise task, launching conv3d_dw_mma_tiles from kernel.cu.

Imported from the repo, it takes the launcher (../_cxx.py) and kernel.cu from beside it; as a server
candidate, _cxx.candidate_source() inlines both above this text. A variant is the same source with other
#define values (bench/conv3d_step7_search.py).
"""
import re
from pathlib import Path

import torch

if "build_kernel" not in globals():  # imported from the repo, not inlined
    _cxx = Path(__file__).resolve().parent.parent / "_cxx.py"
    exec(compile(_cxx.read_text(), str(_cxx), "exec"))
if "CUDA_SRC" not in globals():
    CUDA_SRC = (Path(__file__).resolve().parent / "kernel.cu").read_text()

KERNEL = "conv3d_dw_mma_tiles"
_CFG = {}


def _config(src, hip):
    """(threads, NPB, WMAX, TILEW, shared bytes) of the C++ source, derived as kernel.cu derives them."""
    if (src, hip) not in _CFG:
        v = {k: int(re.search(rf"#define {k} (\d+)", src).group(1)) for k in ("WARPS", "NPB", "NPN", "NT", "STAGES")}
        pps = re.search(r"#define PPS (\d+)", src)
        npps = 1 if hip or not pps else int(pps.group(1))   # output tiles: one per pair of a barrier interval
        lanes, nb, nstage = (64, 16, 2) if hip else (32, 8, v["STAGES"])
        nt = (v["NT"] + 1) // 2 if hip else v["NT"]   # AMD tiles are twice as wide
        tilew = 4 * (nb // v["NPN"])
        wmax = v["WARPS"] * nt * tilew * v["NPN"] // v["NPB"]
        rowe = wmax + 16
        planee = 2 * (rowe + (32 // v["NPN"] - rowe) % 32)
        smem = 2 * (nstage * (v["NPB"] + 2) * planee + npps * v["NPB"] * (4 * (wmax + 8) + (16 if v["NPN"] == 4 else 8)))
        _CFG[(src, hip)] = (v["WARPS"] * lanes, v["NPB"], wmax, tilew, smem)
    return _CFG[(src, hip)]


def run(x, weight):
    N, C, D, H, W = x.shape
    if N != 1 or D < 3 or tuple(weight.shape) != (C, 1, 3, 5, 5) or x.dtype != torch.bfloat16:
        raise ValueError("this step handles N = 1, D >= 3, a [C,1,3,5,5] bf16 filter")
    threads, npb, wmax, tilew, smem = _config(CUDA_SRC, torch.version.hip is not None)
    if W % 8 or W % tilew or W > wmax:
        raise ValueError(f"this variant handles W % 8 == 0, W % {tilew} == 0 and W <= {wmax} (one block covers all of W)")
    if smem > 48 * 1024:
        raise ValueError(f"this variant needs {smem} bytes of shared memory (the launcher sets no opt-in above 48 KiB)")
    x, weight = x.contiguous(), weight.contiguous()
    y = torch.empty((N, C, D - 2, H, W), dtype=x.dtype, device=x.device)
    grid = ((D - 2 + npb - 1) // npb, C, 1)
    build_kernel(CUDA_SRC, KERNEL)(grid, (threads, 1, 1), smem, x, weight, y, D, H, W)
    return y
