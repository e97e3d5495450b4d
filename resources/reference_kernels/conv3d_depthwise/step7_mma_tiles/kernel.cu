// Step 7: depthwise conv3d (3x5x5, padding (0,2,2)) on the matrix units with 2-D output tiles, the input
// moved once through a shared-memory pipeline.
// One MMA tile is 16 outputs x 16 inputs x NB columns:
//   M = a 4 x 4 output patch (4 rows r x 4 columns s), m -> r = (m >> 1) & 3, s = (m & 1) + 2 (m >> 3);
//   K = 2 input rows (e) x 8 input columns (c), k = 8e + c;
//   N = NB independent patches: NPN output planes x SPN column segments of 4 (NB = 8 NVIDIA, 16 AMD).
//   A_{kd,j}[m, k] = wt[kd, kh = 2j + e - r, kw = c - s] when both are in range, else 0,
// where input row pair j = 0..3 of an output block of rows oh0..oh0+3 is rows oh0 - 2 + 2j + e. So one
// output block needs 4 pairs x 3 planes = 12 MMAs; the 4 A of one plane hold the patch's 16 x 25 taps in
// 4 x 256 products (39 %, against 50 / 256 = 20 % for step 6's one-row Toeplitz band), and every input row pair feeds two
// output blocks (the one it starts and the one it ends): half of step 6's MMAs for the same outputs.
// The 12 A matrices (fixed per channel) live in registers; B comes from shared memory.
// A block owns one channel, NPB consecutive output planes and all of W (W <= WMAX) and streams down H in
// row pairs: per pair it stages NPB + 2 planes x 2 rows x W (16-byte chunks) into a STAGES-deep ring
// (NVIDIA: cp.async.cg, zero-filled outside the tensor; AMD: 16-byte global loads into registers one pair
// ahead, written to LDS after the pair's MMAs), one __syncthreads per pair (NVIDIA: or per 2 pairs, PPS 2, with
// two output tiles so that one block's flush and the next block's fill can share a barrier interval). Each warp owns NT (plane group,
// column tile) pairs and keeps two accumulator tiles for each: the block this pair starts and the one it
// completes. A completed block goes through a shared-memory output tile (NVIDIA: swizzled, column ^ 4 x row, so that
// its writes and the 16-byte reads back out are conflict-free) and leaves as 16-byte stores.
// The m permutation puts rows r = 0..3 in both halves of M, so that no A register is identically zero
// (ptxas otherwise rematerializes a known-zero MMA operand with a MOV before every MMA).
#if defined(__HIP__) || defined(__HIPCC__)
#include <hip/hip_runtime.h>
#else
#include <cuda_runtime.h>
#endif
#include <stdint.h>

#define WARPS 4    // warps per block
#define NPB 8      // output planes per block (NPN divides it)
#define NPN 8      // output planes in one MMA's N (the rest of N is SPN = NB / NPN column segments of 4)
#define NT 5       // NVIDIA (plane group, column tile) tiles per warp (AMD: (NT + 1) / 2, tiles twice as wide)
#define STAGES 8   // NVIDIA: input row pairs in the shared ring (STAGES - 1 in flight); AMD uses 2
#define MINB 4     // NVIDIA __launch_bounds__ min blocks per SM (4 x 128 threads: <= 128 registers, 16 warps/SM)
#define MINB_AMD 3 // AMD's (3 x 256 lanes a CU: 4 waves a SIMD at MINB 4 would cap VGPR + AGPR at 128)
#define PPS 2      // NVIDIA: input row pairs per barrier (1, or 2 with STAGES >= 4 and a second output tile)
#define TMA 0      // NVIDIA: the Hopper tensor-memory accelerator (one instruction of one thread; zero fill and edge
                   // clipping in hardware) moves 1 = the input pairs in and the output tiles out, 2 = only the
                   // output tiles out (the pairs by cp.async), 0 = neither
#define OSWZ 1     // NVIDIA, cp.async stores: a swizzled output tile (column ^ 4 x row), conflict-free for the
                   // C-fragment writes and the flush's 16-byte reads (0: rows padded to WMAX + 8, both up to 2-way)

#if !defined(__HIP_PLATFORM_AMD__)
#define LANES 32
#define LB_MINB MINB
#define NB 8
#define NSTAGE STAGES
#define NTW NT
#define NPPS PPS
#define TMA_LD (TMA == 1)
#define TMA_ST (TMA >= 1)
#define OSWZ_ON OSWZ
#else
#define LANES 64
#define LB_MINB MINB_AMD
#define NB 16
#define NSTAGE 2
#define NTW ((NT + 1) / 2)
#define NPPS 1
#define TMA_LD 0
#define TMA_ST 0
#define OSWZ_ON 0
#endif
#define SPN (NB / NPN)
#define THREADS (WARPS * LANES)
#define TILEW (4 * SPN)                                   // output columns of one tile
#define WMAX (WARPS * NTW * TILEW * NPN / NPB)            // widest W one block covers
#define WCH (WMAX / 8)                                     // 16-byte chunks of a row at W = WMAX
#define NCHUNK ((NPB + 2) * 2 * WCH)                      // 16-byte chunks of one staged pair
#define CPT ((NCHUNK + THREADS - 1) / THREADS)            // 16-byte copies per thread per pair
#define NOUT (NPB * 4 * WCH)                              // 16-byte chunks of the output tile
#define NPG (NPB / NPN)                                   // plane groups of a block
#define OQ (TILEW * WARPS / NPG)                          // output columns from one of a warp's tiles to the next
// The flush: thread t < FTHR takes 16-byte chunk t % WCH of the output rows (plane, row) t / WCH + FRS k, k < NFL
#define FRS ((THREADS / WCH) / 4 * 4)
#define FTHR (FRS * WCH)
#define NFL ((NPB * 4 + FRS - 1) / FRS)
// The swizzled output tile: element column c of row r at c ^ 4r (the 8-byte half of the 16-byte chunk flips with r's
// bit 0, the chunk with bit 1): needs an even number of chunks a row and tiles OQ apart a multiple of 16 columns
#define OSW (OSWZ_ON && !TMA_ST && WCH % 2 == 0 && OQ % 16 == 0)

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
__device__ __forceinline__ uint32_t to_bf16x2(float lo, float hi) {   // lo in the low half (the lower address)
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
#endif
// output patch coordinates of A/C row m
__device__ __forceinline__ int m_row(int m) { return (m >> 1) & 3; }
// (rows m and m + 8 are columns 2s and 2s + 1 of one row: NVIDIA's C registers (g, n) and (g + 8, n) leave as one
// 4-byte store)
__device__ __forceinline__ int m_col(int m) { return 2 * (m & 1) + (m >> 3); }
// The A operands are built from a table of bf16 pairs in shared memory, one 4-byte read per A register:
// tab[kd][kh + 3][kw + 3] = (wt[kd, kh, kw], wt[kd, kh, kw + 1]), zero outside the filter, kh and kw in -3..7
// (the range of 2j + e - r and c - s). Reading the taps straight from global memory kept all 96 loads and
// their 64-bit addresses live at once (the kernel's register peak).
#define TABN (3 * 11 * 11)
__device__ __forceinline__ uint32_t tab_entry(const uint16_t* wq, int i) {   // i < TABN
  const int kd = i / 121, kh = (i / 11) % 11 - 3, kw = i % 11 - 3;
  const bool row = kh >= 0 && kh < 5;
  const uint32_t lo = (row && kw >= 0 && kw < 5) ? wq[kd * 25 + kh * 5 + kw] : 0u;
  const uint32_t hi = (row && kw + 1 >= 0 && kw + 1 < 5) ? wq[kd * 25 + kh * 5 + kw + 1] : 0u;
  return lo | (hi << 16);
}
// the table entry of A_{kd,j}[m, k .. k + 1] (k even)
__device__ __forceinline__ int tab_index(int kd, int j, int m, int k) {
  return kd * 121 + (2 * j + (k >> 3) - m_row(m) + 3) * 11 + ((k & 7) - m_col(m) + 3);
}

#if !defined(__HIP_PLATFORM_AMD__)
// ---------------------------------------------------------------- NVIDIA: mma.sync m16n8k16 (warp32)
struct AFrag { uint32_t r[4]; };   // A (16x16 row-major): (g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)
struct BFrag { uint32_t r[2]; };   // B (16x8 col-major):  (k 2t..2t+1, n g), (k 2t+8..2t+9, n g)
struct CFrag { float r[4]; };      // C (16x8):            (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)

__device__ __forceinline__ void mma(CFrag& c, const AFrag& a, const BFrag& b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c.r[0]), "+f"(c.r[1]), "+f"(c.r[2]), "+f"(c.r[3])
      : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[0]), "r"(b.r[1]));
}
// the first MMA of a block: c = a b (no zeroing of the accumulators beforehand)
__device__ __forceinline__ void mma0(CFrag& c, const AFrag& a, const BFrag& b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
      : "=f"(c.r[0]), "=f"(c.r[1]), "=f"(c.r[2]), "=f"(c.r[3])
      : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[0]), "r"(b.r[1]), "f"(0.f));
}
__device__ __forceinline__ void build_a(AFrag& a, const uint32_t* tab, int kd, int j, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int q = 0; q < 4; ++q) a.r[q] = tab[tab_index(kd, j, g + 8 * (q & 1), 2 * t + 8 * (q >> 1))];
}
// this lane's B column n and the first k of its first pair (the staged element offset adds the rest)
__device__ __forceinline__ int b_col(int lane) { return lane >> 2; }
__device__ __forceinline__ int b_k0(int lane) { return 2 * (lane & 3); }
__device__ __forceinline__ int b_e(int lane) { (void)lane; return 0; }
// B of one input plane: p = the staged element of (row e = 0, column c = k0) of this lane's segment
__device__ __forceinline__ void load_b(BFrag& b, const uint16_t* p, int rowE) {
  b.r[0] = *reinterpret_cast<const uint32_t*>(p);          // k = 2t, 2t+1:      e = 0, c = 2t, 2t+1
  b.r[1] = *reinterpret_cast<const uint32_t*>(p + rowE);   // k = 2t+8, 2t+9:    e = 1, same columns
}
#define CN 4
__device__ __forceinline__ int c_m(int lane, int i) { return (lane >> 2) + 8 * (i >> 1); }
__device__ __forceinline__ int c_n(int lane, int i) { return 2 * (lane & 3) + (i & 1); }
__device__ __forceinline__ float c_get(const CFrag& c, int i) { return c.r[i]; }
__device__ __forceinline__ void zero_c(CFrag& c) {
#pragma unroll
  for (int i = 0; i < 4; ++i) c.r[i] = 0.f;
}

__device__ __forceinline__ void cp_async16(uint32_t saddr, const void* g, bool ok) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(saddr), "l"(g), "r"(ok ? 16 : 0));
}
// 16 bytes to global where ok (a predicated store, no branch)
__device__ __forceinline__ void st16_if(void* g, uint4 v, bool ok) {
  asm volatile("{\n .reg .pred q;\n setp.ne.b32 q, %5, 0;\n @q st.global.v4.b32 [%0], {%1, %2, %3, %4};\n}\n"
               ::"l"(g), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"((int)ok) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// before a barrier interval: this thread's copies of the interval's NPPS pairs have landed
__device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(NSTAGE - 2 * NPPS)); }
#if TMA_ST
#define TMA_READ_DONE tma_store_read_done
// ---------------------------------------------------------------- NVIDIA sm_90: tensor-memory accelerator
struct alignas(64) TmaDesc { unsigned long long v[16]; };   // a CUtensorMap (cuTensorMapEncodeTiled on the host)
__device__ __forceinline__ void mbar_init(uint32_t bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(bar) : "memory");
}
// the pair's bytes will arrive on this barrier (the thread that issues the copy arrives once)
__device__ __forceinline__ void mbar_expect(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile("{\n .reg .pred p;\n WAIT_%=:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra WAIT_%=;\n}\n"
               ::"r"(bar), "r"(parity) : "memory");
}
__device__ __forceinline__ void tma_load(uint32_t dst, const TmaDesc* map, uint32_t bar, int x, int y, int z, int w) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];\n"
               ::"r"(dst), "l"(map), "r"(bar), "r"(x), "r"(y), "r"(z), "r"(w) : "memory");
}
__device__ __forceinline__ void tma_store(const TmaDesc* map, uint32_t src, int x, int y, int z, int w) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n"
               ::"l"(map), "r"(src), "r"(x), "r"(y), "r"(z), "r"(w) : "memory");
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// this thread's shared-memory writes become visible to the copy engine (before the barrier that precedes the store)
__device__ __forceinline__ void tma_fence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void tma_store_read_done() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
__device__ __forceinline__ void tma_store_done() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
#endif

#else
// ---------------------------------------------------------------- AMD: v_mfma_f32_16x16x16bf16_1k (wave64)
typedef short bf16x4_t __attribute__((ext_vector_type(4)));
typedef float f32x4_t __attribute__((ext_vector_type(4)));
struct AFrag { bf16x4_t v; };   // A 16x16: lane (m = lane%16, kq = lane/16) holds (m, 4kq..4kq+3)
struct BFrag { bf16x4_t v; };   // B 16x16: lane (n = lane%16, kq) holds (4kq..4kq+3, n)
struct CFrag { f32x4_t v; };    // C 16x16: lane (n, kq) holds (4kq..4kq+3, n)

__device__ __forceinline__ void mma(CFrag& c, const AFrag& a, const BFrag& b) {
  c.v = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a.v, b.v, c.v, 0, 0, 0);
}
__device__ __forceinline__ void mma0(CFrag& c, const AFrag& a, const BFrag& b) {
  c.v = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a.v, b.v, f32x4_t{0.f, 0.f, 0.f, 0.f}, 0, 0, 0);
}
__device__ __forceinline__ void build_a(AFrag& a, const uint32_t* tab, int kd, int j, int lane) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t p = tab[tab_index(kd, j, lane & 15, 4 * (lane >> 4) + 2 * h)];
    a.v[2 * h] = (short)(p & 0xffff);
    a.v[2 * h + 1] = (short)(p >> 16);
  }
}
__device__ __forceinline__ int b_col(int lane) { return lane & 15; }
__device__ __forceinline__ int b_k0(int lane) { return 4 * ((lane >> 4) & 1); }
__device__ __forceinline__ int b_e(int lane) { return lane >> 5; }
// k = 4kq..4kq+3: e = kq >> 1, c = 4 (kq & 1) .. + 3: two 4-byte reads of one staged row
__device__ __forceinline__ void load_b(BFrag& b, const uint16_t* p, int rowE) {
  (void)rowE;
  const uint32_t p0 = *reinterpret_cast<const uint32_t*>(p), p1 = *reinterpret_cast<const uint32_t*>(p + 2);
  b.v = bf16x4_t{(short)(p0 & 0xffff), (short)(p0 >> 16), (short)(p1 & 0xffff), (short)(p1 >> 16)};
}
#define CN 4
__device__ __forceinline__ int c_m(int lane, int i) { return 4 * (lane >> 4) + i; }
__device__ __forceinline__ int c_n(int lane, int i) { (void)i; return lane & 15; }
__device__ __forceinline__ float c_get(const CFrag& c, int i) { return c.v[i]; }
__device__ __forceinline__ void zero_c(CFrag& c) { c.v = f32x4_t{0.f, 0.f, 0.f, 0.f}; }
__device__ __forceinline__ void cp_wait() {}
__device__ __forceinline__ void copy16_if(void* g, const void* s, bool ok) {
  if (ok) *reinterpret_cast<uint4*>(g) = *reinterpret_cast<const uint4*>(s);
}
#endif
#ifndef TMA_READ_DONE
#define TMA_READ_DONE() ((void)0)
#endif
static_assert(NB % NPN == 0 && NPB % NPN == 0 && NPN <= 8, "NPN divides NB and NPB; at most 8 (16-byte plane strides)");
static_assert(WMAX % 8 == 0 && NSTAGE >= 2, "16-byte rows; a ring of at least 2 pairs");
static_assert(NPPS == 1 || (NPPS == 2 && NSTAGE >= 4), "2 pairs a barrier need a ring of at least 4");

// Shared-memory layout (elements), fixed at compile time for W <= WMAX (so every offset but the tile's is
// an immediate). A staged row: 8 zero columns, WMAX data columns, 8 zero columns (the W halo reads columns
// -2, -1, W, W + 1; columns past W are never written). A staged plane: 2 rows + padding so that the plane
// stride in 4-byte words is 32 / NPN modulo 32 (the NPN planes of one B read fall in distinct banks). A
// ring slot: NPB + 2 planes. The output tile: NPB planes x 4 rows of WMAX + 8, plane stride padded by 8 (16 at NPN 4).
#if !TMA_LD
#define ROWE (WMAX + 16)
#define PLANEE (2 * (ROWE + ((32 / NPN - ROWE) % 32 + 32) % 32))
#define SLOTE ((NPB + 2) * PLANEE)
#else
// TMA loads: a staged pair is the load's box, dense: NPB + 2 planes x 2 rows x ROWE columns from column -8 (the
// box's columns outside 0..W-1 and rows outside the tensor arrive as zeros). ROWE = WMAX + 24 makes the plane
// stride 2 ROWE elements = ROWE words = 8 modulo 32 at WMAX 80 (NPN 4: the 4 planes of a B read in distinct banks).
#define ROWE (WMAX + 24)
#define PLANEE (2 * ROWE)
#define BOXB (2 * (NPB + 2) * PLANEE)                     // bytes of one staged pair (the load's byte count)
#define SLOTE (((BOXB + 127) / 128) * 64)                 // elements a ring slot takes (slots on 128 bytes)
static_assert(ROWE <= 256, "a box is at most 256 wide");
#endif
#if !TMA_ST
#define OTILE_AT (NSTAGE * SLOTE)
#if OSW
#define OROWE WMAX                                   // rows dense: a quarter warp's 16-byte flush reads conflict-free
#else
#define OROWE (WMAX + 8)
#endif
#define OPLANEE (4 * OROWE + (NPN == 4 ? 16 : 8))   // padding: C-fragment writes conflict-free with OSW, else at most
                                                     // 2-way (emulate.bank_conflicts)
#else
// TMA stores: the output tile is the store's box, dense, on 128 bytes: NPB planes x 4 rows x WMAX + 8 columns (the
// store clips what lies past W, H or the planes); a plane stride of 16 words modulo 32 keeps the C-fragment
// writes at most 2-way.
#define OTILE_AT (((2 * NSTAGE * SLOTE + 127) / 128) * 64)
#define OROWE (WMAX + 8)
#define OPLANEE (4 * OROWE)
static_assert(NPPS == 1 && OROWE <= 256, "TMA: one output tile; a box is at most 256 wide");
#endif
// NVIDIA's flush reads every step of every thread unpredicated: planes past the last tile's NPB, read, never stored
#if !TMA_ST && !defined(__HIP_PLATFORM_AMD__)
#define OPAD ((FRS / 4) * NFL > NPB ? (FRS / 4) * NFL - NPB : 0)
#else
#define OPAD 0
#endif
// NPPS output tiles (flush and fill overlap at 2); with TMA loads, one mbarrier a ring slot after them
#define SMEM_BYTES (2 * (OTILE_AT + (NPPS * NPB + OPAD) * OPLANEE) + (TMA_LD ? 8 * NSTAGE : 0))
static_assert(2 * NPB * OPLANEE >= 4 * TABN + 2 * 75, "the A table and the taps fit in the output tile");

#if TMA_ST
#define TMA_PARAMS , const __grid_constant__ TmaDesc tin_, const __grid_constant__ TmaDesc tout_
#else
#define TMA_PARAMS
#endif

extern "C" __global__ void __launch_bounds__(THREADS, LB_MINB)
conv3d_dw_mma_tiles(const uint16_t* __restrict__ x, const uint16_t* __restrict__ wt, uint16_t* __restrict__ y,
                    int D, int H, int W TMA_PARAMS) {
  extern __shared__ __align__(128) uint4 smem_dyn[];
#if TMA_ST
  const TmaDesc* tin = &tin_;   // the tensor maps, in the kernel's parameter space
  const TmaDesc* tout = &tout_;
#endif
  uint16_t* ring = reinterpret_cast<uint16_t*>(smem_dyn);
  uint16_t* otile = ring + OTILE_AT;
  const int tid = threadIdx.x, lane = tid % LANES, warp = tid / LANES;
  const int c = blockIdx.y, d0 = blockIdx.x * NPB, Dout = D - 2;
  const int nb = (H + 3) / 4, npairs = 2 * nb + 2;
  const size_t plane = (size_t)H * W;
  const int wch = W / 8;                                   // 16-byte chunks per row

  // the channel's 75 taps: their loads first (their latency overlaps the ring's zeroing), into shared memory below
  constexpr int NTAP = (75 + THREADS - 1) / THREADS;
  uint16_t taps[NTAP];
#pragma unroll
  for (int k = 0; k < NTAP; ++k) taps[k] = tid + THREADS * k < 75 ? wt[c * 75 + tid + THREADS * k] : 0;
#if !TMA_LD
  // zero the ring once: the halo columns stay zero
  for (int i = tid; i < NSTAGE * SLOTE / 8; i += THREADS) smem_dyn[i] = make_uint4(0u, 0u, 0u, 0u);

  const long long xoff = ((long long)c * D + d0) * (long long)plane;   // the block's first plane, in elements of x
#if !defined(__HIP_PLATFORM_AMD__)
  // this thread's copies: row e of the pair, j = 0 .. CPR - 1: chunk id = tid + THREADS j of the row -> plane p,
  // chunk ch; the same for both rows (row 1: the row's own pointer, ROWE further in the slot). Per j: the offset in
  // x from the row's pointer (bytes; a plane past the tensor reads the first plane: an address inside x) and in the
  // slot (bytes; no chunk: the slot's first 8 columns, halo zeros anyway), and whether it is a chunk of the tensor
  constexpr int CPR = ((NPB + 2) * WCH + THREADS - 1) / THREADS;
  int csrc[CPR], cdst[CPR];
  bool cok[CPR];
#pragma unroll
  for (int j = 0; j < CPR; ++j) {
    const int id = tid + THREADS * j, p = id / WCH, ch = id % WCH;
    const bool cin = id < (NPB + 2) * WCH && ch < wch;
    cok[j] = cin && d0 + p < D;
    csrc[j] = 2 * (cin ? (cok[j] ? p * (int)plane : 0) + 8 * ch : 0);
    cdst[j] = 2 * (cin ? p * PLANEE + 8 + 8 * ch : 0);
  }
  const char* const xblk = reinterpret_cast<const char*>(x + xoff);
#else
  // this thread's copies: chunk id = tid + THREADS k -> plane p, row e of the pair, chunk ch of the row
  int csrc[CPT], cdst[CPT], crow[CPT];
  bool cin[CPT], cok[CPT];   // a chunk of the pair at all; a chunk inside the tensor's planes
#pragma unroll
  for (int k = 0; k < CPT; ++k) {
    const int id = tid + THREADS * k, p = id / (2 * WCH), e = (id / WCH) & 1, ch = id % WCH;
    cin[k] = id < NCHUNK && ch < wch;
    cok[k] = cin[k] && d0 + p < D;
    crow[k] = e;
    csrc[k] = cok[k] ? p * (int)plane + e * W + 8 * ch : 0;
    cdst[k] = p * PLANEE + e * ROWE + 8 + 8 * ch;
  }
  const uint16_t* xc = x + xoff;
#endif
#endif

#if TMA_ST
  const uint32_t sotile = (uint32_t)__cvta_generic_to_shared(otile);
#endif
#if TMA_LD
  const uint32_t sring = (uint32_t)__cvta_generic_to_shared(ring);
  const uint32_t sbar = (uint32_t)__cvta_generic_to_shared(otile + NPB * OPLANEE);   // NSTAGE mbarriers
  if (tid == 0) {
    for (int s = 0; s < NSTAGE; ++s) mbar_init(sbar + 8 * s);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  auto issue = [&](int i) {   // pair i (input rows 2i - 2, 2i - 1; columns -8 ..) into slot i % NSTAGE, by one thread
    if (tid == 0 && i < npairs) {
      const int slot = i % NSTAGE;
      mbar_expect(sbar + 8 * slot, BOXB);
      tma_load(sring + 2 * slot * SLOTE, tin, sbar + 8 * slot, -8, 2 * i - 2, d0, c);
    }
  };
  auto land = [&]() {};
#elif !defined(__HIP_PLATFORM_AMD__)
  const uint32_t sring = (uint32_t)__cvta_generic_to_shared(ring);
  auto issue = [&](int i) {   // pair i (input rows 2i - 2, 2i - 1) into slot i % NSTAGE
    const uint32_t sslot = sring + 2 * (i % NSTAGE) * SLOTE;
#pragma unroll
    for (int e = 0; e < 2; ++e) {   // no branch: a row outside the tensor is a zero fill from the nearest row inside
      const int r = 2 * i - 2 + e;
      const char* xrow = xblk + 2 * W * max(min(r, H - 1), 0);
      const bool rin = (unsigned)r < (unsigned)H;
#pragma unroll
      for (int j = 0; j < CPR; ++j) cp_async16(sslot + cdst[j] + 2 * ROWE * e, xrow + (uint32_t)csrc[j], cok[j] && rin);
    }
    cp_commit();
  };
  auto land = [&]() {};
#else
  uint4 pre[CPT];
  int pre_slot = 0;
  auto issue = [&](int i) {
    pre_slot = i % NSTAGE;
#pragma unroll
    for (int k = 0; k < CPT; ++k) {
      const int ih = 2 * i - 2 + crow[k];
      const bool ok = cok[k] && ih >= 0 && ih < H;
      pre[k] = ok ? *reinterpret_cast<const uint4*>(xc + csrc[k] + (ptrdiff_t)(2 * i - 2) * W)
                  : make_uint4(0u, 0u, 0u, 0u);
    }
  };
  auto land = [&]() {
#pragma unroll
    for (int k = 0; k < CPT; ++k)
      if (cin[k])   /* zeros too: rows outside the tensor overwrite an older pair */
        *reinterpret_cast<uint4*>(ring + pre_slot * SLOTE + cdst[k]) = pre[k];
  };
#endif

  // the A operands: 3 planes x 4 row pairs, from the pair table (in the output tile's space, unused until the
  // first completed block, several barriers later)
  uint32_t* tab = reinterpret_cast<uint32_t*>(otile);
  uint16_t* wsm = reinterpret_cast<uint16_t*>(tab + TABN);   // the taps, after the table
#pragma unroll
  for (int k = 0; k < NTAP; ++k)
    if (tid + THREADS * k < 75) wsm[tid + THREADS * k] = taps[k];
  __syncthreads();   // the taps are in, the ring is zero (and its mbarriers made)
  // the first pairs on their way before the table and the A operands are built (their latency overlaps that work)
#pragma unroll
  for (int i = 0; i < NSTAGE - NPPS; ++i) {
    issue(i);
    land();
  }
  for (int i = tid; i < TABN; i += THREADS) tab[i] = tab_entry(wsm, i);
  __syncthreads();
  AFrag a[3][4];
#pragma unroll
  for (int kd = 0; kd < 3; ++kd)
#pragma unroll
    for (int j = 0; j < 4; ++j) build_a(a[kd][j], tab, kd, j, lane);

  // this warp's tiles: tile T = warp + WARPS q -> plane group T % (NPB / NPN), column tile T / (NPB / NPN)
  static_assert(WARPS % NPG == 0, "a warp's tiles share their plane group; their columns are OQ apart");
  int bofs[NTW];
#if defined(__HIP_PLATFORM_AMD__)
  int oofs[NTW];
#endif
#pragma unroll
  for (int q = 0; q < NTW; ++q) {
    // tiles past W read staged columns past W, still inside the row, and are never flushed: no
    // clamp, so that a tile's offsets are the first tile's plus a constant (immediates in the shared accesses)
    const int T = warp + WARPS * q, pg = T % NPG, ct = T / NPG;
    const int n = b_col(lane), pl = pg * NPN + n / SPN, col = ct * TILEW + 4 * (n % SPN);
    bofs[q] = pl * PLANEE + b_e(lane) * ROWE + 8 + col - 2 + b_k0(lane);   // staged (e0, col - 2 + k0) of plane pl
#if defined(__HIP_PLATFORM_AMD__)
    oofs[q] = pg * NPN * OPLANEE + ct * TILEW;            // output tile: this tile's first plane and column
#endif
  }
#if !defined(__HIP_PLATFORM_AMD__)
  // NVIDIA: the output-tile element of this lane's C registers i = 0, 1 (with i + 2: one bf16x2) in the warp's first
  // tile; tile q's is OQ q columns further (a multiple of 16 with OSW: the swizzle leaves it alone)
  int coff[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int m = c_m(lane, i), n = c_n(lane, i), col = (warp / NPG) * TILEW + 4 * (n % SPN) + m_col(m);
    coff[i] = ((warp % NPG) * NPN + n / SPN) * OPLANEE + m_row(m) * OROWE + (OSW ? col ^ (4 * m_row(m)) : col);
  }
#endif
  CFrag acc[2][NTW];
#pragma unroll
  for (int s = 0; s < 2; ++s)
#pragma unroll
    for (int q = 0; q < NTW; ++q) zero_c(acc[s][q]);


  // completed block b: accumulator slot -> output tile (bf16); flushed to y after the next barrier
  auto to_tile = [&](int s, int t) {   // a completed block into output tile t (its index % NPPS)
#pragma unroll
    for (int q = 0; q < NTW; ++q) {   // tiles past W too: their columns past W are never flushed (no branch)
#if !defined(__HIP_PLATFORM_AMD__)
#pragma unroll
      for (int i = 0; i < 2; ++i)   // C (g, n) and (g + 8, n): adjacent columns (m_col), one bf16x2 store
        *reinterpret_cast<uint32_t*>(otile + t * NPB * OPLANEE + coff[i] + OQ * q) =
            to_bf16x2(c_get(acc[s][q], i), c_get(acc[s][q], i + 2));
#else
#pragma unroll
      for (int i = 0; i < CN; ++i) {
        const int m = c_m(lane, i), n = c_n(lane, i);
        otile[t * NPB * OPLANEE + oofs[q] + (n / SPN) * OPLANEE + m_row(m) * OROWE + 4 * (n % SPN) + m_col(m)] =
            to_bf16(c_get(acc[s][q], i));
      }
#endif
    }
#if TMA_ST
    tma_fence();
#endif
  };
#if TMA_LD
  auto pair_ready = [&](int i) { mbar_wait(sbar + 8 * (i % NSTAGE), (i / NSTAGE) & 1); };
#else
  auto pair_ready = [&](int i) { (void)i; cp_wait(); };
#endif
#if TMA_ST
  auto flush = [&](int b, int t, bool last) {   // output tile -> y rows 4b .. 4b + 3 (rows, planes past the tensor clipped)
    (void)t, (void)last;
    if (tid == 0) tma_store(tout, sotile, 0, 4 * b, d0, c);
  };
#else
  const long long yoff = ((long long)c * Dout + d0) * (long long)plane;   // the block's first output plane
  // The flush: thread t < FTHR takes chunk ch = t % WCH of the output rows (plane, row) = 4 p + r = t / WCH + FRS k,
  // k = 0 .. NFL - 1. FRS is a multiple of 4, so step k is the same row of plane p + FRS / 4 k: its offsets are
  // the first step's plus a constant (one block-wide stride in y). Per thread: the first step's output-tile
  // offset, its offset in y from the block's row 0 (bytes), and its plane (NPB when it has no chunk).
  // With OSW, the chunk is read from its swizzled place (chunk ch ^ (r >> 1), halves swapped when r is odd).
  static_assert(FRS >= 4, "a block has at least 4 WCH threads");
  int fso, fgo, fpl;
  bool fswap;
  {
    const int pr = tid / WCH, p = pr / 4, r = pr % 4, ch = tid % WCH;
    fso = tid < FTHR ? p * OPLANEE + r * OROWE + 8 * (OSW ? ch ^ (r >> 1) : ch) : 0;
    fswap = OSW && (r & 1);
    fgo = 2 * ((p * H + r) * W + 8 * ch);
    fpl = tid < FTHR && ch < wch ? p : NPB;
  }
  const int fplanes = min(NPB, Dout - d0);   // output planes of this block
  // output tile t -> y rows 4b .. 4b + 3, 16 bytes a thread; every row is inside the tensor but the last block's
  char* const yblk = reinterpret_cast<char*>(y + yoff);
  auto flush = [&](int b, int t, bool last) {
    const uint16_t* ot = otile + t * NPB * OPLANEE + fso;
    const int lim = last && 4 * b + (tid / WCH) % 4 >= H ? 0 : fplanes;   // the last block: rows past H
    char* const yb = yblk + 8 * b * W;
#if !defined(__HIP_PLATFORM_AMD__)
    // every read first (unpredicated: a thread or step without a chunk reads inside the tile or its OPAD planes),
    // then the predicated stores: no branch, and the reads' latencies overlap
    uint4 v[NFL];
#pragma unroll
    for (int k = 0; k < NFL; ++k) {
      v[k] = *reinterpret_cast<const uint4*>(ot + (FRS / 4) * k * OPLANEE);
      if (fswap) v[k] = make_uint4(v[k].z, v[k].w, v[k].x, v[k].y);
    }
#pragma unroll
    for (int k = 0; k < NFL; ++k)
      st16_if(yb + (FRS / 4) * k * 2 * (int)plane + (uint32_t)fgo, v[k], fpl < lim - (FRS / 4) * k);
#else
#pragma unroll
    for (int k = 0; k < NFL; ++k)
      copy16_if(yb + (FRS / 4) * k * 2 * (int)plane + (uint32_t)fgo,
                ot + (FRS / 4) * k * OPLANEE, fpl < lim - (FRS / 4) * k);
#endif
  };
#endif

  // pair i = 4u + P: P even starts block 2u + P/2 (j = 0) and continues block 2u + P/2 - 1 (j = 2);
  // P odd continues the block it started (j = 1) and completes the other (j = 3). So the blocks complete at
  // fixed places: pair 4u + 1 completes block 2u - 1 (odd: output tile 1 % NPPS; none at u = 0), pair 4u + 3
  // block 2u (even: tile 0); each leaves at the next even pair's barrier (pairs 4u + 2 and 4u + 4), the last
  // block (nb - 1) after the loop. The first two pairs' MMAs for block -1 and the last two pairs' for block nb
  // are left out: the first 4 pairs (FIRST) and the last 2 or 4 (LASTN) are their own copies of the loop body.
// HEAD: the barrier of an interval of NPPS pairs (i, i + 1): their copies have landed, everyone is past the
// reads of the previous interval's slots, which take pairs i + NSTAGE - NPPS .. i + NSTAGE - 1; the previous
// completed block leaves. BODY: one pair's MMAs; an odd pair completes a block into its output tile.
#define HEAD(P, FIRST)                                                                             \
    {                                                                                              \
      const int i = base + P;                                                                      \
      pair_ready(i);                                                                               \
      /* TMA: the last store has read the output tile before an odd pair refills it */            \
      if (TMA_ST && (P & 1) && tid == 0) TMA_READ_DONE();                                          \
      __syncthreads();                                                                             \
      _Pragma("unroll") for (int u = 0; u < NPPS; ++u)                                             \
        issue(i + NSTAGE - NPPS + u);   /* the copies first: they have the longest way to go */    \
      if (!(P & 1) && !(FIRST)) flush(base / 2 - 2 + P / 2, (P / 2) % NPPS, false);               \
    }
#define BODY(P, FIRST, LASTN)                                                                      \
    {                                                                                              \
      const int i = base + P;                                                                      \
      constexpr int sn = (P >> 1) & 1, so = sn ^ 1, jn = P & 1, jo = jn + 2;                       \
      /* the block this pair starts or continues (slot sn) and the one it continues or completes */ \
      constexpr bool liven = !(LASTN) || P < (LASTN) - 2, liveo = !(FIRST) || P >= 2;              \
      const uint16_t* sl = ring + (i % NSTAGE) * SLOTE;                                            \
      /* every tile of the warp, also past W (columns past W; never flushed): no branch */         \
      BFrag b[NTW][3];                                                                             \
      _Pragma("unroll") for (int q = 0; q < NTW; ++q)                                              \
        _Pragma("unroll") for (int kd = 0; kd < 3; ++kd)                                           \
          load_b(b[q][kd], sl + bofs[q] + kd * PLANEE, ROWE);                                      \
      _Pragma("unroll") for (int kd = 0; kd < 3; ++kd)                                             \
        _Pragma("unroll") for (int q = 0; q < NTW; ++q) {                                          \
          /* an even pair starts its block: the first MMA writes the accumulators afresh */        \
          if (liven && !(P & 1) && kd == 0) mma0(acc[sn][q], a[kd][jn], b[q][kd]);                 \
          else if (liven) mma(acc[sn][q], a[kd][jn], b[q][kd]);                                    \
          if (liveo) mma(acc[so][q], a[kd][jo], b[q][kd]);                                         \
        }                                                                                          \
      if ((P & 1) && !((FIRST) && P == 1)) to_tile(so, ((P >> 1) ^ 1) % NPPS);   /* block i/2 - 1 */ \
    }
#if NPPS == 1
#define ITER(FIRST, LASTN)                                                                         \
    HEAD(0, FIRST) BODY(0, FIRST, LASTN) land();   /* AMD: the prefetched pair into LDS after the MMAs */ \
    HEAD(1, FIRST) BODY(1, FIRST, LASTN) land();                                                   \
    if ((LASTN) != 2) {                                                                            \
      HEAD(2, FIRST) BODY(2, FIRST, LASTN) land();                                                 \
      HEAD(3, FIRST) BODY(3, FIRST, LASTN) land();                                                 \
    }
#else
#define ITER(FIRST, LASTN)   /* NVIDIA only: land() is empty */                                     \
    HEAD(0, FIRST) BODY(0, FIRST, LASTN) BODY(1, FIRST, LASTN)                                     \
    if ((LASTN) != 2) { HEAD(2, FIRST) BODY(2, FIRST, LASTN) BODY(3, FIRST, LASTN) }
#endif
  // npairs = 2 nb + 2: 4, 6, 8, ...
  if (npairs == 4) {
    const int base = 0;
    ITER(true, 4)
  } else {
    {
      const int base = 0;
      ITER(true, 0)
    }
    int base = 4;
    for (; base + 4 < npairs; base += 4) { ITER(false, 0) }
    if (npairs - base == 2) {
      ITER(false, 2)
    } else {
      ITER(false, 4)
    }
  }
#undef ITER
#undef HEAD
#undef BODY
  __syncthreads();
  flush(nb - 1, (nb - 1) % NPPS, true);
#if TMA_ST
  if (tid == 0) tma_store_done();   // the last store has left shared memory before the block ends
#endif
#if !TMA_LD && !defined(__HIP_PLATFORM_AMD__)
  asm volatile("cp.async.wait_all;\n" ::);   // the zero-filled copies of pairs past the end
#endif
}
