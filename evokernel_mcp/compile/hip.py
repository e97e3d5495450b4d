"""HIP C++ -> AMDGCN assembly + HSACO for gfx90a / gfx942 / gfx950.

Toolchain order (the result's `toolchain` says which one ran):
1. ROCm host: hipcc ($HIPCC, /opt/rocm/bin, PATH), else amdclang++: `--cuda-device-only -S` for the target.
2. Offline (no ROCm): Debian clang-19 with the HIP headers the Triton wheel ships
   (triton/backends/amd/include) behind a small fake ROCm root (state_dir/hip_rocm_root: include/ symlink,
   bin/.hipVersion) and the device libraries of the rocm-device-libs package linked as builtin bitcode
   (ockl/ocml/oclc_*: threadIdx & co. stay intrinsics, so register counts are real).
   gfx950 is unknown to LLVM 19: clang-19 compiles for gfx942 (with __gfx950__ defined instead of __gfx942__)
   to optimized LLVM IR, and the LLVM bundled in Triton generates gfx950 code (hip_llvm_codegen.py).
Every tool runs through subproc.run_sync with what is left of `timeout_s`; a crash or timeout becomes
ok=False with a diagnostic, never an exception.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from pathlib import Path

from evokernel_mcp import executables
from evokernel_mcp.compile.diagnostics import parse_clang_diagnostics
from evokernel_mcp.compile.hip_offline import (
    device_lib_args,
    frontend_target,
    offline_rocm_root,
    resolve_clang19,
    resolve_lld19,
)
from evokernel_mcp.compile.models import BackendOutput
from evokernel_mcp.errors import EvoError, ToolTimeout
from evokernel_mcp.models import Diagnostic, ToolchainInfo
from evokernel_mcp.runtime import sandbox
from evokernel_mcp.subproc import probe_version, resolve_executable, run_sync, tail

log = logging.getLogger(__name__)

HIP_TARGETS = ("gfx90a", "gfx942", "gfx950")
SOURCE_NAME = "kernel.hip"
_CUID = "-cuid=evokernel"  # fixed, so the output (and the cache) is deterministic


class _Budget:
    """The compile's time limit, shared by its steps (compile, assemble, link) and honoured exactly: a step
    gets what is left, and one that would start with nothing left is a timeout without running."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + timeout_s

    def left(self, tool: str) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise ToolTimeout(tool, self.timeout_s)
        return left


def _fail(toolchain: ToolchainInfo, message: str, log_text: str = "",
          diagnostics: list[Diagnostic] | None = None) -> BackendOutput:
    diags = list(diagnostics or [])
    if not any(d.severity == "error" for d in diags):
        diags.append(Diagnostic(severity="error", message=message))
    return BackendOutput(ok=False, diagnostics=diags, toolchain=toolchain, log=log_text)


def _rocm_compiler() -> str | None:
    return executables.find("hipcc")


def compile_hip(source: str, kernel: str, target: str, *, flags: list[str], workdir: Path,
                timeout_s: float) -> BackendOutput:
    """Compile HIP C++ device code for `target`; diagnostics are mapped to the lines of `source`."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    src = workdir / SOURCE_NAME
    src.write_text(source, encoding="utf-8")
    none = ToolchainInfo(name="none")
    if target not in HIP_TARGETS:
        return _fail(none, f"HIP target {target!r} is not supported; use one of {', '.join(HIP_TARGETS)}.")
    budget = _Budget(timeout_s)
    rocm = _rocm_compiler()
    try:
        out = (_compile_rocm(rocm, src, target, flags, workdir, budget) if rocm
               else _compile_offline(src, target, flags, workdir, budget))
    except ToolTimeout as e:
        return _fail(ToolchainInfo(name=e.tool), f"{e.tool} did not finish within {timeout_s:g} s and was killed "
                     "(compile timeout); simplify the kernel or raise the timeout.", e.stderr_tail)
    except EvoError as e:  # ToolNotFound and friends: say what is missing
        return _fail(none, str(e))
    except OSError as e:
        return _fail(none, f"HIP compile could not run: {e}")
    if out.ok and out.asm:
        _check_kernel_present(out, kernel)
    return out


def _check_kernel_present(out: BackendOutput, kernel: str) -> None:
    from evokernel_mcp.compile.isa import kernel_matches, kernel_names

    names = kernel_names(out.asm or "")
    if names and not any(kernel_matches(n, kernel) for n in names):
        out.diagnostics.append(Diagnostic(
            severity="warning", message=f"kernel {kernel!r} not found in the output; kernels compiled: "
            f"{', '.join(names)} (a C++ kernel is mangled unless declared extern \"C\")."))


def _run(argv: list[str], budget: _Budget, tool: str, cwd: Path):
    from evokernel_mcp.paths import sub_state_dir

    # agent source: the compiler runs sandboxed; it reads the offline ROCm root (HIP headers) we built
    wrapped, env, _level = sandbox.tool_argv(argv, cwd, ro_binds=[str(sub_state_dir("hip_rocm_root"))])
    res = run_sync(wrapped, timeout_s=budget.left(tool), cwd=cwd, env=env, tool=tool)
    return res, f"$ {' '.join(argv)}\n[exit {res.returncode}, {res.duration_s:.2f} s]\n{tail(res.stderr)}\n"


def _diagnose(res, src: Path, what: str) -> list[Diagnostic]:
    diags = parse_clang_diagnostics(res.stderr, str(src))
    if res.returncode != 0 and not any(d.severity == "error" for d in diags):
        crash = " (crashed)" if res.returncode < 0 or "PLEASE submit a bug report" in res.stderr else ""
        diags.append(Diagnostic(severity="error", message=f"{what} failed with exit code {res.returncode}{crash}: "
                                f"{tail(res.stderr, 1500).strip() or 'no message'}"))
    return diags


def _assemble(clang: str, lld: str | None, asm_path: Path, target: str, budget: _Budget, workdir: Path):
    """AMDGCN text -> relocatable object -> HSACO (ld.lld -shared). Returns (bytes | None, log)."""
    if lld is None:
        return None, "ld.lld not found: no HSACO (assembly and metadata are still complete)\n"
    obj, hsaco = workdir / "kernel.o", workdir / "kernel.hsaco"
    r1, l1 = _run([clang, "-target", "amdgcn-amd-amdhsa", f"-mcpu={target}", "-c", str(asm_path), "-o", str(obj)],
                  budget, "clang (assemble)", workdir)
    if r1.returncode != 0:
        return None, l1
    r2, l2 = _run([lld, "-shared", str(obj), "-o", str(hsaco)], budget, "ld.lld", workdir)
    return (hsaco.read_bytes() if r2.returncode == 0 else None), l1 + l2


def _compile_rocm(hipcc: str, src: Path, target: str, flags: list[str], workdir: Path,
                  budget: _Budget) -> BackendOutput:
    tc = ToolchainInfo(name=Path(hipcc).name, version=probe_version(hipcc), path=hipcc)
    asm_path = workdir / "kernel.s"
    argv = [hipcc, "-x", "hip", f"--offload-arch={target}", "--cuda-device-only", "-O3", _CUID, *flags,
            "-S", "-o", str(asm_path), str(src)]
    res, log_text = _run(argv, budget, tc.name, workdir)
    diags = _diagnose(res, src, tc.name)
    if res.returncode != 0 or not asm_path.is_file():
        return _fail(tc, f"{tc.name} failed", log_text, diags)
    llvm_bin = Path(hipcc).resolve().parent.parent / "llvm" / "bin"
    clang = resolve_executable("clang", extra_dirs=[str(llvm_bin)])
    lld = resolve_executable("ld.lld", extra_dirs=[str(llvm_bin)])
    binary, alog = _assemble(clang, lld, asm_path, target, budget, workdir) if clang else (None, "")
    return BackendOutput(ok=True, diagnostics=diags, toolchain=tc, asm=asm_path.read_text(), binary=binary,
                         log=log_text + alog)


def _offline_argv(clang: str, src: Path, target: str, flags: list[str], out: Path, emit_llvm: bool) -> list[str]:
    fe = frontend_target(target)
    argv = [clang, "-x", "hip", f"--offload-arch={fe}", "--cuda-device-only", "-nogpulib",
            f"--rocm-path={offline_rocm_root()}", "-O3", _CUID, *device_lib_args(target)]
    if fe != target:  # gfx950 through a gfx942 front end: the source sees the real target's macro
        argv += [f"-U__{fe}__", f"-D__{target}__=1"]
    argv += [*flags, "-S"] + (["-emit-llvm"] if emit_llvm else []) + ["-o", str(out), str(src)]
    return argv


def _compile_offline(src: Path, target: str, flags: list[str], workdir: Path, budget: _Budget) -> BackendOutput:
    clang = resolve_clang19()
    version = probe_version(clang)
    tc = ToolchainInfo(name="clang-19", version=version, path=clang)
    if frontend_target(target) != target:
        return _compile_offline_split(clang, tc, src, target, flags, workdir, budget)
    asm_path = workdir / "kernel.s"
    res, log_text = _run(_offline_argv(clang, src, target, flags, asm_path, False), budget, "clang-19", workdir)
    diags = _diagnose(res, src, "clang-19")
    if res.returncode != 0 or not asm_path.is_file():
        return _fail(tc, "clang-19 failed", log_text, diags)
    binary, alog = _assemble(clang, resolve_lld19(), asm_path, target, budget, workdir)
    tc = tc.model_copy(update={"name": "clang-19 (offline HIP: triton-wheel HIP headers + rocm-device-libs)"})
    return BackendOutput(ok=True, diagnostics=diags, toolchain=tc, asm=asm_path.read_text(), binary=binary,
                         log=log_text + alog)


_TARGET_ATTRS = re.compile(r' "target-(?:cpu|features)"="[^"]*"')


def _compile_offline_split(clang: str, tc: ToolchainInfo, src: Path, target: str, flags: list[str],
                           workdir: Path, budget: _Budget) -> BackendOutput:
    """clang-19 front end + middle end for gfx942 -> LLVM IR -> Triton's LLVM code generator for `target`."""
    ll = workdir / f"kernel.{frontend_target(target)}.ll"
    res, log_text = _run(_offline_argv(clang, src, target, flags, ll, True), budget, "clang-19", workdir)
    diags = _diagnose(res, src, "clang-19")
    if res.returncode != 0 or not ll.is_file():
        if "needs target feature" in res.stderr or "undeclared identifier '__builtin_amdgcn" in res.stderr:
            diags.append(Diagnostic(severity="note", message=f"offline {target} path: clang-19 parses the source as "
                                    f"{frontend_target(target)}, so {target}-only builtins are unknown to it; "
                                    "compile on a ROCm host (hipcc) for those."))
        return _fail(tc, "clang-19 failed", log_text, diags)
    ir = ll.read_text()
    ir_target = workdir / f"kernel.{target}.ll"
    ir_target.write_text(_TARGET_ATTRS.sub("", ir))  # let the code generator use the real target's features
    asm_path, hsaco = workdir / "kernel.s", workdir / "kernel.hsaco"
    argv = [sys.executable, "-m", "evokernel_mcp.compile.hip_llvm_codegen", str(ir_target), target,
            str(asm_path), str(hsaco)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]),
                                                                     os.environ.get("PYTHONPATH")])))
    tool = "triton LLVM codegen"
    cg = run_sync(argv, timeout_s=budget.left(tool), cwd=workdir, env=env, tool=tool)
    log_text += f"$ {' '.join(argv)}\n[exit {cg.returncode}, {cg.duration_s:.2f} s]\n{tail(cg.stderr)}\n{cg.stdout}"
    info = _last_json(cg.stdout)
    llvm_ver = (info or {}).get("llvm") or "?"
    tc = ToolchainInfo(
        name=f"clang-19 (frontend, {frontend_target(target)}) + triton-bundled LLVM {llvm_ver} ({target} codegen)",
        version=f"{tc.version}; triton {(info or {}).get('triton', '?')} LLVM {llvm_ver} "
                f"rev {(info or {}).get('revision') or '?'}", path=tc.path)
    if cg.returncode != 0 or not asm_path.is_file():
        msg = (cg.stderr.strip().splitlines() or ["no message"])[-1]
        diags.append(Diagnostic(severity="error", message=f"{target} code generation with Triton's LLVM failed "
                                f"(exit {cg.returncode}): {msg}"))
        return BackendOutput(ok=False, diagnostics=diags, toolchain=tc, log=log_text, files={ll.name: ir})
    return BackendOutput(ok=True, diagnostics=diags, toolchain=tc, asm=asm_path.read_text(),
                         binary=hsaco.read_bytes() if hsaco.is_file() else None, files={ll.name: ir},
                         log=log_text)


def _last_json(text: str) -> dict | None:
    for line in reversed(text.splitlines()):
        try:
            val = json.loads(line)
        except ValueError:
            continue
        if isinstance(val, dict):
            return val
    return None
