"""The shipped-task kernels the self-test runs (task vector_add: out = x + y, fp32)."""

TASK = "vector_add"
KERNEL = "selftest_add_kernel"

TRITON = '''import torch
import triton
import triton.language as tl


@triton.jit
def selftest_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


def run(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    selftest_add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    return out
'''
TRITON_SIGNATURE = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}
TRITON_CONSTEXPRS = {"BLOCK": 1024}

HIP = r'''#include <hip/hip_runtime.h>
__global__ void __launch_bounds__(256) selftest_add_kernel(const float* __restrict__ x, const float* __restrict__ y,
                                                           float* __restrict__ out, int n) {
  __shared__ float tile[256];
  int i = blockIdx.x * 256 + threadIdx.x;
  tile[threadIdx.x] = i < n ? x[i] : 0.f;
  __syncthreads();
  if (i < n) out[i] = tile[threadIdx.x] + y[i];
}
'''

CUDA = r'''__global__ void __launch_bounds__(256) selftest_add_kernel(const float* __restrict__ x, const float* __restrict__ y,
                                                           float* __restrict__ out, int n) {
  __shared__ float tile[256];
  int i = blockIdx.x * 256 + threadIdx.x;
  tile[threadIdx.x] = i < n ? x[i] : 0.f;
  __syncthreads();
  if (i < n) out[i] = tile[threadIdx.x] + y[i];
}
'''
