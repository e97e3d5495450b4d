"""Subprocess entry: LLVM IR (from clang-19) -> AMDGCN assembly + HSACO with the LLVM bundled in Triton.

Used by compile/hip.py for targets the installed clang lacks (gfx950 with LLVM 19). Runs in its own process
(`python -m evokernel_mcp.compile.hip_llvm_codegen IR ARCH OUT_ASM OUT_HSACO`) so a crash or hang of the code
generator is a timed-out subprocess, never the server. Prints one JSON line: {"toolchain": ..., "version": ...}.
Triton 3.9 ships the AMD code generator as libtriton_amd_codegen.so (compile_amdgpu / assemble_amdgcn);
older Triton (3.5/3.6) has llvm.translate_to_asm + amd.assemble_amdgcn in libtriton.so. Both are supported.
"""

from __future__ import annotations

import json
import mmap
import sys
import tempfile
from pathlib import Path


def _llvm_version_in(lib: Path) -> str | None:
    """The 'LLVM version X' string compiled into a shared library (read with mmap, no subprocess)."""
    try:
        with open(lib, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            i = mm.find(b"LLVM version ")
            if i < 0:
                return None
            end = mm.find(b"\0", i, i + 120)
            return mm[i + len("LLVM version "):end].decode(errors="replace").split()[0]
    except OSError:
        return None


def _link(obj: bytes, out_hsaco: Path) -> None:
    from triton._C.libtriton import amd

    with tempfile.TemporaryDirectory() as d:
        o = Path(d) / "k.o"
        o.write_bytes(obj)
        amd.link_hsaco(str(o), str(out_hsaco))


def _new_api(ir: str, arch: str, out_hsaco: Path) -> tuple[str, dict]:
    from triton.backends.amd import compiler as C

    triple = C.get_amd_codegen_target_triple(arch)
    asm = C.compile_amdgpu(ir, triple, arch, "", flags=C.get_llvm_flags(arch), enable_fp_fusion=True,
                           disable_optimization=False, canonicalize_gep=False, disabled_passes="",
                           dump_ir=False, enable_timing=False)
    _link(C.assemble_amdgcn(asm, arch, ""), out_hsaco)
    lib = Path(C.get_amd_codegen_path())
    return asm, {"library": str(lib), "revision": C.get_amd_codegen_revision(), "triple": triple,
                 "llvm": _llvm_version_in(lib)}


def _old_api(ir: str, arch: str, out_hsaco: Path) -> tuple[str, dict]:
    import triton
    from triton._C.libtriton import amd, llvm

    llvm.init_targets()
    triple = getattr(amd, "TARGET_TRIPLE", "amdgcn-amd-amdhsa")

    def translate(is_object: bool):
        try:
            return llvm.translate_to_asm(ir, triple, arch, "", [], True, is_object)
        except TypeError:  # newer signature: (..., is_object, canonicalize_gep)
            return llvm.translate_to_asm(ir, triple, arch, "", [], True, is_object, False)

    asm = translate(False)
    try:
        obj = amd.assemble_amdgcn(asm, arch, "")
    except (AttributeError, TypeError):  # absent, or another signature in this version
        obj = translate(True)
    _link(obj, out_hsaco)
    lib = Path(triton.__file__).parent / "_C" / "libtriton.so"
    return asm, {"library": str(lib), "revision": None, "triple": triple, "llvm": _llvm_version_in(lib)}


def main(argv: list[str]) -> int:
    ir_path, arch, out_asm, out_hsaco = argv
    import triton

    ir = Path(ir_path).read_text()
    try:
        from triton.backends.amd.compiler import compile_amdgpu  # noqa: F401
        have_new = True
    except ImportError:
        have_new = False
    asm, info = (_new_api if have_new else _old_api)(ir, arch, Path(out_hsaco))
    Path(out_asm).write_text(asm)
    info["triton"] = triton.__version__
    sys.stdout.write(json.dumps(info) + "\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Exception as e:  # noqa: BLE001 - reported to the parent as text on stderr, exit 1
        sys.stderr.write(f"error: {type(e).__name__}: {e}\n")
        sys.exit(1)
