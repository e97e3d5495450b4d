"""The messages of the Triton compile child (triton_child.py): the spec the server writes to spec.json and the
result the child writes to result.json. The user's module runs in that process and may rewrite result.json at
exit: the server validates it against ChildResult and reads stage files only as kernel.<ext> in the workdir.
Only pydantic and evokernel_mcp.models are imported here, so the child still starts fast."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from evokernel_mcp.models import Diagnostic, Model


class GpuTarget(Model):
    backend: Literal["hip", "cuda"]
    arch: str | int = Field(description="gfx name (hip) or SM number (cuda).")
    warp_size: int


class CompileSpec(Model):
    """What the compile child compiles: the module file, the kernel and its launch specialization."""

    out_dir: str
    module_path: str
    kernel: str
    signature: dict[str, str] = Field(default_factory=dict)
    constexprs: dict[str, Any] = Field(default_factory=dict)
    target: GpuTarget
    options: dict[str, Any] = Field(default_factory=dict)
    specialization: dict[str, str] = Field(default_factory=dict)


class ChildResult(Model):
    """What triton_child.py writes to result.json (checked field by field in the server)."""

    ok: bool
    diagnostics: list[Diagnostic] = Field(default_factory=list, max_length=1000)
    files: dict[str, str] = Field(default_factory=dict, max_length=32)
    metadata: dict[str, Any] = Field(default_factory=dict, max_length=64)
    log: str = Field(default="", max_length=1 << 20)
    versions: dict[str, str] = Field(default_factory=dict, max_length=16)
