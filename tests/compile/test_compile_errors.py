"""compile_kernel errors: syntax/semantic errors with the user's line, timeouts, bad target/flags/options."""

from __future__ import annotations

import anyio
import pytest

from evokernel_mcp.compile.api import compile_kernel
from evokernel_mcp.compile.options import CompileOptions, parse_options
from evokernel_mcp.errors import BadInput

SYNTAX = '''\
import triton
import triton.language as tl


@triton.jit
def k(x_ptr, n):
    pid = tl.program_id(0)
    x = tl.load(x_ptr + pid
    tl.store(x_ptr + pid, x)
'''

SEMANTIC = '''\
import triton
import triton.language as tl

# a comment line


@triton.jit
def helper(x):
    return x + undefined_name


@triton.jit
def k(x_ptr, n):
    pid = tl.program_id(0)
    x = tl.load(x_ptr + pid)
    tl.store(x_ptr + pid, helper(x))
'''


def run(**kw):
    args = {"source": SEMANTIC, "language": "triton", "kernel": "k", "target": "gfx942",
            "signature": {"x_ptr": "*fp32", "n": "i32"}} | kw
    return anyio.run(lambda: compile_kernel(**args))


def test_triton_syntax_error_has_user_line():
    r = run(source=SYNTAX)
    assert not r.ok and r.kernels == []
    d = r.diagnostics[0]
    assert d.severity == "error" and "SyntaxError" in d.message
    assert d.line in (8, 9)  # Python reports the unclosed '(' of line 8 (3.11) or the next line


def test_triton_compile_error_in_called_function_maps_to_its_line():
    r = run()
    assert not r.ok
    d = r.diagnostics[0]
    assert (d.line, d.column) == (9, 16), d
    assert "undefined_name" in d.message


def test_triton_signature_mismatch_is_a_diagnostic():
    r = run(signature={"x_ptr": "*fp32"})
    assert not r.ok and "missing ['n']" in r.diagnostics[0].message


def test_timeout_comes_back_as_diagnostic_and_is_not_cached():
    r = run(source=SEMANTIC.replace("undefined_name", "1"), options={"timeout_s": 0.2})
    assert not r.ok and "did not finish within 0.2 s" in r.diagnostics[0].message
    again = run(source=SEMANTIC.replace("undefined_name", "1"), options={"timeout_s": 0.2})
    assert not again.cached


@pytest.mark.parametrize("target,language,needle", [
    ("gfx1100", "triton", "unsupported target 'gfx1100'"),
    ("sm_90", "hip", "language='hip' compiles for AMD targets"),
    ("gfx942", "cuda", "language='cuda' compiles for NVIDIA targets"),
])
def test_bad_target_is_badinput(target, language, needle):
    with pytest.raises(BadInput, match=needle):
        run(target=target, language=language, signature=None)


@pytest.mark.parametrize("flags,needle", [
    (["-O3", "-fplugin=/tmp/x.so"], "-fplugin=/tmp/x.so"),
    (["-DX=$(rm -rf /)"], "not allowed"),
    (["-O3; rm -rf /"], "not allowed"),
    (["-Xclang", "-load"], "not allowed"),
])
def test_bad_flags_are_badinput(flags, needle):
    with pytest.raises(BadInput, match="flags not allowed") as e:
        parse_options({"flags": flags}, "hip")
    assert needle in str(e.value) or needle == "not allowed"


def test_flags_are_normalized_and_hash_is_stable():
    a = parse_options({"flags": ["-D", "BLOCK=256", "-O3"], "workgroup_size": 256}, "hip")
    b = parse_options({"workgroup_size": 256, "flags": ["-D BLOCK=256", "-O3"], "timeout_s": 5}, "hip")
    assert a.flags == ("-DBLOCK=256", "-O3")
    assert a.stable_hash() == b.stable_hash()  # timeout does not change the code
    assert a.stable_hash() != parse_options({"flags": ["-O2"]}, "hip").stable_hash()
    assert parse_options({"flags": ["-maxrregcount=32"]}, "cuda").flags == ("-maxrregcount=32",)


@pytest.mark.parametrize("options,language,needle", [
    ({"num_warps": 3}, "triton", "power of two"),
    ({"num_warps": 4}, "hip", "apply to language='triton' only"),
    ({"workgroup_size": 256}, "triton", "num_warps x wavefront"),
    ({"flags": ["-O3"]}, "triton", "flags not allowed"),
    ({"bogus": 1}, "cuda", "Known options"),
    ({"flags": "-O3"}, "cuda", "list of strings"),
])
def test_bad_options_are_badinput(options, language, needle):
    with pytest.raises(BadInput, match=needle):
        parse_options(options, language)


def test_options_are_frozen():
    o = CompileOptions(num_warps=4)
    with pytest.raises(Exception):
        o.num_warps = 8  # type: ignore[misc]


def test_signature_for_cuda_is_badinput():
    with pytest.raises(BadInput, match="for language='triton'"):
        run(language="cuda", target="sm_90", source="__global__ void k(){}")


def test_default_target_without_gpu_falls_back_to_gfx942_and_says_so():
    r = run(source=SYNTAX, target=None)
    assert r.target == "gfx942"
    p = r.provenance[0]
    assert p.field == "target" and p.source == "default" and "gfx942" in p.detail
