"""compile_kernel's trusted side against the source it compiles, CPU only.

- The HIP/CUDA include check asks clang-19 (its raw lexer and its preprocessor's dependency list), so no
  spelling of `#include` (digraph, comment, splice) and no conditional gets a file outside the toolchain in.
- A Triton module runs in the compile child and may rewrite that child's result.json at exit: the server reads
  only kernel.<ext> regular files in the workdir, through a typed model, and refuses anything else.
"""

from __future__ import annotations

import shutil

import anyio
import pytest

from evokernel_mcp.compile.api import compile_kernel
from evokernel_mcp.compile.source_guard import check_dependencies, check_includes
from evokernel_mcp.errors import BadInput

needs_clang = pytest.mark.skipif(shutil.which("clang-19") is None, reason="needs clang-19")

SNEAKY = {
    "digraph": '%:include "/etc/hostname"\n',
    "comment_between": "#/**/include </etc/hostname>\n",
    "splice_after_hash": '#\\\ninclude "/etc/hostname"\n',
    "splice_in_name": '# inc\\\nlude "../../../etc/hostname"\n',
    "indented": '   #  include "/etc/hostname"\n',
    "under_if_0": '#if 0\n%:include "/etc/hostname"\n#endif\n',
    "computed": '#define F "/etc/hostname"\n#include F\n',
    "embed_digraph": '%:embed "/etc/hostname"\n',
    "incbin_split_literal": 'asm(".inc" "bin \\"/etc/hostname\\"");\n',
    "incbin_stringized": '#define S(x) #x\nasm(S(.incbin "/etc/hostname"));\n',
}


@needs_clang
@pytest.mark.parametrize("name", sorted(SNEAKY))
def test_every_spelling_of_a_file_outside_the_toolchain_is_refused(name):
    with pytest.raises(BadInput, match="not allowed|only headers of the toolchain"):
        check_includes(SNEAKY[name] + "__global__ void k(float* x) { x[0] = 1; }\n")


@needs_clang
def test_ordinary_includes_and_text_pass():
    check_includes('#include <hip/hip_runtime.h>\n  #include "local.h"\n#include <stdint.h>\n'
                   'const char* s = "#include \\"/etc/hostname\\"";  // in a string, not a directive\n'
                   "/* #include </etc/hostname> in a comment */\n__global__ void k(float* x) { x[0] = 1; }\n")


@needs_clang
def test_the_preprocessors_dependency_list_is_checked_with_the_sources_flags():
    src = '#ifdef LEAK\n#include "/etc/hostname"\n#endif\n#include <stdint.h>\n__global__ void k() {}\n'
    check_dependencies(src, "hip", [])  # not opened without the macro
    with pytest.raises(BadInput, match="/etc/hostname"):
        check_dependencies(src, "hip", ["-DLEAK=1"])
    check_dependencies('#include <cuda_fp16.h>\n#include <stdint.h>\n', "cuda", [])


@needs_clang
def test_compile_kernel_refuses_a_digraph_include_before_compiling():
    async def main():
        return await compile_kernel('%:include "/etc/hostname"\n__global__ void k(float* x) { x[0] = 1; }\n',
                                    "hip", "k", "gfx942")
    with pytest.raises(BadInput, match="only headers of the toolchain"):
        anyio.run(main)


KERNEL = """
import triton
import triton.language as tl


@triton.jit
def k(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), tl.load(x_ptr + tl.arange(0, BLOCK)) + 1)
"""

REWRITE = """
import atexit, json, os

def _rewrite():
    out = json.load(open("result.json"))
    ACTION
atexit.register(_rewrite)
"""


def _triton(action: str):
    src = REWRITE.replace("ACTION", action) + KERNEL

    async def main():
        return await compile_kernel(src, "triton", "k", "gfx942", {"x_ptr": "*fp32"}, {"BLOCK": 64})
    return anyio.run(main)


@pytest.mark.parametrize("action", [
    # a stage file named by an absolute path: the server's environment, a host file
    'out["files"]["amdgcn"] = "/proc/self/environ"; json.dump(out, open("result.json", "w"))',
    'out["files"]["ttir"] = "/etc/hostname"; json.dump(out, open("result.json", "w"))',
    'out["files"]["hsaco"] = "../../../../etc/hostname"; json.dump(out, open("result.json", "w"))',
    # a stage file replaced after the compile: a FIFO (a reader would block) and /dev/zero behind a hard name
    'os.unlink("kernel.amdgcn"); os.mkfifo("kernel.amdgcn")',
    # result.json itself a FIFO, or not the child's result at all
    'os.unlink("result.json"); os.mkfifo("result.json")',
    'open("result.json", "w").write("[" * 100000)',
    'out["metadata"] = "not a dict"; json.dump(out, open("result.json", "w"))',
], ids=["environ", "abs_path", "dotdot", "fifo_stage", "fifo_result", "deep_json", "wrong_type"])
def test_a_rewritten_compile_result_is_refused_and_nothing_of_it_returned(action, monkeypatch):
    import os

    monkeypatch.setenv("ZZ_PLANTED_VALUE", "evk-compile-secret-51d2")
    r = _triton(action)
    assert r.ok is False, r
    assert any("tampered" in d.message for d in r.diagnostics), r.diagnostics
    from evokernel_mcp import artifacts

    blob = r.model_dump_json()
    if r.artifact_id:
        blob += "".join(artifacts.path_of(r.artifact_id, n).read_text(errors="replace") for n in r.artifact_files)
    assert "evk-compile-secret-51d2" not in blob and open("/etc/hostname").read().strip() not in blob
    assert os.environ["ZZ_PLANTED_VALUE"]  # (still ours: nothing changed the server's environment)


def test_the_same_compile_untouched_still_succeeds():
    r = _triton("pass")
    assert r.ok is True and r.kernels, r.diagnostics
