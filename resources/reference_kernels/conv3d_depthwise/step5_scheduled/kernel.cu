// Step 5: depthwise conv3d (3x5x5, padding (0,2,2)), bf16 in/out, fp32 accumulate; no shared memory.
// Each thread owns one channel, one output depth plane and an 8-wide strip along W, and streams down a
// chunk of HC output rows (HC = H when H <= 64: one chunk, 4 halo rows in 49). Every input row
// (3 planes x 12 values: 8 own + 2+2 halo) is loaded once and
// used for all 5 output rows it touches, from registers: a rolling window of 5 accumulator rows
// (40 floats) whose slot is (row mod 5), a compile-time index because the row loop is unrolled by 5.
// 600 FMAs per 3 loaded rows instead of 40 FMAs per 3 shared-memory reads (step 3).
// Scheduling: the next input row's loads are issued before the current row's FMAs (a register double
// buffer), so memory latency hides under 600 FMAs; on AMD, sched_group_barrier asks the scheduler to
// interleave those loads with the FMAs instead of clustering them.
#if defined(__HIP__) || defined(__HIPCC__)
#include <hip/hip_runtime.h>
#else
#include <cuda_runtime.h>
#endif
#include <stdint.h>

#define THREADS 128

__device__ __forceinline__ float lo2f(uint32_t p) { return __uint_as_float(p << 16); }
__device__ __forceinline__ float hi2f(uint32_t p) { return __uint_as_float(p & 0xffff0000u); }
__device__ __forceinline__ float bf2f(uint16_t v) { return __uint_as_float(((uint32_t)v) << 16); }
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t a = __float_as_uint(lo), b = __float_as_uint(hi);
  a += 0x7fffu + ((a >> 16) & 1u);
  b += 0x7fffu + ((b >> 16) & 1u);
  return (a >> 16) | (b & 0xffff0000u);
}

struct Row { uint4 mid; uint32_t left, right; };   // 8 + 2 + 2 bf16 of one input row

__device__ __forceinline__ void load_row(Row& r, const uint16_t* p, bool ok, bool has_l, bool has_r) {
  if (ok) {
    r.mid = __ldg(reinterpret_cast<const uint4*>(p));
    r.left = has_l ? __ldg(reinterpret_cast<const uint32_t*>(p - 2)) : 0u;
    r.right = has_r ? __ldg(reinterpret_cast<const uint32_t*>(p + 8)) : 0u;
  } else {
    r.mid = make_uint4(0u, 0u, 0u, 0u); r.left = 0u; r.right = 0u;
  }
}

template <int P>
__device__ __forceinline__ void row_fmas(float (&acc)[5][8], const Row (&rows)[3], const float (&wr)[75]) {
#pragma unroll
  for (int kd = 0; kd < 3; ++kd) {
    const Row& r = rows[kd];
    float in[12] = {lo2f(r.left), hi2f(r.left), lo2f(r.mid.x), hi2f(r.mid.x), lo2f(r.mid.y), hi2f(r.mid.y),
                    lo2f(r.mid.z), hi2f(r.mid.z), lo2f(r.mid.w), hi2f(r.mid.w), lo2f(r.right), hi2f(r.right)};
#pragma unroll
    for (int kh = 0; kh < 5; ++kh) {
      const int slot = (P - kh + 5) % 5;     // compile time: P is a template parameter, kh unrolled
#pragma unroll
      for (int kw = 0; kw < 5; ++kw) {
        float wv = wr[(kd * 5 + kh) * 5 + kw];
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[slot][j] = fmaf(in[j + kw], wv, acc[slot][j]);
      }
    }
  }
#if defined(__HIP_PLATFORM_AMD__)
  // 6 groups of {1 VMEM read, 100 VALU}: the next row's loads spread through the FMAs.
#pragma unroll
  for (int g = 0; g < 6; ++g) {
    __builtin_amdgcn_sched_group_barrier(0x020, 1, 0);
    __builtin_amdgcn_sched_group_barrier(0x002, 100, 0);
  }
#endif
}

extern "C" __global__ void __launch_bounds__(THREADS)
conv3d_dw_scheduled(const uint16_t* __restrict__ x, const uint16_t* __restrict__ wt, uint16_t* __restrict__ y,
                    int D, int H, int W, int planes_per_block, int HC) {
  const int NS = W / 8, Dout = D - 2;
  const int s = threadIdx.x % NS, dl = threadIdx.x / NS;
  if (dl >= planes_per_block) return;
  const int d = blockIdx.y * planes_per_block + dl;
  if (d >= Dout) return;
  const int c = blockIdx.z, h0 = blockIdx.x * HC, w0 = s * 8;
  const bool has_l = w0 > 0, has_r = w0 + 8 < W;

  float wr[75];
#pragma unroll
  for (int i = 0; i < 75; ++i) wr[i] = bf2f(__ldg(wt + c * 75 + i));

  const size_t plane = (size_t)H * W;
  const uint16_t* xb = x + ((size_t)c * (Dout + 2) + d) * plane + w0;
  uint16_t* yb = y + ((size_t)c * Dout + d) * plane + w0;

  float acc[5][8];
#pragma unroll
  for (int i = 0; i < 5; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

  Row cur[3], nxt[3];
  {
    int ih = h0 - 2;
    bool ok = ih >= 0 && ih < H;
#pragma unroll
    for (int kd = 0; kd < 3; ++kd) load_row(cur[kd], xb + kd * plane + (size_t)(ok ? ih : 0) * W, ok, has_l, has_r);
  }
  // input rows ih = h0-2+t, t = 0 .. HC+3; after row t, output row h0+t-4 is complete.
  for (int base = 0; base < HC + 4; base += 5) {
#define STEP(P)                                                                                   \
    {                                                                                             \
      const int t = base + P;                                                                     \
      if (t < HC + 4) {                                                                           \
        const int ihn = h0 - 2 + t + 1;                                                           \
        const bool okn = (t + 1 < HC + 4) && ihn >= 0 && ihn < H;                                 \
        _Pragma("unroll") for (int kd = 0; kd < 3; ++kd)                                          \
          load_row(nxt[kd], xb + kd * plane + (size_t)(okn ? ihn : 0) * W, okn, has_l, has_r);                \
        row_fmas<P>(acc, cur, wr);                                                                \
        const int oh = h0 + t - 4;                                                                \
        constexpr int done = (P + 1) % 5;                                                         \
        if (t >= 4 && oh < H) {                                                                   \
          uint4 o = make_uint4(pack_bf16x2(acc[done][0], acc[done][1]),                           \
                               pack_bf16x2(acc[done][2], acc[done][3]),                           \
                               pack_bf16x2(acc[done][4], acc[done][5]),                           \
                               pack_bf16x2(acc[done][6], acc[done][7]));                          \
          *reinterpret_cast<uint4*>(yb + (size_t)oh * W) = o;                                     \
        }                                                                                         \
        _Pragma("unroll") for (int j = 0; j < 8; ++j) acc[done][j] = 0.f;                         \
        _Pragma("unroll") for (int kd = 0; kd < 3; ++kd) cur[kd] = nxt[kd];                       \
      }                                                                                           \
    }
    STEP(0) STEP(1) STEP(2) STEP(3) STEP(4)
#undef STEP
  }
}
