// Step 3: depthwise conv3d (3x5x5, padding (0,2,2)), bf16 in/out, fp32 accumulate.
// One block = one channel, one output depth plane, a tile of TH output rows. The block stages the
// 3 input planes x (TH+4) rows x (W+4) columns it needs (halo included, zero padded, converted to
// fp32 once) in shared memory / LDS; every thread keeps the channel's 75 weights in registers and
// computes 8 consecutive outputs along W (register tiling): per (kd, kh) it reads 12 floats from
// shared memory (3 x 16-byte reads) and does 40 FMAs.
// Single source: nvcc -arch=sm_90, or hipcc / clang -x hip for gfx942 / gfx950.
#if defined(__HIP__) || defined(__HIPCC__)
#include <hip/hip_runtime.h>
#else
#include <cuda_runtime.h>
#endif
#include <stdint.h>

#define TH 16          // output rows per block
#define THREADS 128

__device__ __forceinline__ float bf2f(uint16_t v) { return __uint_as_float(((uint32_t)v) << 16); }
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  // round to nearest even (inputs here are finite)
  uint32_t a = __float_as_uint(lo), b = __float_as_uint(hi);
  a += 0x7fffu + ((a >> 16) & 1u);
  b += 0x7fffu + ((b >> 16) & 1u);
  return (a >> 16) | (b & 0xffff0000u);
}

extern "C" __global__ void __launch_bounds__(THREADS)
conv3d_dw_lds_tile(const uint16_t* __restrict__ x, const uint16_t* __restrict__ wt, uint16_t* __restrict__ y,
                   int D, int H, int W) {
  extern __shared__ float tile[];           // [3][TH+4][W+4]
  const int Dout = D - 2, WP = W + 4, RP = TH + 4;
  const int h0 = blockIdx.x * TH, d = blockIdx.y, c = blockIdx.z;
  const uint16_t* xc = x + (size_t)c * D * H * W;

  // stage the halo tile (zero padding in H and W), bf16 -> fp32 once
  for (int i = threadIdx.x; i < 3 * RP * WP; i += THREADS) {
    int col = i % WP, r = (i / WP) % RP, kd = i / (WP * RP);
    int h = h0 + r - 2, w = col - 2;
    float v = 0.f;
    if (h >= 0 && h < H && w >= 0 && w < W) v = bf2f(xc[((size_t)(d + kd) * H + h) * W + w]);
    tile[i] = v;
  }
  float wr[75];                              // the channel's weights, in registers
#pragma unroll
  for (int i = 0; i < 75; ++i) wr[i] = bf2f(wt[c * 75 + i]);
  __syncthreads();

  const int NS = W / 8;                      // 8-wide strips along W
  for (int idx = threadIdx.x; idx < TH * NS; idx += THREADS) {
    int r = idx / NS, s = idx % NS, h = h0 + r;
    if (h >= H) break;
    float acc[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[j] = 0.f;
#pragma unroll
    for (int kd = 0; kd < 3; ++kd) {
#pragma unroll
      for (int kh = 0; kh < 5; ++kh) {
        const float4* row = reinterpret_cast<const float4*>(tile + (kd * RP + r + kh) * WP + s * 8);
        float4 p0 = row[0], p1 = row[1], p2 = row[2];
        float in[12] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w, p2.x, p2.y, p2.z, p2.w};
#pragma unroll
        for (int kw = 0; kw < 5; ++kw) {
          float wv = wr[(kd * 5 + kh) * 5 + kw];
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[j] = fmaf(in[j + kw], wv, acc[j]);
        }
      }
    }
    uint4 o = make_uint4(pack_bf16x2(acc[0], acc[1]), pack_bf16x2(acc[2], acc[3]),
                         pack_bf16x2(acc[4], acc[5]), pack_bf16x2(acc[6], acc[7]));
    *reinterpret_cast<uint4*>(y + (((size_t)c * Dout + d) * H + h) * W + s * 8) = o;
  }
}
