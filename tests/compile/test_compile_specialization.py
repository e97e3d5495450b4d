"""compile_kernel compiles the kernel a launch runs: Triton's JIT specialization (16-byte-aligned pointers,
integers divisible by 16, an integer equal to 1 as a constant) is applied and reported; `specialize` changes it."""

from __future__ import annotations

import anyio
import pytest

from evokernel_mcp.compile.api import compile_kernel
from evokernel_mcp.compile.specialize import resolve
from evokernel_mcp.errors import BadInput

ADD = '''\
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)
'''
SIG = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}


def test_resolve_follows_the_jit_rules():
    sig = {"a": "*bf16", "n": "i32", "s": "i64", "f": "fp32"}
    assert resolve(sig, None) == {"a": "divisible_by_16", "n": "divisible_by_16", "s": "divisible_by_16", "f": "none"}
    assert resolve(sig, {"n": 1000, "s": 1, "a": "unaligned"}) == {
        "a": "none", "n": "none", "s": "equal_to_1", "f": "none"}
    assert resolve(sig, {"n": 4096, "a": 32})["a"] == "divisible_by_16"
    with pytest.raises(BadInput, match="not runtime arguments"):
        resolve(sig, {"BLOCK": 16})
    with pytest.raises(BadInput):
        resolve(sig, {"f": 16})
    with pytest.raises(BadInput):
        resolve(sig, {"n": "fast"})


def _compile(**kw):
    return anyio.run(lambda: compile_kernel(ADD, "triton", "add_kernel", "gfx942", SIG, {"BLOCK": 1024},
                                            {"num_warps": 4}, **kw))


def _loads(res) -> str:
    from evokernel_mcp import artifacts

    asm = artifacts.path_of(res.artifact_id, next(f for f in res.artifact_files if f.endswith(".amdgcn") or
                                                  f.endswith(".s"))).read_text()
    return " ".join(sorted({w for w in asm.split() if w.startswith("global_load")}))


def test_default_is_the_launch_of_fresh_tensors_and_unaligned_differs():
    default = _compile()
    assert default.ok and default.specialization == {"x_ptr": "divisible_by_16", "y_ptr": "divisible_by_16",
                                                     "out_ptr": "divisible_by_16", "n": "divisible_by_16"}
    odd = _compile(specialize={"x_ptr": "unaligned", "y_ptr": "unaligned", "out_ptr": "unaligned", "n": 1000})
    assert odd.ok and set(odd.specialization.values()) == {"none"}
    # aligned pointers and a size divisible by 16 let the compiler use wide loads; unaligned ones do not
    assert "global_load_dwordx4" in _loads(default)
    assert "global_load_dwordx4" not in _loads(odd)
    assert not odd.cached  # the specialization is part of the cache key


def test_specialize_is_for_triton_only():
    with pytest.raises(BadInput):
        anyio.run(lambda: compile_kernel("__global__ void k() {}", "hip", "k", "gfx942", specialize={"n": 1}))
