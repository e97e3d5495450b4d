"""What a HIP/CUDA source may pull in at compile time: its own scratch dir and the toolchain's headers.

The compiler runs sandboxed (runtime/sandbox.py: the state dir, homes and secrets are not visible), and on
top of that a source may not name a file by an absolute path or climb out with `..`, nor use computed
includes, `#embed`/`__has_embed` or an assembler `.incbin`: each could copy a file's bytes into the
diagnostics or the binary we return.

The check does not read directives with a line regex (`%:include`, `#/**/include` and a backslash-newline
splice all spell `#include`). It asks clang-19 twice:
1. its raw lexer (`-cc1 -dump-raw-tokens`: digraphs, comments and splices resolved, no macro expanded, no
   conditional evaluated, no file opened) for every directive in the text, taken or not: an include must
   name a header in quotes or angle brackets, with no absolute path and no '..';
2. its preprocessor's dependency list (`-M -MG`, in the sandbox, with the source's -D flags): every file the
   preprocessor would open must lie in the source's own dir or the toolchain's include dirs.
Without clang-19 on the host, the first check falls back to the text itself (directives at the start of a line).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from evokernel_mcp.errors import BadInput

_DIRECTIVES = {"include", "include_next", "import", "embed"}
_FORBIDDEN_IDS = {"__has_embed": "__has_embed", "__has_include_next": "__has_include_next",
                  "incbin": "an assembler .incbin"}
# one token of -dump-raw-tokens: kind 'spelling'<TAB>[flags]<TAB>Loc=<file:line:col> (a spelling may span lines)
_TOKEN = re.compile(r"^(?P<kind>\w+) '(?P<spell>.*?)'\t(?P<flags>[^\t]*)\tLoc=<(?P<loc>[^>]*)>$",
                    re.MULTILINE | re.DOTALL)
_INCBIN = re.compile(r"\.?incbin", re.IGNORECASE)
_FALLBACK_INCLUDE = re.compile(r'^\s*(?:#|%:|\?\?=)\s*(include|include_next|import)\b\s*(.*)$')
LEX_TIMEOUT_S = 30.0


def _clang() -> str | None:
    from evokernel_mcp.compile.hip_offline import resolve_clang19

    try:
        return resolve_clang19()
    except Exception:  # noqa: BLE001 - no clang-19 here: the text fallback
        return None


def _line(loc: str) -> int | None:
    parts = loc.rsplit(":", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


def _refuse(line: int | None, what: str) -> BadInput:
    return BadInput(f"line {line if line is not None else '?'}: {what}")


def raw_tokens(source: str) -> list[tuple[str, str, bool, int | None]]:
    """(kind, spelling without splices, at start of line, line) of each token clang's raw lexer finds, comments
    and whitespace left out; [] without clang-19."""
    from evokernel_mcp.subproc import run_sync

    clang = _clang()
    if clang is None:
        return []
    with tempfile.TemporaryDirectory(prefix="lex_") as d:
        src = Path(d) / "kernel.cpp"
        src.write_text(source, encoding="utf-8")
        # the raw lexer opens no file but the one it is given and runs nothing of it
        res = run_sync([clang, "-cc1", "-dump-raw-tokens", "-x", "c++", "-std=c++20", str(src)],
                       timeout_s=LEX_TIMEOUT_S, tool="clang-19 (lexer)")
    out, sol = [], False
    for m in _TOKEN.finditer(res.stdout + res.stderr):
        kind = m["kind"]
        if kind in ("comment", "unknown"):  # whitespace first on a line hands the line's start to what follows
            sol = sol or "StartOfLine" in m["flags"]
            continue
        spell = m["spell"].replace("\\\r\n", "").replace("\\\n", "")
        out.append((kind, spell, sol or "StartOfLine" in m["flags"], _line(m["loc"])))
        sol = False
    return out


def _check_tokens(tokens: list[tuple[str, str, bool, int | None]]) -> None:
    strings: list[str] = []
    for i, (kind, spell, sol, line) in enumerate(tokens):
        if kind == "string_literal":
            strings.append(spell)
            if _INCBIN.search("".join(s.strip('"') for s in strings)):
                raise _refuse(line, "an assembler .incbin is not allowed (it would copy a file's bytes into the build)")
            continue
        strings = []
        if kind == "raw_identifier" and spell in _FORBIDDEN_IDS:
            raise _refuse(line, f"{_FORBIDDEN_IDS[spell]} is not allowed (it would copy a file's bytes into the build)")
        if kind == "hash" and sol and i + 1 < len(tokens) and tokens[i + 1][0] == "raw_identifier" \
                and tokens[i + 1][1] in _DIRECTIVES:
            _check_directive(tokens[i + 1][1], tokens[i + 2:], line)


def _check_directive(name: str, rest: list[tuple[str, str, bool, int | None]], line: int | None) -> None:
    if name == "embed":
        raise _refuse(line, "#embed is not allowed (it would copy a file's bytes into the build)")
    arg = rest[0] if rest and not rest[0][2] else None
    if arg is not None and arg[0] == "string_literal" and arg[1].startswith('"'):
        header = arg[1][1:-1]
    elif arg is not None and arg[0] == "less":
        parts = []
        for kind, spell, sol, _ln in rest[1:]:
            if sol or kind == "greater":
                break
            parts.append(spell)
        header = "".join(parts)
    else:
        raise _refuse(line, f"computed #{name} is not allowed; write the header name in quotes or angle brackets")
    _check_header(name, header, line)


def _check_header(name: str, header: str, line: int | None) -> None:
    if header.startswith("/") or ".." in header.replace("\\", "/").split("/"):
        raise _refuse(line, f"#{name} {header!r}: only headers of the toolchain or files next to the source may be "
                      "included (no absolute paths, no '..')")


def _check_text(source: str) -> None:
    """Without clang-19: directives at the start of a line, after splices are joined."""
    text = source.replace("\\\r\n", "").replace("\\\n", "")
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.DOTALL)
    for i, row in enumerate(text.splitlines(), 1):
        if re.match(r"^\s*(?:#|%:|\?\?=)\s*embed\b", row):
            raise _refuse(i, "#embed is not allowed (it would copy a file's bytes into the build)")
        m = _FALLBACK_INCLUDE.match(row)
        if not m:
            continue
        arg = m.group(2).strip()
        if not arg.startswith(('"', "<")):
            raise _refuse(i, f"computed #{m.group(1)} is not allowed; write the header name in quotes or angle "
                          "brackets")
        _check_header(m.group(1), arg[1:].split('"' if arg.startswith('"') else ">", 1)[0], i)
    for ident, what in _FORBIDDEN_IDS.items():
        if ident in text:
            raise _refuse(None, f"{what} is not allowed (it would copy a file's bytes into the build)")


def check_includes(source: str) -> None:
    """BadInput naming the line when the source reaches for a file outside its scratch dir and the toolchain,
    whatever the spelling of the directive and whether or not a conditional hides it."""
    tokens = raw_tokens(source)
    if tokens:
        _check_tokens(tokens)
    else:
        _check_text(source)


def dependencies(source: str, language: str, flags: list[str]) -> list[str] | None:
    """The files clang-19's preprocessor opens for the source (-M -MG: a header it cannot find is listed by its
    spelled name), run in the sandbox; None without clang-19 or when the preprocessor fails."""
    from evokernel_mcp.paths import sub_state_dir
    from evokernel_mcp.runtime import safefs, sandbox
    from evokernel_mcp.subproc import run_sync

    clang = _clang()
    if clang is None:
        return None
    mode = (["-x", "hip", "--cuda-device-only", "-nogpuinc", "-nogpulib", "--offload-arch=gfx942"] if language == "hip"
            else ["-x", "cuda", "--cuda-device-only", "-nocudainc", "-nocudalib", "--cuda-gpu-arch=sm_90"])
    defines = [f for f in flags if f.startswith(("-D", "-U"))]
    work = Path(tempfile.mkdtemp(prefix="deps_", dir=sub_state_dir("compile_work")))
    try:
        src = work / ("kernel.hip" if language == "hip" else "kernel.cu")
        src.write_text(source, encoding="utf-8")
        argv = [clang, *mode, *defines, "-M", "-MG", "-MF", str(work / "deps.d"), str(src)]
        wrapped, env, _level = sandbox.tool_argv(argv, work)
        res = run_sync(wrapped, timeout_s=LEX_TIMEOUT_S, cwd=work, env=env, tool="clang-19 (dependencies)")
        if res.returncode != 0:
            return None
        try:
            text = safefs.read_under(work, "deps.d", 4 << 20).decode("utf-8", errors="replace")
        except safefs.UnsafeFile:
            return None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    body = text.replace("\\\n", " ").split(":", 1)[-1]
    deps = [d.replace("\\ ", " ") for d in re.split(r"(?<!\\)\s+", body) if d.strip()]
    return deps[1:]  # the first one is the source itself


def check_dependencies(source: str, language: str, flags: list[str], allowed: list[str] | None = None) -> None:
    """BadInput when the preprocessor would open a file outside the toolchain's include dirs (clang's own
    resource dir and the system include dirs, plus `allowed`); a header it cannot find (a relative name, the
    toolchain's own) passes: the real compile resolves it in its own include dirs, inside the sandbox."""
    deps = dependencies(source, language, flags)
    if deps is None:
        return
    roots = [*(allowed or []), "/usr/include", "/usr/local/include", "/usr/lib/llvm-19/lib/clang",
             "/usr/lib/clang", "/usr/lib/gcc", "/opt/rocm", "/usr/local/cuda"]
    for d in deps:
        if not os.path.isabs(d):
            _check_header("include", d, None)
            continue
        real = os.path.realpath(d)
        if not any(real == r or real.startswith(r.rstrip("/") + "/") for r in roots):
            raise _refuse(None, f"the source includes {d!r}, outside the toolchain's include dirs: not allowed")
