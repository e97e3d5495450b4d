"""Pure parser for `rocminfo` text (FORMATS.md section 1). Text in, RocminfoReport out, ParseError naming the
line on anything it cannot read. Accepts full outputs and partial agent blocks (published excerpts)."""

from __future__ import annotations

import re
from typing import Any

from evokernel_mcp.devices.models import RocmAgent, RocminfoReport, arch_of  # noqa: F401 - arch_of re-exported
from evokernel_mcp.errors import ParseError

TOOL = "rocminfo"
# Real escape sequences and the literal '^[[37m' text some published outputs carry.
_ANSI = re.compile(r"(?:\x1b|\^\[)\[[0-9;]*[A-Za-z]")
_INT = re.compile(r"^(\d+)(?:\(0x[0-9a-fA-F]+\))?$")
_SIZE = re.compile(r"^(\d+)(?:\(0x[0-9a-fA-F]+\))? ?KB$")
_AGENT = re.compile(r"^Agent (\d+)$")
_SUBBLOCK = re.compile(r"^(Pool|ISA) (\d+)$")
_DIM = re.compile(r"^[xyz]\s+\S+$")
_HEADER_LINES = re.compile(r"^(=+|\*+|HSA System Attributes|HSA Agents|\*\*\* Done \*\*\*|ROCk module.*)$")

# rocminfo key -> (RocmAgent field, kind)
_AGENT_KEYS: dict[str, tuple[str, str]] = {
    "Name": ("name", "str"),
    "Marketing Name": ("marketing_name", "str"),
    "Vendor Name": ("vendor_name", "str"),
    "Uuid": ("uuid", "str"),
    "Device Type": ("device_type", "str"),
    "Node": ("node", "int"),
    "BDFID": ("bdfid", "int"),
    "Chip ID": ("chip_id", "int"),
    "Compute Unit": ("compute_units", "int"),
    "SIMDs per CU": ("simds_per_cu", "int"),
    "Shader Engines": ("shader_engines", "int"),
    "Wavefront Size": ("wavefront_size", "int"),
    "Workgroup Max Size": ("workgroup_max_size", "int"),
    "Max Waves Per CU": ("max_waves_per_cu", "int"),
    "Max Work-item Per CU": ("max_workitems_per_cu", "int"),
    "Max Clock Freq. (MHz)": ("max_clock_mhz", "int"),
    "Cacheline Size": ("cacheline_bytes", "int"),
}
_CACHE_KEYS = {"L1": "l1_bytes", "L2": "l2_bytes", "L3": "l3_bytes"}
_SECTIONS = {"Cache Info": "cache", "Pool Info": "pool", "ISA Info": "isa"}


def clean_lines(text: str) -> list[str]:
    return [_ANSI.sub("", line).replace("\t", "    ").rstrip() for line in text.splitlines()]


def split_key(content: str) -> tuple[str, str] | None:
    """'Key:   value' -> (key, value). Handles 'Key:: v', 'Key:value' and keys with '.' and '()'."""
    if ":" not in content:
        return None
    key, _, value = content.partition(":")
    if value.startswith(":"):
        value = value[1:]
    return key.strip(), value.strip()


def _num(value: str, kind: str, lineno: int, key: str) -> int:
    m = (_SIZE if kind == "size" else _INT).match(value)
    if not m:
        want = "a size like '64(0x40) KB'" if kind == "size" else "an integer like '304' or '32(0x20)'"
        raise ParseError(TOOL, f"line {lineno}", message=f"{key!r} has value {value!r}, expected {want}")
    n = int(m.group(1))
    return n * 1024 if kind == "size" else n


class _AgentBuilder:
    """Collects one agent block line by line; sections: None (agent level), cache, pool, isa, dims."""

    def __init__(self, number: int | None, line: int):
        self.fields: dict[str, Any] = {"agent_number": number, "line": line, "isa_names": [], "key_lines": {}}
        self.section: str | None = None
        self.pools: list[dict[str, Any]] = []

    def feed(self, lineno: int, indent: int, content: str) -> None:
        sub = _SUBBLOCK.match(content)
        if sub:
            self.section = "pool" if sub.group(1) == "Pool" else "isa"
            if self.section == "pool":
                self.pools.append({})
            return
        kv = split_key(content)
        if kv is None:
            if _DIM.match(content):
                return
            raise ParseError(TOOL, f"line {lineno}", message=f"unexpected text {content[:60]!r} in an agent block")
        key, value = kv
        if indent <= 2:
            self._agent_key(lineno, key, value)
        elif self.section == "cache" and key in _CACHE_KEYS:
            self._set(_CACHE_KEYS[key], _num(value, "size", lineno, key), lineno)
        elif self.section == "pool":
            self._pool_key(lineno, key, value)
        elif self.section == "isa" and key == "Name" and value:
            self.fields["isa_names"].append(value)
            self.fields["key_lines"].setdefault("isa_names", lineno)

    def _set(self, field: str, value: Any, lineno: int) -> None:
        self.fields[field] = value
        self.fields["key_lines"][field] = lineno

    def _agent_key(self, lineno: int, key: str, value: str) -> None:
        if key in _SECTIONS and not value:
            self.section = _SECTIONS[key]
            return
        self.section = "dims" if not value else None
        spec = _AGENT_KEYS.get(key)
        if spec is None or (spec[0] in self.fields and key == "Name"):
            return
        field, kind = spec
        self._set(field, value if kind == "str" else _num(value, kind, lineno, key), lineno)

    def _pool_key(self, lineno: int, key: str, value: str) -> None:
        if not self.pools:  # excerpt that starts inside a pool without its 'Pool N' line
            self.pools.append({})
        pool = self.pools[-1]
        if key == "Segment":
            pool["segment"] = value.split(";")[0].strip().upper()
            pool["flags"] = value
        elif key == "Size":
            pool["size"] = _num(value, "size", lineno, key)
            pool["line"] = lineno

    def build(self) -> RocmAgent:
        for pool in self.pools:
            if "size" not in pool:
                continue
            if pool.get("segment") == "GROUP":
                self._set("lds_bytes_per_workgroup", pool["size"], pool["line"])
            elif pool.get("segment") == "GLOBAL" and pool["size"] > (self.fields.get("global_memory_bytes") or 0):
                self._set("global_memory_bytes", pool["size"], pool["line"])
        return RocmAgent(**self.fields)


def parse_rocminfo(text: str) -> RocminfoReport:
    """Parse `rocminfo` output (all agents, CPU ones included; `.gpus` filters). Raises ParseError."""
    lines = clean_lines(text)
    if not any(line.strip() for line in lines):
        raise ParseError(TOOL, "line 1", message="empty output")
    header: dict[str, str] = {}
    agents: list[RocmAgent] = []
    current: _AgentBuilder | None = None
    for lineno, raw in enumerate(lines, start=1):
        content = raw.strip()
        if not content:
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        m = _AGENT.match(content)
        if m and indent == 0:
            if current is not None:
                agents.append(current.build())
            current = _AgentBuilder(int(m.group(1)), lineno)
            continue
        if indent == 0 and _HEADER_LINES.match(content):
            if content.startswith("ROCk module"):
                ver = re.search(r"version (\S+)", content)
                header["rock"] = ver.group(1) if ver else ""
            continue
        if current is None and indent == 0:
            kv = split_key(content)
            if kv is None:
                raise ParseError(TOOL, f"line {lineno}", message=f"not rocminfo output: {content[:60]!r}")
            header.setdefault(kv[0], kv[1])
            continue
        if current is None:  # an excerpt: indented agent lines without an 'Agent N' header
            current = _AgentBuilder(None, lineno)
        current.feed(lineno, indent, content)
    if current is not None:
        agents.append(current.build())
    if not agents:
        raise ParseError(TOOL, f"line {len(lines)}", message="no HSA agent block found (output truncated?)")
    return RocminfoReport(rock_version=header.get("rock") or None, runtime_version=header.get("Runtime Version"),
                          agents=agents)
