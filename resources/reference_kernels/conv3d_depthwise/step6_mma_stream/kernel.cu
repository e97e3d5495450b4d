// Step 6: depthwise conv3d (3x5x5, padding (0,2,2)) on the matrix units with register reuse: step 5's
// rolling row window, but every row update is an MMA instead of 600 FMAs.
// Roles swapped against step 4: the Toeplitz band of the filter is the A operand (fixed per channel, in
// registers) and the input is B, whose N columns are the W segments of ONE input row:
//     y[oh, SEG*n + m] += sum_k A_{kd,kh}[m, k] * B[k, n],   B[k, n] = x[plane d+kd, row ih, SEG*n - 2 + k],
//     A_{kd,kh}[m, k] = wt[kd, kh, k - m] when m < SEG and 0 <= k - m < 5, else 0,   oh = ih + 2 - kh.
// So one B fragment (one input row, loaded once: two 4-byte loads per lane) feeds the 5 MMAs of its 5 kh
// taps, each into the accumulator tile of a different output row: a rolling window of 5 C tiles whose
// slot is (row mod 5), a compile-time index because the row loop is unrolled by 5 (as in step 5).
// A warp owns one channel, NP consecutive output planes and one W tile, and streams down a chunk of H:
// per input row it loads NP + 2 B fragments and issues 15 * NP MMAs. fp32 accumulation in the MMA.
// NVIDIA (sm_80+): mma.sync m16n8k16 bf16, SEG = 10 outputs per segment (k = 16 covers 10 + 4 inputs),
// 8 segments = 80 columns per W tile; 400 useful MACs of 2048 (20 %), but the tensor pipe has ~15x the
// FP32 FMA rate, so the 75 MACs per output cost ~15 MMA issues per 80 outputs instead of 75 FFMA per
// output / 32 lanes. AMD (gfx90a/gfx942/gfx950, wave64): v_mfma_f32_16x16x16bf16_1k, SEG = 12, 16
// segments = 192 columns per W tile (compiled, not run). NVIDIA stages input rows in shared memory with
// cp.async, 4 rows ahead (a 5-row ring per warp); AMD loads B straight from global memory.
#if defined(__HIP__) || defined(__HIPCC__)
#include <hip/hip_runtime.h>
#else
#include <cuda_runtime.h>
#endif
#include <stdint.h>

#define WARPS 4   // warps per block: consecutive plane groups of one channel (they share input rows in L1)
#define NP 1      // output planes per warp
#define MINB 4    // __launch_bounds__ min blocks per SM: caps registers at 128 (from 143), 16 warps/SM
#define IPW 6     // work items (plane group x W tile x H chunk) per warp, looped: the A fragments are built once
#define RING 5    // NVIDIA: input rows staged in shared memory per warp (4 in flight ahead of the one in use)
#define CH 12     // NVIDIA: 16-byte chunks staged per input row and plane: tile columns wt0 - 8 .. wt0 + 87

__device__ __forceinline__ uint32_t ld_pair(const uint16_t* p, bool ok) {
  return ok ? __ldg(reinterpret_cast<const uint32_t*>(p)) : 0u;
}
__device__ __forceinline__ uint16_t to_bf16(float f) {   // round to nearest even
#if defined(__HIP_PLATFORM_AMD__)
  uint32_t u = __float_as_uint(f);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
#else
  uint16_t r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
  return r;
#endif
}

#if !defined(__HIP_PLATFORM_AMD__)
// ---------------------------------------------------------------- NVIDIA: mma.sync m16n8k16 (warp32)
#define LANES 32
#define SEG 10
#define NSEG 8
struct AFrag { uint32_t r[4]; };   // A (16x16 row-major): (g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)
struct BFrag { uint32_t r[2]; };   // B (16x8 col-major):  (k 2t..2t+1, n g), (k 2t+8..2t+9, n g)
struct CFrag { float r[4]; };      // C (16x8):            (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)

__device__ __forceinline__ void mma(CFrag& c, const AFrag& a, const BFrag& b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c.r[0]), "+f"(c.r[1]), "+f"(c.r[2]), "+f"(c.r[3])
      : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[0]), "r"(b.r[1]));
}

struct Lane {   // this lane's fixed coordinates
  int g, t;
  __device__ Lane(int lane) : g(lane >> 2), t(lane & 3) {}
};

// A row m holds output position pos(m) of the segment: rows 0..4 -> 0..4, rows 8..12 -> 5..9, others zero.
// (With rows 0..9 -> 0..9, the register of rows 8..15 x k 0..7 is always 0, and ptxas rematerializes a
// known-zero MMA operand with a MOV before every MMA.)
__device__ __forceinline__ int seg_pos(int m) { return m < 5 ? m : (m >= 8 && m < 13 ? m - 3 : -100); }
// A_{q}: the Toeplitz band of tap q = kd*5 + kh; element (m, k) = wt[k - pos(m)] for 0 <= k - pos(m) < 5
__device__ __forceinline__ void build_a(AFrag& a, const uint16_t* wq, const Lane& L) {
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int m = L.g + 8 * (r & 1), k = 2 * L.t + 8 * (r >> 1);
    const int i0 = k - seg_pos(m), i1 = k + 1 - seg_pos(m);
    const uint32_t lo = (i0 >= 0 && i0 < 5) ? wq[i0] : 0u;
    const uint32_t hi = (i1 >= 0 && i1 < 5) ? wq[i1] : 0u;
    a.r[r] = lo | (hi << 16);
  }
}
// B for one input row: lane (g, t) holds x[row, SEG*g - 2 + 2t (+1)] and x[row, SEG*g + 6 + 2t (+1)]
struct BAddr { int o0, o1; bool v0, v1; };
__device__ __forceinline__ BAddr b_addr(const Lane& L, int wt0, int W) {
  BAddr b;
  b.o0 = wt0 + SEG * L.g - 2 + 2 * L.t;
  b.o1 = b.o0 + 8;
  b.v0 = b.o0 >= 0 && b.o0 < W;    // W even, o0 even: the pair is all in or all out
  b.v1 = b.o1 >= 0 && b.o1 < W;
  return b;
}
// p = row start + o0 (may point before the row: then v0 is false and nothing is read there)
__device__ __forceinline__ void load_b(BFrag& b, const uint16_t* p, const BAddr& ba, bool ok) {
  b.r[0] = ld_pair(p, ok && ba.v0);
  b.r[1] = ld_pair(p + 8, ok && ba.v1);
}
// C tile of output row `row` (pointer to its W = 0): (m, n) -> w = wt0 + SEG*n + pos(m)
__device__ __forceinline__ void store_c(uint16_t* row, const CFrag& c, const Lane& L, int wt0, int W) {
  const int w0 = wt0 + SEG * 2 * L.t + L.g, w1 = w0 + SEG;
  if (L.g < 5) {
    if (w0 < W) row[w0] = to_bf16(c.r[0]);
    if (w1 < W) row[w1] = to_bf16(c.r[1]);
    if (w0 + 5 < W) row[w0 + 5] = to_bf16(c.r[2]);
    if (w1 + 5 < W) row[w1 + 5] = to_bf16(c.r[3]);
  }
}
#define CREGS 4

#else
// ---------------------------------------------------------------- AMD: v_mfma_f32_16x16x16bf16_1k (wave64)
#define LANES 64
#define SEG 12
#define NSEG 16
typedef short bf16x4_t __attribute__((ext_vector_type(4)));
typedef float f32x4_t __attribute__((ext_vector_type(4)));
struct AFrag { bf16x4_t v; };   // A 16x16: lane (m = lane%16, kq = lane/16) holds (m, 4kq..4kq+3)
struct BFrag { bf16x4_t v; };   // B 16x16: lane (n = lane%16, kq) holds (4kq..4kq+3, n)
struct CFrag { f32x4_t v; };    // C 16x16: lane (n, kq) holds (4kq..4kq+3, n)

__device__ __forceinline__ void mma(CFrag& c, const AFrag& a, const BFrag& b) {
  c.v = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a.v, b.v, c.v, 0, 0, 0);
}
struct Lane {
  int g, t;   // g = lane % 16 (A row m / B, C column n), t = lane / 16 (k or row quad)
  __device__ Lane(int lane) : g(lane & 15), t(lane >> 4) {}
};
__device__ __forceinline__ void build_a(AFrag& a, const uint16_t* wq, const Lane& L) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int m = L.g, tap = 4 * L.t + i - m;
    a.v[i] = (m < SEG && tap >= 0 && tap < 5) ? (short)wq[tap] : (short)0;
  }
}
struct BAddr { int o0, o1; bool v0, v1; };
__device__ __forceinline__ BAddr b_addr(const Lane& L, int wt0, int W) {
  BAddr b;
  b.o0 = wt0 + SEG * L.g - 2 + 4 * L.t;
  b.o1 = b.o0 + 2;
  b.v0 = b.o0 >= 0 && b.o0 < W;
  b.v1 = b.o1 >= 0 && b.o1 < W;
  return b;
}
__device__ __forceinline__ void load_b(BFrag& b, const uint16_t* p, const BAddr& ba, bool ok) {
  const uint32_t p0 = ld_pair(p, ok && ba.v0);
  const uint32_t p1 = ld_pair(p + 2, ok && ba.v1);
  b.v = bf16x4_t{(short)(p0 & 0xffff), (short)(p0 >> 16), (short)(p1 & 0xffff), (short)(p1 >> 16)};
}
__device__ __forceinline__ void store_c(uint16_t* row, const CFrag& c, const Lane& L, int wt0, int W) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int m = 4 * L.t + i, w = wt0 + SEG * L.g + m;
    if (m < SEG && w < W) row[w] = to_bf16(c.v[i]);
  }
}
#define CREGS 4
#endif

__device__ __forceinline__ void zero_c(CFrag& c) {
#if defined(__HIP_PLATFORM_AMD__)
  c.v = f32x4_t{0.f, 0.f, 0.f, 0.f};
#else
#pragma unroll
  for (int i = 0; i < CREGS; ++i) c.r[i] = 0.f;
#endif
}

// the MMAs of input row t (t = P mod 5): input plane p feeds output plane j = p - kd, row slot (P - kh) mod 5
template <int P>
__device__ __forceinline__ void row_mmas(CFrag (&acc)[NP][5], const BFrag (&b)[NP + 2], const AFrag (&a)[15]) {
#pragma unroll
  for (int p = 0; p < NP + 2; ++p)
#pragma unroll
    for (int kd = 0; kd < 3; ++kd) {
      const int j = p - kd;
      if (j < 0 || j >= NP) continue;
#pragma unroll
      for (int kh = 0; kh < 5; ++kh) mma(acc[j][(P - kh + 5) % 5], a[kd * 5 + kh], b[p]);
    }
}

#if !defined(__HIP_PLATFORM_AMD__)
// NVIDIA input pipeline: each input row of the NP + 2 planes is copied global -> shared with cp.async,
// 16 bytes a lane, RING - 1 rows ahead of its use, zero-filled outside the tensor (src-size 0); the B
// fragments are then two 4-byte shared reads. A staged row is 96 columns: 8 of left halo, the tile's 80,
// 8 of right halo. The 10 data chunks per plane are copied every row; the halo chunks only when the
// tensor has more than one W tile (else they stay the zeros written once).
#define ROWE (CH * 8)                                          // elements of one staged row
#define NDATA ((NP + 2) * (CH - 2))                            // data chunks per input row
#define NCP ((NDATA + LANES - 1) / LANES)                      // data cp.async per lane per row
#define SLOT ((NP + 2) * ROWE)                                 // elements of one ring slot

__device__ __forceinline__ void cp_async16(uint32_t saddr, const void* g, bool ok) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(saddr), "l"(g), "r"(ok ? 16 : 0));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_wait_ring() { asm volatile("cp.async.wait_group %0;\n" ::"n"(RING - 2)); }

extern "C" __global__ void __launch_bounds__(WARPS * LANES, MINB)
conv3d_dw_mma_stream(const uint16_t* __restrict__ x, const uint16_t* __restrict__ wt, uint16_t* __restrict__ y,
                     int D, int H, int W, int HC) {
  extern __shared__ uint4 smem_dyn[];
  const int lane = threadIdx.x % LANES, warp = threadIdx.x / LANES;
  const Lane L(lane);
  const int Dout = D - 2, ngrp = (Dout + NP - 1) / NP;
  const int ntw = (W + SEG * NSEG - 1) / (SEG * NSEG), nhc = (H + HC - 1) / HC;
  const int nitems = ngrp * ntw * nhc, c = blockIdx.y;
  const size_t plane = (size_t)H * W;
  uint16_t* sw = reinterpret_cast<uint16_t*>(smem_dyn) + warp * (RING * SLOT);
  const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(sw);
  // this lane's B elements in a staged row: column SEG*g - 2 + 2t of the tile is element SEG*g + 6 + 2t
  const int e0 = SEG * L.g + 6 + 2 * L.t;
  // zero the whole ring once: the halo columns stay zero when there is one W tile
  for (int i = lane; i < RING * SLOT / 8; i += LANES) reinterpret_cast<uint4*>(sw)[i] = make_uint4(0u, 0u, 0u, 0u);

  AFrag a[15];
#pragma unroll
  for (int q = 0; q < 15; ++q) build_a(a[q], wt + c * 75 + q * 5, L);

  for (int item = blockIdx.x * WARPS + warp; item < nitems; item += gridDim.x * WARPS) {
    const int d0 = (item % ngrp) * NP, tw = (item / ngrp) % ntw, hc = item / (ngrp * ntw);
    const int h0 = hc * HC, wt0 = tw * SEG * NSEG, hn = min(HC, H - h0);

    // data chunk id = lane + LANES*k -> plane p = id / 10, chunk j = 1 + id % 10 (columns wt0 - 8 + 8j ..);
    // halo chunk (ntw > 1 only) id = lane < 2 (NP + 2) -> plane lane / 2, chunk j = 0 or 11
    const uint16_t* src[NCP + 1];
    uint32_t dst[NCP + 1];
    bool cok[NCP + 1];
#pragma unroll
    for (int k = 0; k <= NCP; ++k) {
      int id, p, j;
      if (k < NCP) { id = lane + LANES * k; p = min(id / (CH - 2), NP + 1); j = 1 + id % (CH - 2); }
      else { id = lane; p = min(lane >> 1, NP + 1); j = (lane & 1) ? CH - 1 : 0; }
      const int col = wt0 - 8 + 8 * j;
      cok[k] = (k < NCP ? id < NDATA : (ntw > 1 && id < 2 * (NP + 2))) && col >= 0 && col < W;
      src[k] = x + ((size_t)c * D + min(d0 + p, D - 1)) * plane + (ptrdiff_t)(h0 - 2) * W + (cok[k] ? col : 0);
      dst[k] = sbase + 2 * (p * ROWE + 8 * j);
    }
    const bool halo = ntw > 1 && lane < 2 * (NP + 2);
    // stage input row ih = h0 - 2 + t into ring slot `slot` (the pointers src[] are at row t on entry)
    auto stage = [&](int t, int slot) {
      const int ih = h0 - 2 + t;
      const bool rok = t < hn + 4 && ih >= 0 && ih < H;
#pragma unroll
      for (int k = 0; k < NCP; ++k)
        if (k + 1 < NCP || lane + LANES * k < NDATA) cp_async16(dst[k] + slot * (2 * SLOT), src[k], rok && cok[k]);
      if (halo) cp_async16(dst[NCP] + slot * (2 * SLOT), src[NCP], rok && cok[NCP]);
      cp_commit();
#pragma unroll
      for (int k = 0; k <= NCP; ++k) src[k] += W;
    };

    CFrag acc[NP][5];
#pragma unroll
    for (int j = 0; j < NP; ++j)
#pragma unroll
      for (int s = 0; s < 5; ++s) zero_c(acc[j][s]);
    __syncwarp();   // the ring's zeroing, or the previous item's reads of it, are done before it is overwritten
#pragma unroll
    for (int r = 0; r < RING - 1; ++r) stage(r, r);
    uint16_t* yo = y + ((size_t)c * Dout + d0) * plane + (ptrdiff_t)(h0 - 4) * W;   // output row h0 + t - 4

    // input rows ih = h0 - 2 + t, t = 0 .. hn + 3; after row t, output row h0 + t - 4 is complete.
    for (int base = 0; base < hn + 4; base += 5) {
#define STEP(P)                                                                                     \
      {                                                                                             \
        const int t = base + P;                                                                     \
        if (t < hn + 4) {                                                                           \
          cp_wait_ring();   /* this lane's copies of row t are done */                              \
          __syncwarp();     /* ... and every lane's; all lanes are past their reads of row t - 1 */ \
          stage(t + RING - 1, (P + RING - 1) % RING);   /* into row t - 1's slot */                 \
          BFrag b[NP + 2];                                                                          \
          const uint16_t* rs = sw + (P % RING) * SLOT + e0;                                         \
          _Pragma("unroll") for (int p = 0; p < NP + 2; ++p) {                                      \
            b[p].r[0] = *reinterpret_cast<const uint32_t*>(rs + p * ROWE);                          \
            b[p].r[1] = *reinterpret_cast<const uint32_t*>(rs + p * ROWE + 8);                      \
          }                                                                                         \
          row_mmas<P>(acc, b, a);                                                                   \
          constexpr int done = (P + 1) % 5;                                                         \
          _Pragma("unroll") for (int j = 0; j < NP; ++j) {                                          \
            if (t >= 4 && d0 + j < Dout) store_c(yo + (size_t)j * plane, acc[j][done], L, wt0, W);  \
            zero_c(acc[j][done]);                                                                   \
          }                                                                                         \
          yo += W;                                                                                  \
        }                                                                                           \
      }
      STEP(0) STEP(1) STEP(2) STEP(3) STEP(4)
#undef STEP
    }
    asm volatile("cp.async.wait_all;\n" ::);
  }
}

#else
// AMD: the B fragments come straight from global memory, the next row's loads issued before this row's MMAs.
extern "C" __global__ void __launch_bounds__(WARPS * LANES, MINB)
conv3d_dw_mma_stream(const uint16_t* __restrict__ x, const uint16_t* __restrict__ wt, uint16_t* __restrict__ y,
                     int D, int H, int W, int HC) {
  const Lane L(threadIdx.x % LANES);
  const int warp = threadIdx.x / LANES;
  const int Dout = D - 2, ngrp = (Dout + NP - 1) / NP;
  const int ntw = (W + SEG * NSEG - 1) / (SEG * NSEG), nhc = (H + HC - 1) / HC;
  const int nitems = ngrp * ntw * nhc, c = blockIdx.y;
  const size_t plane = (size_t)H * W;

  AFrag a[15];
#pragma unroll
  for (int q = 0; q < 15; ++q) build_a(a[q], wt + c * 75 + q * 5, L);

  for (int item = blockIdx.x * WARPS + warp; item < nitems; item += gridDim.x * WARPS) {
    const int d0 = (item % ngrp) * NP, tw = (item / ngrp) % ntw, hc = item / (ngrp * ntw);
    const int h0 = hc * HC, wt0 = tw * SEG * NSEG, hn = min(HC, H - h0);
    const BAddr ba = b_addr(L, wt0, W);
    uint16_t* yb = y + ((size_t)c * Dout + d0) * plane;
    const uint16_t* xp[NP + 2];   // per input plane: this lane's pointer into row h0 - 2 (planes past D clamped)
#pragma unroll
    for (int p = 0; p < NP + 2; ++p)
      xp[p] = x + ((size_t)c * D + min(d0 + p, D - 1)) * plane + (ptrdiff_t)(h0 - 2) * W + ba.o0;

    CFrag acc[NP][5];
#pragma unroll
    for (int j = 0; j < NP; ++j)
#pragma unroll
      for (int s = 0; s < 5; ++s) zero_c(acc[j][s]);
    BFrag cur[NP + 2], nxt[NP + 2];
#pragma unroll
    for (int p = 0; p < NP + 2; ++p) load_b(cur[p], xp[p], ba, h0 - 2 >= 0);
    for (int base = 0; base < hn + 4; base += 5) {
#define STEP(P)                                                                                     \
      {                                                                                             \
        const int t = base + P;                                                                     \
        if (t < hn + 4) {                                                                           \
          const int ihn = h0 - 1 + t;                                                               \
          const bool okn = (t + 1 < hn + 4) && ihn >= 0 && ihn < H;                                 \
          _Pragma("unroll") for (int p = 0; p < NP + 2; ++p) {                                      \
            xp[p] += W;                                                                             \
            load_b(nxt[p], xp[p], ba, okn);                                                         \
          }                                                                                         \
          row_mmas<P>(acc, cur, a);                                                                 \
          const int oh = h0 + t - 4;                                                                \
          constexpr int done = (P + 1) % 5;                                                         \
          _Pragma("unroll") for (int j = 0; j < NP; ++j) {                                          \
            if (t >= 4 && d0 + j < Dout) store_c(yb + (size_t)j * plane + (size_t)oh * W, acc[j][done], L, wt0, W); \
            zero_c(acc[j][done]);                                                                   \
          }                                                                                         \
          _Pragma("unroll") for (int p = 0; p < NP + 2; ++p) cur[p] = nxt[p];                       \
        }                                                                                           \
      }
      STEP(0) STEP(1) STEP(2) STEP(3) STEP(4)
#undef STEP
    }
  }
}
#endif
