"""Compiler message parsers. The stderr texts below were recorded on this machine (clang-19 19.1.7 offline HIP,
nvcc 13.0.88 -arch=sm_90) with the sources shown in each test."""

from __future__ import annotations

from evokernel_mcp.compile.diagnostics import parse_clang_diagnostics, parse_nvcc_diagnostics

CLANG_STDERR = """\
/tmp/w/kernel.hip:3:22: error: expected ';' at end of declaration
    3 |   int t = threadIdx.x
      |                      ^
      |                      ;
/tmp/w/kernel.hip:4:3: warning: unused variable 'y' [-Wunused-variable]
In file included from /tmp/w/kernel.hip:1:
/root/x/include/hip/amd_detail/amd_hip_runtime.h:57:10: note: in instantiation of something
clang-19: error: unsupported option '--bogus'
1 error generated when compiling for gfx942.
"""

NVCC_STDERR = """\
bad.cu(3): error: expected a ";"
    x[t] = 1.0f;
    ^

bad.cu(4): error: identifier "undefined_fn" is undefined
    undefined_fn(t);
    ^

2 errors detected in the compilation of "bad.cu".
bad2.cu(2): warning #177-D: variable "unused" was declared but never referenced
ptxas /tmp/tmpxft_0000569d_00000000-6_bad2.ptx, line 23; error   : Unknown modifier '.instr'
ptxas fatal   : Ptx assembly aborted due to errors
ptxas info    : Used 23 registers, used 1 barriers, 4096 bytes smem
"""


def test_clang_lines_in_the_users_file_are_mapped_others_are_not():
    d = parse_clang_diagnostics(CLANG_STDERR, "/tmp/w/kernel.hip")
    assert [(x.line, x.column, x.severity) for x in d] == [
        (3, 22, "error"), (4, 3, "warning"), (None, None, "note"), (None, None, "error")]
    assert d[0].message == "expected ';' at end of declaration"
    assert "amd_hip_runtime.h:57:10" in d[2].message and "unsupported option" in d[3].message


def test_clang_line_offset_for_a_wrapped_source():
    d = parse_clang_diagnostics(CLANG_STDERR, "/tmp/w/kernel.hip", line_offset=2)
    assert d[0].line == 1 and d[1].line == 2


def test_nvcc_and_ptxas_messages():
    d = parse_nvcc_diagnostics(NVCC_STDERR, "/tmp/w/bad.cu")
    assert [(x.line, x.severity) for x in d[:2]] == [(3, "error"), (4, "error")]
    assert d[1].message == 'identifier "undefined_fn" is undefined'
    assert d[2].line is None and "bad2.cu:2" in d[2].message and d[2].severity == "warning"
    assert d[3].line is None and d[3].message.startswith("ptxas: Unknown modifier") and "PTX line 23" in d[3].message
    assert d[4].severity == "error" and len(d) == 5  # ptxas info lines are facts, not diagnostics
