// Step 4: depthwise conv3d on the matrix units, as a banded Toeplitz GEMM per (kd, kh) tap.
// For one channel and one tap (kd, kh), a block of 8 outputs along W is
//     y[r, w0 + n] += sum_k X[r, k] * T[k, n],   X[r, k] = x[row r shifted by (kd, kh-2), w0 - 2 + k],
//     T[k, n] = wt[kd, kh, k - n] when 0 <= k - n < 5, else 0           (k = 0..15, n = 0..7)
// so one mma.sync m16n8k16 (bf16 in, fp32 accumulate) computes 16 output rows x 8 columns of one tap;
// the 15 taps of a 3x5x5 filter are 15 MMAs. Only 5 of each T column's 16 entries are non-zero:
// 40 useful MACs of 128 (31 %). Rows r run over the flattened (d_out, h) of one channel, so every row
// of the 16 is useful. T depends only on the channel: its 15 B fragments are built once, in registers.
// The A fragments come straight from global memory (L1): a lane's pairs of bf16 are 4-byte loads, and
// the right half of one W block's fragment (k = 8..15) is the left half of the next (k = 0..7), so
// walking along W needs half the loads.
// NVIDIA (sm_80+): mma.sync.m16n8k16.bf16. AMD (gfx90a/gfx942/gfx950): v_mfma_f32_16x16x16bf16_1k,
// whose N is 16, so a W block is 12 outputs (20 useful input columns do not fit k = 16): 60 useful
// MACs of 256 (23 %).
#if defined(__HIP__) || defined(__HIPCC__)
#include <hip/hip_runtime.h>
#else
#include <cuda_runtime.h>
#endif
#include <stdint.h>

#define WARPS 4

__device__ __forceinline__ uint32_t ld_pair(const uint16_t* p, bool ok) {
  return ok ? __ldg(reinterpret_cast<const uint32_t*>(p)) : 0u;
}

#if !defined(__HIP_PLATFORM_AMD__)
// ---------------------------------------------------------------- NVIDIA: mma.sync m16n8k16
__device__ __forceinline__ uint32_t tap_pair(const uint16_t* wq, int k, int n) {
  // bf16 pair (T[k][n], T[k+1][n]) of the Toeplitz band, lower k in the low half
  int i0 = k - n, i1 = k + 1 - n;
  uint32_t lo = (i0 >= 0 && i0 < 5) ? wq[i0] : 0u, hi = (i1 >= 0 && i1 < 5) ? wq[i1] : 0u;
  return lo | (hi << 16);
}

// min 3 blocks per SM caps registers at 170 (from 180): 12 warps/SM instead of 8, 0.767 -> 0.625 ms on the H200
extern "C" __global__ void __launch_bounds__(WARPS * 32, 3)
conv3d_dw_tensor_core(const uint16_t* __restrict__ x, const uint16_t* __restrict__ wt, uint16_t* __restrict__ y,
                      int D, int H, int W) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int c = blockIdx.y, Dout = D - 2, rows = Dout * H;
  const int r0 = (blockIdx.x * WARPS + warp) * 16;
  if (r0 >= rows) return;

  // B fragments: b[q][0] = T[2t..2t+1][g], b[q][1] = T[2t+8..2t+9][g] for the 15 taps q = kd*5 + kh
  uint32_t b[15][2];
#pragma unroll
  for (int q = 0; q < 15; ++q) {
    const uint16_t* wq = wt + c * 75 + q * 5;
    b[q][0] = tap_pair(wq, 2 * t, g);
    b[q][1] = tap_pair(wq, 2 * t + 8, g);
  }
  // this lane's two A rows (g and g+8) as (d, h)
  const int ra = r0 + g, rb = r0 + g + 8;
  const bool va = ra < rows, vb = rb < rows;
  const int da = va ? ra / H : 0, ha = va ? ra % H : 0, db = vb ? rb / H : 0, hb = vb ? rb % H : 0;
  const size_t plane = (size_t)H * W;
  const uint16_t* xa = x + ((size_t)c * D + da) * plane;
  const uint16_t* xb = x + ((size_t)c * D + db) * plane;

  // A pairs of the current W block: lo = columns w0-2+2t (+1), hi = columns w0+6+2t (+1)
  uint32_t lo_a[15], lo_b[15];
#pragma unroll
  for (int q = 0; q < 15; ++q) {
    const int kd = q / 5, kh = q % 5;
    const int iha = ha + kh - 2, ihb = hb + kh - 2;
    const int col = -2 + 2 * t;
    lo_a[q] = ld_pair(xa + kd * plane + (size_t)(iha < 0 ? 0 : iha) * W + col, va && iha >= 0 && iha < H && col >= 0);
    lo_b[q] = ld_pair(xb + kd * plane + (size_t)(ihb < 0 ? 0 : ihb) * W + col, vb && ihb >= 0 && ihb < H && col >= 0);
  }
  for (int w0 = 0; w0 < W; w0 += 8) {
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    const int col = w0 + 6 + 2 * t;
    const bool cok = col < W;
#pragma unroll
    for (int q = 0; q < 15; ++q) {
      const int kd = q / 5, kh = q % 5;
      const int iha = ha + kh - 2, ihb = hb + kh - 2;
      uint32_t hi_a = ld_pair(xa + kd * plane + (size_t)(iha < 0 ? 0 : iha) * W + col, cok && va && iha >= 0 && iha < H);
      uint32_t hi_b = ld_pair(xb + kd * plane + (size_t)(ihb < 0 ? 0 : ihb) * W + col, cok && vb && ihb >= 0 && ihb < H);
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};\n"
          : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
          : "r"(lo_a[q]), "r"(lo_b[q]), "r"(hi_a), "r"(hi_b), "r"(b[q][0]), "r"(b[q][1]));
      lo_a[q] = hi_a;   // the next W block's left half
      lo_b[q] = hi_b;
    }
    // C fragment: (row g, cols 2t, 2t+1) and (row g+8, same cols)
    auto pack = [](float lo, float hi) {
      uint32_t a = __float_as_uint(lo), bb = __float_as_uint(hi);
      a += 0x7fffu + ((a >> 16) & 1u);
      bb += 0x7fffu + ((bb >> 16) & 1u);
      return (a >> 16) | (bb & 0xffff0000u);
    };
    if (va) *reinterpret_cast<uint32_t*>(y + (((size_t)c * Dout + da) * H + ha) * W + w0 + 2 * t) = pack(acc[0], acc[1]);
    if (vb) *reinterpret_cast<uint32_t*>(y + (((size_t)c * Dout + db) * H + hb) * W + w0 + 2 * t) = pack(acc[2], acc[3]);
  }
}

#else
// ---------------------------------------------------------------- AMD: v_mfma_f32_16x16x16bf16_1k (wave64)
typedef short bf16x4_t __attribute__((ext_vector_type(4)));
typedef float f32x4_t __attribute__((ext_vector_type(4)));
#define NB 12   // useful outputs per W block (k = 16 input columns cover 12 + 4)

extern "C" __global__ void __launch_bounds__(WARPS * 64)
conv3d_dw_tensor_core(const uint16_t* __restrict__ x, const uint16_t* __restrict__ wt, uint16_t* __restrict__ y,
                      int D, int H, int W) {
  const int lane = threadIdx.x & 63, wave = threadIdx.x >> 6;
  const int m = lane & 15, kq = lane >> 4;          // A: row m, k = 4kq..4kq+3; B: col m, same k
  const int c = blockIdx.y, Dout = D - 2, rows = Dout * H;
  const int r0 = (blockIdx.x * WARPS + wave) * 16;
  if (r0 >= rows) return;
  bf16x4_t b[15];
#pragma unroll
  for (int q = 0; q < 15; ++q)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      int tap = 4 * kq + i - m;
      b[q][i] = (m < NB && tap >= 0 && tap < 5) ? (short)wt[c * 75 + q * 5 + tap] : (short)0;
    }
  const int ra = r0 + m;
  const bool va = ra < rows;
  const int da = va ? ra / H : 0, ha = va ? ra % H : 0;
  const size_t plane = (size_t)H * W;
  const uint16_t* xa = x + ((size_t)c * D + da) * plane;
  for (int w0 = 0; w0 < W; w0 += NB) {
    f32x4_t acc = {0.f, 0.f, 0.f, 0.f};
    const int col = w0 - 2 + 4 * kq;
#pragma unroll
    for (int q = 0; q < 15; ++q) {
      const int kd = q / 5, kh = q % 5, ih = ha + kh - 2;
      const bool ok = va && ih >= 0 && ih < H;
      const uint16_t* p = xa + kd * plane + (size_t)(ih < 0 ? 0 : ih) * W + col;
      uint32_t p0 = ld_pair(p, ok && col >= 0 && col < W), p1 = ld_pair(p + 2, ok && col + 2 >= 0 && col + 2 < W);
      bf16x4_t a = {(short)(p0 & 0xffff), (short)(p0 >> 16), (short)(p1 & 0xffff), (short)(p1 >> 16)};
      acc = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a, b[q], acc, 0, 0, 0);
    }
    // D: lane holds column n = m, rows 4kq..4kq+3
    const int w = w0 + m;
    if (m < NB && w < W) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        int r = r0 + 4 * kq + i;
        if (r < rows) {
          uint32_t u = __float_as_uint(acc[i]);
          u += 0x7fffu + ((u >> 16) & 1u);
          y[(((size_t)c * Dout + r / H) * H + r % H) * W + w] = (uint16_t)(u >> 16);
        }
      }
    }
  }
}
#endif
