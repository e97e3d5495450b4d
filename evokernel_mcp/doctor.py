"""`evokernel-mcp doctor`: which toolchains are here, their versions, and what a missing one disables."""

from __future__ import annotations

import importlib
import importlib.metadata

from evokernel_mcp import executables
from evokernel_mcp.models import Model
from evokernel_mcp.subproc import probe_version


class ToolStatus(Model):
    name: str
    found: bool
    version: str | None = None
    path: str | None = None
    disables: str | None = None


PY_MODULES = [
    ("torch", "verify_vs_pytorch, benchmark (references run in PyTorch)"),
    ("triton", "compile_kernel language='triton' and Triton candidates"),
]


def _version_line(path: str, args: tuple[str, ...]) -> str | None:
    v = probe_version(path, args)
    return v[:160] if v else None


def check_toolchains() -> list[ToolStatus]:
    """Each executable as the tools find it (executables.find), then the Python modules."""
    out: list[ToolStatus] = []
    for key, e in executables.EXECUTABLES.items():
        path = executables.find(key)
        if path:
            out.append(ToolStatus(name=key, found=True, path=path, version=_version_line(path, e.version_args)))
        else:
            out.append(ToolStatus(name=key, found=False, disables=e.disables))
    for mod, disables in PY_MODULES:
        try:
            version = importlib.metadata.version(mod)
            out.append(ToolStatus(name=mod, found=True, version=version))
        except importlib.metadata.PackageNotFoundError:
            out.append(ToolStatus(name=mod, found=False, disables=disables))
    return out
