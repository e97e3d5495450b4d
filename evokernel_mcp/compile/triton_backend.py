"""Triton backend (runner): compiles in a child process (triton_child.py) with a hard time limit.

The user's module text is written to <workdir>/user_kernel.py and imported only in the child. For
NVIDIA targets the cubin is disassembled here (cuobjdump -sass) and its resources read from the
ptxas -v log Triton's ptxas run printed (plus cuobjdump -res-usage).
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from evokernel_mcp.compile.cuda_backend import cubin_res_usage, cubin_sass, resources_from_logs
from evokernel_mcp.compile.models import BackendOutput
from evokernel_mcp.compile.options import CompileOptions, is_amd
from evokernel_mcp.errors import ToolTimeout
from evokernel_mcp.models import Diagnostic, ToolchainInfo
from evokernel_mcp.runtime import sandbox
from evokernel_mcp.subproc import run_async, tail

MODULE_FILE = "user_kernel.py"
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
                         constexprs: dict[str, Any] | None, options: CompileOptions, workdir: Path) -> BackendOutput:
    """Run triton.compile in a child; diagnostics carry the user's line numbers."""
    (workdir / MODULE_FILE).write_text(source, encoding="utf-8")
    spec = {"out_dir": str(workdir), "module_path": str(workdir / MODULE_FILE), "kernel": kernel,
            "signature": signature or {}, "constexprs": constexprs or {}, "target": gpu_target(target),
            "options": options.triton_options()}
    (workdir / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
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
    result_file = workdir / "result.json"
    link = sandbox.refuse_links(workdir)
    if link:
        return BackendOutput(ok=False, toolchain=toolchain, diagnostics=[Diagnostic(
            message=f"the compile left a symbolic link ({link}); refused")])
    if not result_file.is_file():
        diags = mlir_diagnostics(res.stderr) or [Diagnostic(
            message=f"the Triton compiler crashed (exit code {res.returncode}): {tail(res.stderr, 1500)}")]
        return BackendOutput(ok=False, toolchain=toolchain, diagnostics=diags, log=res.stderr)
    data = json.loads(result_file.read_text(encoding="utf-8"))
    toolchain = _toolchain(data.get("versions") or {}, target)
    diags = [Diagnostic(**d) for d in data["diagnostics"]] + mlir_diagnostics(res.stderr)
    log_text = (data.get("log") or "") + res.stderr
    if not data["ok"]:
        return BackendOutput(ok=False, toolchain=toolchain, diagnostics=diags, log=log_text)
    return await _success(data, workdir, target, toolchain, diags, log_text, source)


async def _success(data: dict, workdir: Path, target: str, toolchain: ToolchainInfo, diags: list[Diagnostic],
                   log_text: str, source: str) -> BackendOutput:
    files = {"source.py": source, "compile.log": log_text}
    for ext in _STAGE_FILES:
        if ext in data["files"]:
            files[f"kernel.{ext}"] = (workdir / data["files"][ext]).read_text(encoding="utf-8")
    md = data["metadata"]
    name = md.get("name") or "kernel"
    facts: dict[str, int | str] = {f"triton_{k}": v for k, v in md.items()
                                   if k in ("shared", "num_warps", "warp_size") and isinstance(v, int)}
    if is_amd(target):
        binary = (workdir / data["files"]["hsaco"]).read_bytes()
        return BackendOutput(ok=True, toolchain=toolchain, diagnostics=diags, asm=files.get("kernel.amdgcn"),
                             binary=binary, files=files, resource_usage={name: facts}, log=log_text)
    cubin = workdir / data["files"]["cubin"]
    sass, why = await cubin_sass(cubin)
    if sass is None:
        diags.append(Diagnostic(severity="note", message=why or "no SASS"))
    resources = resources_from_logs(data.get("log") or "", await cubin_res_usage(cubin))
    resources.setdefault(name, {}).update(facts)
    return BackendOutput(ok=True, toolchain=toolchain, diagnostics=diags, asm=files.get("kernel.ptx"), sass=sass,
                         binary=cubin.read_bytes(), files=files, resource_usage=resources, log=log_text)
