"""Compiler messages -> Diagnostic models mapped to the user's source lines.

clang / hipcc / amdclang++: `file:line:col: error|warning|note|remark: message` (GNU style, the default).
nvcc (cudafe++ front end): `file.cu(12): error: message` (also `error #20:`), and ptxas:
`ptxas /tmp/x.ptx, line 23; error   : ...` / `ptxas fatal   : ...` (PTX lines, not the user's: line None).
Only messages whose file is the user's source get a line number; others keep line None and name the file.
"""

from __future__ import annotations

import os
import re

from evokernel_mcp.models import Diagnostic

_CLANG = re.compile(
    r"^(?P<file>.+?):(?P<line>\d+):(?:(?P<col>\d+):)? (?P<sev>fatal error|error|warning|note|remark): (?P<msg>.*)$")
_NVCC = re.compile(
    r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<sev>catastrophic error|error|warning|remark)(?: #\S+)?: (?P<msg>.*)$")
_PTXAS = re.compile(r"^ptxas (?:(?P<ptx>\S+), line (?P<line>\d+); )?(?P<sev>fatal|error|warning|info)\s*: (?P<msg>.*)$")
_NO_FILE = re.compile(r"^(?P<tool>[\w.+-]+): (?P<sev>fatal error|error|warning): (?P<msg>.*)$")

_SEVERITY = {"fatal error": "error", "catastrophic error": "error", "fatal": "error", "error": "error",
             "warning": "warning", "note": "note", "remark": "remark", "info": "note"}


def _same_file(path: str, source_path: str) -> bool:
    if path == source_path:
        return True
    try:
        return os.path.realpath(path) == os.path.realpath(source_path) or (
            os.path.basename(path) == os.path.basename(source_path) and not os.path.isabs(path))
    except (OSError, ValueError):
        return False


def _mapped(m: re.Match, source_path: str, line_offset: int) -> Diagnostic:
    sev = _SEVERITY[m.group("sev")]
    msg = m.group("msg").strip()
    col = m.groupdict().get("col")
    if _same_file(m.group("file"), source_path):
        line = int(m.group("line")) - line_offset
        if line >= 1:
            return Diagnostic(line=line, column=int(col) if col else None, severity=sev, message=msg)
    where = f"{m.group('file')}:{m.group('line')}" + (f":{col}" if col else "")
    return Diagnostic(line=None, column=None, severity=sev, message=f"{msg} (in {where})")


def parse_clang_diagnostics(stderr: str, source_path: str, line_offset: int = 0) -> list[Diagnostic]:
    """clang-style messages; lines in `source_path` are mapped (minus `line_offset`), others keep line None."""
    out: list[Diagnostic] = []
    for raw in stderr.splitlines():
        line = raw.rstrip()
        if m := _CLANG.match(line):
            out.append(_mapped(m, source_path, line_offset))
        elif m := _NO_FILE.match(line):
            out.append(Diagnostic(severity=_SEVERITY[m.group("sev")], message=f"{m.group('tool')}: {m.group('msg')}"))
    return out


def parse_nvcc_diagnostics(stderr: str, source_path: str, line_offset: int = 0) -> list[Diagnostic]:
    """nvcc/cudafe++ `file(line): error: msg` plus ptxas messages (which carry no source line)."""
    out: list[Diagnostic] = []
    for raw in stderr.splitlines():
        line = raw.rstrip()
        if m := _NVCC.match(line):
            out.append(_mapped(m, source_path, line_offset))
        elif m := _PTXAS.match(line):
            if m.group("sev") == "info":
                continue  # ptxas -v resource lines are facts, not diagnostics (read by the CUDA backend)
            where = f" (PTX line {m.group('line')})" if m.group("line") else ""
            out.append(Diagnostic(severity=_SEVERITY[m.group("sev")],
                                  message=f"ptxas: {m.group('msg').strip()}{where}"))
        elif m := _CLANG.match(line):  # host compiler (gcc/clang) messages in nvcc output
            out.append(_mapped(m, source_path, line_offset))
        elif m := _NO_FILE.match(line):
            out.append(Diagnostic(severity=_SEVERITY[m.group("sev")], message=f"{m.group('tool')}: {m.group('msg')}"))
    return out
