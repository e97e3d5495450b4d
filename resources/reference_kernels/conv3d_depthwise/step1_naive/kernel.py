"""Step 1, naive: one Triton program per (channel, output depth plane, tile of BLOCK_H rows); every output
does 75 shifted, masked loads straight from global memory (no reuse other than what the caches catch).
Candidate run(x, weight) for the conv3d_depthwise task."""
import torch
import triton
import triton.language as tl


@triton.jit
def _conv3d_dw_naive(x_ptr, w_ptr, y_ptr, C, D, H, W, BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr):
    pid_cd, pid_h = tl.program_id(0), tl.program_id(1)
    Dout = D - 2
    c, d = pid_cd // Dout, pid_cd % Dout
    hs = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)[:, None]
    ws = tl.arange(0, BLOCK_W)[None, :]
    acc = tl.zeros((BLOCK_H, BLOCK_W), dtype=tl.float32)
    x_c = x_ptr + c.to(tl.int64) * D * H * W
    for kd in tl.static_range(3):
        for kh in tl.static_range(5):
            ih = hs + (kh - 2)
            for kw in tl.static_range(5):
                iw = ws + (kw - 2)
                m = (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
                v = tl.load(x_c + ((d + kd) * H + ih) * W + iw, mask=m, other=0.0).to(tl.float32)
                wv = tl.load(w_ptr + c * 75 + (kd * 5 + kh) * 5 + kw).to(tl.float32)
                acc += v * wv
    out = y_ptr + ((c.to(tl.int64) * Dout + d) * H + hs) * W + ws
    tl.store(out, acc.to(tl.bfloat16), mask=(hs < H) & (ws < W))


def run(x, weight):
    N, C, D, H, W = x.shape
    if N != 1 or tuple(weight.shape) != (C, 1, 3, 5, 5):
        raise ValueError("this step handles N = 1 and a [C,1,3,5,5] filter")
    x, weight = x.contiguous(), weight.contiguous()
    y = torch.empty((N, C, D - 2, H, W), dtype=x.dtype, device=x.device)
    BLOCK_H, BLOCK_W = 8, triton.next_power_of_2(W)
    _conv3d_dw_naive[(C * (D - 2), triton.cdiv(H, BLOCK_H))](x, weight, y, C, D, H, W,
                                                             BLOCK_H=BLOCK_H, BLOCK_W=BLOCK_W)
    return y
