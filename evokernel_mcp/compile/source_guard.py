"""What a HIP/CUDA source may pull in at compile time: its own scratch dir and the toolchain's headers.

The compiler runs sandboxed (runtime/sandbox.py: the state dir, homes and secrets are not visible), and on
top of that a source may not name a file by an absolute path or climb out with `..`, nor use computed
includes, `#embed`/`__has_embed` or an assembler `.incbin`: each could copy a file's bytes into the
diagnostics or the binary we return."""

from __future__ import annotations

import re

from evokernel_mcp.errors import BadInput

_INCLUDE = re.compile(r'^\s*#\s*(include|include_next|import)\b\s*(.*)$')
_FORBIDDEN = (
    (re.compile(r'^\s*#\s*embed\b', re.M), "#embed"),
    (re.compile(r'__has_embed|__has_include_next'), "__has_embed / __has_include_next"),
    (re.compile(r'\.incbin\b|\.incbin_?\w*'), "an assembler .incbin"),
)


def check_includes(source: str) -> None:
    """BadInput naming the line when the source reaches for a file outside its scratch dir and the toolchain."""
    for pat, what in _FORBIDDEN:
        m = pat.search(source)
        if m:
            line = source.count("\n", 0, m.start()) + 1
            raise BadInput(f"line {line}: {what} is not allowed (it would copy a file's bytes into the build)")
    for i, text in enumerate(source.splitlines(), 1):
        m = _INCLUDE.match(text)
        if not m:
            continue
        arg = m.group(2).strip()
        if not (arg.startswith('"') or arg.startswith("<")):
            raise BadInput(f"line {i}: computed #{m.group(1)} is not allowed; write the header name in quotes "
                           "or angle brackets")
        name = arg[1:].split('"' if arg.startswith('"') else ">", 1)[0]
        if name.startswith("/") or ".." in name.replace("\\", "/").split("/"):
            raise BadInput(f"line {i}: #{m.group(1)} {arg}: only headers of the toolchain or files next to the "
                           "source may be included (no absolute paths, no '..')")
