"""NVIDIA per-kernel resource usage: parsers for `ptxas -v` (nvcc -Xptxas -v, or Triton's ptxas log)
and `cuobjdump -res-usage`. Pure functions text -> models.

ptxas -v (CUDA 12.x/13.x), per entry function:
    ptxas info    : Compiling entry function 'spilly' for 'sm_90'
    ptxas info    : Function properties for spilly
        1120 bytes stack frame, 2212 bytes spill stores, 2328 bytes spill loads
    ptxas info    : Used 32 registers, used 0 barriers, 1120 bytes cumulative stack size
(optional pieces of the `Used` line: `N bytes smem`, `N bytes cmem[0]`, `N bytes lmem`).
The prefix is the tool's name (`ptxas`, `ptxas-blackwell`).

cuobjdump -res-usage:
     Function spilly:
      REG:32 STACK:1120 SHARED:0 LOCAL:0 CONSTANT[0]:548 TEXTURE:0 SURFACE:0 SAMPLER:0
"""

from __future__ import annotations

import re

from evokernel_mcp.errors import ParseError
from evokernel_mcp.models import Model


class NvKernelResources(Model):
    name: str
    registers: int | None = None
    barriers: int | None = None
    shared_bytes: int | None = None
    local_bytes: int | None = None
    stack_frame_bytes: int | None = None
    spill_stores_bytes: int | None = None
    spill_loads_bytes: int | None = None
    constant_bytes: int | None = None
    source: str


_ENTRY = re.compile(r"^\S*ptxas\S*\s+info\s*:\s*Compiling entry function '(?P<name>[^']+)' for '(?P<arch>\w+)'")
_PROPS = re.compile(r"^\s*(?P<stack>\d+) bytes stack frame, (?P<st>\d+) bytes spill stores, (?P<ld>\d+) bytes spill loads")
_USED = re.compile(r"^\S*ptxas\S*\s+info\s*:\s*Used (?P<regs>\d+) registers(?P<rest>.*)$")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")
_LMEM = re.compile(r"(\d+) bytes lmem")
_CMEM = re.compile(r"(\d+) bytes cmem\[0\]")


def parse_ptxas_verbose(text: str) -> list[NvKernelResources]:
    """Per entry function resources from `ptxas -v` output; [] if there are no entries."""
    out: list[NvKernelResources] = []
    cur: dict | None = None
    for line in text.splitlines():
        if m := _ENTRY.match(line):
            if cur is not None:
                out.append(NvKernelResources(**cur))
            cur = {"name": m["name"], "source": "ptxas -v"}
        elif cur is not None and (m := _PROPS.match(line)):
            cur.update(stack_frame_bytes=int(m["stack"]), spill_stores_bytes=int(m["st"]),
                       spill_loads_bytes=int(m["ld"]))
        elif cur is not None and (m := _USED.match(line)):
            rest = m["rest"]
            cur["registers"] = int(m["regs"])
            for key, rx in (("barriers", _BARRIERS), ("shared_bytes", _SMEM), ("local_bytes", _LMEM),
                            ("constant_bytes", _CMEM)):
                if mm := rx.search(rest):
                    cur[key] = int(mm.group(1))
            cur.setdefault("shared_bytes", 0)  # ptxas omits 'smem' when the kernel has none
    if cur is not None:
        if "registers" not in cur:
            raise ParseError("ptxas -v", f"entry {cur['name']!r}", message="no 'Used N registers' line (truncated?)")
        out.append(NvKernelResources(**cur))
    return out


_FUNC = re.compile(r"^\s*Function (?P<name>\S+?):\s*$")
_FIELD = re.compile(r"(?P<key>[A-Z]+(?:\[\d+\])?):(?P<val>\d+)")


def parse_cuobjdump_res_usage(text: str) -> list[NvKernelResources]:
    """Per function resources from `cuobjdump -res-usage`; raises ParseError on a function without numbers."""
    out: list[NvKernelResources] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = _FUNC.match(line)
        if not m:
            continue
        fields = {f["key"]: int(f["val"]) for f in _FIELD.finditer(lines[i + 1] if i + 1 < len(lines) else "")}
        if "REG" not in fields:
            raise ParseError("cuobjdump -res-usage", f"function {m['name']!r}", message="no REG:... line after it")
        out.append(NvKernelResources(
            name=m["name"], registers=fields["REG"], stack_frame_bytes=fields.get("STACK"),
            shared_bytes=fields.get("SHARED"), local_bytes=fields.get("LOCAL"),
            constant_bytes=fields.get("CONSTANT[0]"), source="cuobjdump -res-usage"))
    return out
