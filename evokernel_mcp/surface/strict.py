"""Strict arguments: a name the tool does not take is an error that names the closest valid one.

Checked against the tool's input schema as listed (so it covers every tool, also ones added later, and
nested objects such as compile_kernel's `options` or verify's `tolerance`), before pydantic validation,
which on its own ignores unknown keys. Pydantic's own errors are rewritten in one line per argument.
"""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import ValidationError

from evokernel_mcp.errors import BadInput


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    for _ in range(10):
        ref = schema.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#/$defs/"):
            return schema
        schema = root.get("$defs", {}).get(ref.split("/")[-1], {})
    return schema


def _objects(schema: dict[str, Any], root: dict[str, Any]) -> list[dict[str, Any]]:
    """The object schemas a value may match (through $ref and anyOf)."""
    s = _resolve(schema, root)
    if "anyOf" in s or "oneOf" in s:
        out: list[dict[str, Any]] = []
        for b in s.get("anyOf", []) + s.get("oneOf", []):
            out += _objects(b, root)
        return out
    return [s] if s.get("type") == "object" and "properties" in s else []


def suggest(name: str, valid: list[str]) -> str | None:
    """The closest valid name (difflib), also for a canonical name hidden in a longer one."""
    close = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
    if close:
        return close[0]
    low = name.lower()
    for v in valid:
        if v in low or low in v:
            return v
    return None


def _unknown(where: str, name: str, valid: list[str], tool: str) -> BadInput:
    hint = suggest(name, valid)
    did = f" Did you mean '{hint}'?" if hint else ""
    msg = (f"{tool}: unknown argument '{where}{name}'.{did} Valid: {', '.join(sorted(valid))}.")
    call = f"{tool}({where}{hint}=...)" if hint else f"{tool} with the arguments in its input schema"
    return BadInput(msg, next_call=call)


def check_arguments(tool: str, args: dict[str, Any], schema: dict[str, Any]) -> None:
    """Raise BadInput for the first unknown argument (top level, then nested objects)."""
    _check(tool, args, schema, schema, "")


def _check(tool: str, value: Any, schema: dict[str, Any], root: dict[str, Any], where: str) -> None:
    if isinstance(value, list):
        s = _resolve(schema, root)
        items = s.get("items")
        if isinstance(items, dict):
            for i, v in enumerate(value):
                _check(tool, v, items, root, f"{where.rstrip('.')}[{i}].")
        return
    if not isinstance(value, dict):
        return
    objs = _objects(schema, root)
    if not objs:
        return
    closed = [o for o in objs if o.get("additionalProperties") is False or o is root]
    if len(closed) != len(objs):
        return  # some branch takes any key
    valid = sorted({k for o in objs for k in o["properties"]})
    for key in value:
        if key not in valid:
            raise _unknown(where, key, valid, tool)
    for key, v in value.items():
        for o in objs:
            if key in o["properties"]:
                _check(tool, v, o["properties"][key], root, f"{where}{key}.")
                break


def format_validation_error(tool: str, exc: ValidationError) -> BadInput:
    """One line per bad argument: where, what pydantic wanted, and what it got (cut short)."""
    parts = []
    fields = []
    for err in exc.errors()[:6]:
        loc = ".".join(str(p) for p in err.get("loc", ()) if not str(p).endswith("]"))
        fields.append(loc.split(".")[0])
        got = err.get("input")
        shown = repr(got)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        msg = err.get("msg", "invalid")
        parts.append(f"'{loc}': {msg}" + ("" if err.get("type") == "missing" else f" (got {shown})"))
    first = fields[0] if fields else ""
    return BadInput(f"{tool}: bad argument " + "; ".join(parts) + ".",
                    next_call=f"{tool} with a valid '{first}' (see its input schema)")
