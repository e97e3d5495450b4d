"""step7_mma_tiles: candidate run(x, weight) for the conv3d_depthwise task, launching conv3d_dw_mma_tiles from kernel.cu.

Imported from the repo, it takes the launcher (../_cxx.py) and kernel.cu from beside it; as a server
candidate, _cxx.candidate_source() inlines both above this text. A variant is the same source with other
#define values (bench/conv3d_step7_search.py).
"""
import ctypes
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


def _tma(src, hip):
    """kernel.cu's TMA: 0 none, 1 loads and stores, 2 stores only (NVIDIA; AMD has none)."""
    m = re.search(r"#define TMA (\d+)", src)
    return 0 if hip or not m else int(m.group(1))


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
        tma = _tma(src, hip)
        if tma == 1:   # the load's box, dense, ring slots on 128 bytes
            slote = -(-2 * (v["NPB"] + 2) * 2 * (wmax + 24) // 128) * 64
        else:
            rowe = wmax + 16
            slote = (v["NPB"] + 2) * 2 * (rowe + (32 // v["NPN"] - rowe) % 32)
        threads, wch = v["WARPS"] * lanes, wmax // 8
        frs = threads // wch // 4 * 4   # the flush's rows a step, and its steps
        nfl = -(-4 * v["NPB"] // frs)
        oswz = re.search(r"#define OSWZ (\d+)", src)
        osw = (not hip and not tma and oswz and int(oswz.group(1)) and wch % 2 == 0
               and (tilew * v["WARPS"] // (v["NPB"] // v["NPN"])) % 16 == 0)   # the swizzled output tile: rows dense
        orowe = wmax if osw else wmax + 8
        if tma:   # the store's box, dense, on 128 bytes
            at, oplanee = -(-2 * nstage * slote // 128) * 64, 4 * orowe
        else:
            at, oplanee = nstage * slote, 4 * orowe + (16 if v["NPN"] == 4 else 8)
        opad = max(0, frs // 4 * nfl - v["NPB"]) if not hip and not tma else 0   # planes the flush reads past the tiles
        smem = 2 * (at + (npps * v["NPB"] + opad) * oplanee) + (8 * nstage if tma == 1 else 0)
        _CFG[(src, hip)] = (threads, v["NPB"], wmax, tilew, smem)
    return _CFG[(src, hip)]


def _tensor_map(t, box):
    """A CUtensorMap (128 bytes) of the contiguous 4-D bf16 tensor t ([C, D, H, W], W innermost) with this box
    (W, H, D, C extents): zeros where a box reaches past the tensor, writes clipped there (cuTensorMapEncodeTiled)."""
    C, D, H, W = t.shape
    lib = ctypes.CDLL("libcuda.so.1")
    u64, u32 = ctypes.c_uint64, ctypes.c_uint32
    buf = (ctypes.c_ubyte * 192)()
    off = -ctypes.addressof(buf) % 64   # the map must sit on 64 bytes
    rc = lib.cuTensorMapEncodeTiled(
        ctypes.c_void_p(ctypes.addressof(buf) + off), ctypes.c_int(1),   # CU_TENSOR_MAP_DATA_TYPE_UINT16: bf16 bits
        u32(4), ctypes.c_void_p(t.data_ptr()), (u64 * 4)(W, H, D, C), (u64 * 3)(2 * W, 2 * H * W, 2 * D * H * W),
        (u32 * 4)(*box), (u32 * 4)(1, 1, 1, 1), ctypes.c_int(0), ctypes.c_int(0),   # no interleave, no swizzle
        ctypes.c_int(2), ctypes.c_int(0))   # L2 promotion 128 B; out-of-bounds elements read as zeros
    if rc != 0:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed with driver error {rc}")
    return bytes(buf[off:off + 128])


def run(x, weight):
    N, C, D, H, W = x.shape
    if N != 1 or D < 3 or H < 2 or tuple(weight.shape) != (C, 1, 3, 5, 5) or x.dtype != torch.bfloat16:
        raise ValueError("this step handles N = 1, D >= 3, H >= 2, a [C,1,3,5,5] bf16 filter")
    threads, npb, wmax, tilew, smem = _config(CUDA_SRC, torch.version.hip is not None)
    if W % 8 or W % tilew or W > wmax:
        raise ValueError(f"this variant handles W % 8 == 0, W % {tilew} == 0 and W <= {wmax} (one block covers all of W)")
    if smem > 48 * 1024:
        raise ValueError(f"this variant needs {smem} bytes of shared memory (the launcher sets no opt-in above 48 KiB)")
    x, weight = x.contiguous(), weight.contiguous()
    y = torch.empty((N, C, D - 2, H, W), dtype=x.dtype, device=x.device)
    grid = ((D - 2 + npb - 1) // npb, C, 1)
    maps = ()
    if _tma(CUDA_SRC, torch.version.hip is not None):   # load box: NPB + 2 planes x 2 rows x WMAX + 24 columns
        maps = (_tensor_map(x[0], (wmax + 24, 2, npb + 2, 1)), _tensor_map(y[0], (wmax + 8, 4, npb, 1)))
    build_kernel(CUDA_SRC, KERNEL)(grid, (threads, 1, 1), smem, x, weight, y, D, H, W, *maps)
    return y
