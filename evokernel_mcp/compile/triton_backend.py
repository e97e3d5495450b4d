"""Triton backend (runner): compiles in a child process (triton_child.py) with a hard time limit.

The user's module text is written to <workdir>/user_kernel.py and imported only in the child. For
NVIDIA targets the cubin is disassembled here (cuobjdump -sass) and its resources read from the
ptxas -v log Triton's ptxas run printed (plus cuobjdump -res-usage).
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from evokernel_mcp.compile.child_messages import ChildResult, CompileSpec
from evokernel_mcp.compile.cuda_backend import cubin_res_usage, cubin_sass, resources_from_logs
from evokernel_mcp.compile.models import BackendOutput
from evokernel_mcp.compile.options import CompileOptions, is_amd
from evokernel_mcp.errors import ToolTimeout
from evokernel_mcp.models import Diagnostic, ToolchainInfo
from evokernel_mcp.paths import sub_state_dir
from evokernel_mcp.runtime import safefs, sandbox
from evokernel_mcp.subproc import run_async, tail

MODULE_FILE = "user_kernel.py"
RESULT_FILE = "result.json"
MAX_RESULT_BYTES = 8 << 20  # diagnostics, metadata and a log tail of 20k characters: far below
MAX_STAGE_BYTES = 256 << 20
_STAGE_FILES = ("ttir", "ttgir", "llir", "amdgcn", "ptx")
_MLIR_DIAG = re.compile(rf"{re.escape(MODULE_FILE)}:(?P<line>\d+):(?P<col>\d+): (?P<sev>error|warning|note|remark): "
                        r"(?P<msg>.*)$")


@functools.lru_cache(maxsize=1)
def triton_version() -> str:
    """Installed triton's version from package metadata (no import of triton)."""
    try:
        return importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def gpu_target(target: str) -> dict[str, Any]:
    if is_amd(target):
        return {"backend": "hip", "arch": target, "warp_size": 64}
    return {"backend": "cuda", "arch": int(re.sub(r"\D", "", target)), "warp_size": 32}


def _child_env(workdir: Path) -> dict[str, str]:
    """What the compile child needs beyond the sandbox's allow-list (never the server's own environment)."""
    env = {"TRITON_CACHE_DIR": str(workdir / "triton_cache"),
           "TRITON_DEFAULT_FP_FUSION": os.environ.get("TRITON_DEFAULT_FP_FUSION", "1")}  # 3.9's default, stated
    for k in ("TRITON_HIP_LLD_PATH", "TRITON_PTXAS_PATH", "TRITON_INTERPRET"):
        if k in os.environ:
            env[k] = os.environ[k]
    return env


def mlir_diagnostics(stderr: str) -> list[Diagnostic]:
    """MLIR/LLVM messages that point into the user's module (`user_kernel.py:L:C: error: ...`)."""
    out = []
    for line in stderr.splitlines():
        if m := _MLIR_DIAG.search(line):
            out.append(Diagnostic(line=int(m["line"]), column=int(m["col"]), severity=m["sev"],
                                  message=m["msg"].strip()))
    return out


def _toolchain(versions: dict[str, str], target: str) -> ToolchainInfo:
    ver = versions.get("triton") or triton_version()
    if is_amd(target):
        detail = f"AMD LLVM {versions['amd_llvm']}" if "amd_llvm" in versions else "AMD LLVM (revision unknown)"
    else:
        detail = f"ptxas {versions.get('ptxas', '?')}"
    return ToolchainInfo(name="triton", version=f"{ver} ({detail})", path=versions.get("ptxas_path"))


async def compile_triton(source: str, kernel: str, target: str, *, signature: dict[str, str] | None,
                         constexprs: dict[str, Any] | None, options: CompileOptions, workdir: Path,
                         specialization: dict[str, str] | None = None) -> BackendOutput:
    """Run triton.compile in a child with the launch's specialization; diagnostics carry the user's lines."""
    (workdir / MODULE_FILE).write_text(source, encoding="utf-8")
    spec = CompileSpec(out_dir=str(workdir), module_path=str(workdir / MODULE_FILE), kernel=kernel,
                       signature=signature or {}, constexprs=constexprs or {}, target=gpu_target(target),
                       options=options.triton_options(), specialization=specialization or {})
    (workdir / "spec.json").write_text(spec.model_dump_json(), encoding="utf-8")
    argv = [sys.executable, "-m", "evokernel_mcp.compile.triton_child", str(workdir / "spec.json")]
    toolchain = ToolchainInfo(name="triton", version=triton_version())
    # the agent's module is imported by Triton: in the sandbox, like a candidate (runtime/sandbox.py)
    argv, env, _level = sandbox.tool_argv(argv, workdir, env=_child_env(workdir))
    try:
        res = await run_async(argv, timeout_s=options.timeout_s, cwd=workdir, env=env, tool="triton.compile")
    except ToolTimeout as e:
        return BackendOutput(ok=False, toolchain=toolchain, log=e.stderr_tail, diagnostics=[Diagnostic(
            message=f"triton.compile did not finish within {options.timeout_s:g} s and was killed (timeout); "
                    "reduce tile sizes/unrolling or raise options.timeout_s.")])
    link = sandbox.refuse_links(workdir)
    if link:
        return BackendOutput(ok=False, toolchain=toolchain, diagnostics=[Diagnostic(
            message=f"the compile left a symbolic link ({link}); refused")])
    try:
        raw = safefs.read_under(workdir, RESULT_FILE, MAX_RESULT_BYTES)
    except safefs.Missing:
        diags = mlir_diagnostics(res.stderr) or [Diagnostic(
            message=f"the Triton compiler crashed (exit code {res.returncode}): {tail(res.stderr, 1500)}")]
        return BackendOutput(ok=False, toolchain=toolchain, diagnostics=diags, log=res.stderr)
    except safefs.UnsafeFile as e:  # a result that is not a plain file: the user module's doing
        return _refused(toolchain, f"{RESULT_FILE}: {e}")
    try:
        data = ChildResult.model_validate_json(raw)
    except ValidationError as e:
        return _refused(toolchain, f"{RESULT_FILE} does not hold the compile child's result ({e.error_count()} "
                        "problems)")
    toolchain = _toolchain(data.versions, target)
    diags = data.diagnostics + mlir_diagnostics(res.stderr)
    log_text = data.log + res.stderr
    if not data.ok:
        return BackendOutput(ok=False, toolchain=toolchain, diagnostics=diags, log=log_text)
    try:
        return await _success(data, workdir, target, toolchain, diags, log_text, source)
    except safefs.UnsafeFile as e:
        return _refused(toolchain, str(e))


def _refused(toolchain: ToolchainInfo, why: str) -> BackendOutput:
    """The compile's workdir holds something the compile child does not write (the user's module, which runs
    there, can write anything): nothing of it is read or returned."""
    return BackendOutput(ok=False, toolchain=toolchain, diagnostics=[Diagnostic(
        message=f"the compile's output was tampered with: {why}; refused (nothing of it is returned)")])


def _stage(workdir: Path, data: ChildResult, ext: str, cap: int = MAX_STAGE_BYTES) -> bytes:
    """A stage file the child named: only `kernel.<ext>` directly in the workdir, as a regular file within cap."""
    name = data.files.get(ext)
    if name != f"kernel.{ext}":
        raise safefs.UnsafeFile(f"stage file {str(name)[:80]!r} for {ext!r} is not kernel.{ext}")
    return safefs.read_under(workdir, name, cap)


async def _success(data: ChildResult, workdir: Path, target: str, toolchain: ToolchainInfo,
                   diags: list[Diagnostic], log_text: str, source: str) -> BackendOutput:
    files = {"source.py": source, "compile.log": log_text}
    for ext in _STAGE_FILES:
        if ext in data.files:
            files[f"kernel.{ext}"] = _stage(workdir, data, ext).decode("utf-8", errors="replace")
    md = data.metadata
    name = str(md.get("name") or "kernel")
    facts: dict[str, int | str] = {f"triton_{k}": v for k, v in md.items()
                                   if k in ("shared", "num_warps", "warp_size") and isinstance(v, int)}
    if is_amd(target):
        binary = _stage(workdir, data, "hsaco")
        return BackendOutput(ok=True, toolchain=toolchain, diagnostics=diags, asm=files.get("kernel.amdgcn"),
                             binary=binary, files=files, resource_usage={name: facts}, log=log_text)
    binary = _stage(workdir, data, "cubin")
    with tempfile.TemporaryDirectory(prefix="cubin_", dir=sub_state_dir("compile_work")) as own:
        cubin = Path(own) / "kernel.cubin"  # our copy, in a dir no sandbox can write: what cuobjdump reads
        cubin.write_bytes(binary)
        sass, why = await cubin_sass(cubin)
        usage = await cubin_res_usage(cubin)
    if sass is None:
        diags.append(Diagnostic(severity="note", message=why or "no SASS"))
    resources = resources_from_logs(data.log, usage)
    resources.setdefault(name, {}).update(facts)
    return BackendOutput(ok=True, toolchain=toolchain, diagnostics=diags, asm=files.get("kernel.ptx"), sass=sass,
                         binary=binary, files=files, resource_usage=resources, log=log_text)
