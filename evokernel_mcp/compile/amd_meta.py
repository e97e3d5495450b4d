"""AMDGPU code-object metadata: the `.amdgpu_metadata` YAML of AMDGCN assembly, the NT_AMDGPU_METADATA note
printed by `llvm-readelf --notes` / `llvm-readobj --notes`.

Formats: tests/fixtures/rocm/FORMATS.md §5.1. On gfx90a/gfx942/gfx950 `.vgpr_count` is the unified VGPR+AGPR total
(align(arch_vgprs, 4) + agprs).
"""

from __future__ import annotations

import re

import yaml
from pydantic import Field

from evokernel_mcp.errors import ParseError
from evokernel_mcp.models import Model


class AmdKernelMeta(Model):
    name: str
    symbol: str | None = None
    target: str | None = Field(default=None, description="amdhsa.target, e.g. amdgcn-amd-amdhsa--gfx942.")
    vgpr_count: int | None = Field(default=None, description="Unified VGPR+AGPR count on gfx90a+.")
    agpr_count: int | None = None
    sgpr_count: int | None = None
    vgpr_spill_count: int | None = None
    sgpr_spill_count: int | None = None
    group_segment_fixed_size: int | None = Field(default=None, description="Static LDS bytes per workgroup.")
    private_segment_fixed_size: int | None = Field(default=None, description="Scratch bytes per lane.")
    max_flat_workgroup_size: int | None = None
    reqd_workgroup_size: list[int] | None = None
    wavefront_size: int | None = None
    uses_dynamic_stack: bool | None = None
    kernarg_segment_size: int | None = None


_INT_FIELDS = ("vgpr_count", "agpr_count", "sgpr_count", "vgpr_spill_count", "sgpr_spill_count",
               "group_segment_fixed_size", "private_segment_fixed_size", "max_flat_workgroup_size",
               "wavefront_size", "kernarg_segment_size")

_ASM_BLOCK = re.compile(r"^\s*\.amdgpu_metadata\s*$(?P<body>.*?)^\s*\.end_amdgpu_metadata\s*$", re.M | re.S)
_NOTE_START = re.compile(r"^.*AMDGPU Metadata:\s*(?:---)?\s*$", re.M)


def _yaml_block(text: str) -> tuple[str, str]:
    """Return (yaml text, where) from assembly or readelf/readobj notes output."""
    if m := _ASM_BLOCK.search(text):
        return m.group("body"), ".amdgpu_metadata block"
    if re.search(r"^\s*\.amdgpu_metadata\s*$", text, re.M):
        raise ParseError("amdgpu metadata", ".amdgpu_metadata block", message="no .end_amdgpu_metadata (truncated?)")
    if m := _NOTE_START.search(text):
        rest = text[m.end():]
        head = m.group(0).rstrip()
        if not head.endswith("---"):  # GNU style: '---' on its own (indented) line
            rest = re.sub(r"^\s*---\s*$", "", rest, count=1, flags=re.M)
        end = re.search(r"^\s*\.\.\.\s*$", rest, re.M)
        if end is None:
            raise ParseError("llvm-readelf --notes", "NT_AMDGPU_METADATA",
                             message="no '...' ending the YAML (truncated?)")
        return rest[:end.start()], "NT_AMDGPU_METADATA note"
    raise ParseError("amdgpu metadata", "start",
                     message="neither an .amdgpu_metadata block nor an 'AMDGPU Metadata:' note")


def parse_amdgpu_metadata(text: str) -> list[AmdKernelMeta]:
    """Kernels described by the code object's metadata YAML (assembly block or notes dump)."""
    body, where = _yaml_block(text)
    try:
        doc = yaml.safe_load(body)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f"{where}, YAML line {mark.line + 1}" if mark else where
        raise ParseError("amdgpu metadata", at, message=str(getattr(e, "problem", e))) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("amdhsa.kernels"), list):
        raise ParseError("amdgpu metadata", where, message="no amdhsa.kernels list")
    target = doc.get("amdhsa.target")
    out = []
    for i, k in enumerate(doc["amdhsa.kernels"]):
        if not isinstance(k, dict) or ".name" not in k:
            raise ParseError("amdgpu metadata", f"{where}, amdhsa.kernels[{i}]", message="kernel without .name")
        vals = {f: int(k["." + f]) for f in _INT_FIELDS if isinstance(k.get("." + f), int)}
        out.append(AmdKernelMeta(
            name=str(k[".name"]), symbol=k.get(".symbol"), target=target,
            uses_dynamic_stack=k.get(".uses_dynamic_stack"), reqd_workgroup_size=k.get(".reqd_workgroup_size"),
            **vals))
    return out
