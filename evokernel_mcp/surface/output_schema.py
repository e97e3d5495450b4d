"""Output schemas: the full one (evokernel://tools/{name}) and the compact one listed in tools/list.

tools/list is fetched by every client on connect (and again on every list_changed), so the listed output
schema says only what a client needs to read a result: every field's name at every depth, the JSON type
of the top-level fields, and the required top-level fields of a tool that always answers in full. Left
out there, kept in the full schema: descriptions, titles, defaults, enums, nested types, `required` below
the top level. An object type used in more than one place is written once under `$defs` (refs resolve
inside one schema: the SDK's client validates with an empty registry). The pieces every result shares
(provenance, trimmed, job) are described once, in the server instructions (schema.RESULT_GLOSSARY).

Both schemas admit what shaping produces: a nullable field may be absent (nulls are omitted), a long
tool's result may be a job handle (nothing required), any result may carry `trimmed`.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

from evokernel_mcp.models import JobHandle, Truncation

# Shared by every result (or every long tool's): typed at the top level, their fields in RESULT_GLOSSARY.
COMMON_DEFS = frozenset({"Provenance", "Truncation", "JobHandle"})


# ---------------------------------------------------------------- the full schema
def _admits_null(s: dict[str, Any]) -> bool:
    if s.get("type") == "null" or (isinstance(s.get("type"), list) and "null" in s["type"]):
        return True
    return any(_admits_null(b) for b in s.get("anyOf", []) + s.get("oneOf", []) if isinstance(b, dict))


def _relax_required(schema: Any) -> None:
    """A property whose schema admits null is not required (shaping omits nulls)."""
    if isinstance(schema, list):
        for x in schema:
            _relax_required(x)
        return
    if not isinstance(schema, dict):
        return
    req, props = schema.get("required"), schema.get("properties")
    if isinstance(req, list) and isinstance(props, dict):
        keep = [r for r in req if not _admits_null(props.get(r, {}))]
        if keep:
            schema["required"] = keep
        else:
            schema.pop("required")
    for v in schema.values():
        if isinstance(v, dict | list):
            _relax_required(v)


def full_output_schema(raw: dict[str, Any] | None, long: bool) -> dict[str, Any] | None:
    """The tool's output schema with descriptions, admitting what shaping produces (module doc)."""
    from evokernel_mcp.surface.schema import compact_schema

    if raw is None:
        return None
    schema = copy.deepcopy(raw)
    defs = schema.setdefault("$defs", {})
    _relax_required(schema)
    props = schema.setdefault("properties", {})
    defs["Truncation"] = compact_schema(Truncation.model_json_schema(), shorten=False)
    props["trimmed"] = {"$ref": "#/$defs/Truncation"}
    if long:
        schema.pop("required", None)  # while the job runs, only the handle is there
        defs["JobHandle"] = compact_schema(JobHandle.model_json_schema(), shorten=False)
        props["job"] = {"$ref": "#/$defs/JobHandle"}
        props.setdefault("job_id", {"type": "string"})
        props.setdefault("state", {"type": "string"})
        props.setdefault("message", {"type": "string"})
    return schema


# ---------------------------------------------------------------- the listed (compact) schema
def _ref_counts(node: Any, counts: Counter) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            counts[ref.rsplit("/", 1)[-1]] += 1
        for v in node.values():
            _ref_counts(v, counts)
    elif isinstance(node, list):
        for v in node:
            _ref_counts(v, counts)


class _Compactor:
    def __init__(self, schema: dict[str, Any]) -> None:
        self.defs: dict[str, Any] = schema.get("$defs", {})
        counts: Counter = Counter()
        _ref_counts(schema, counts)
        self.shared = {k for k, n in counts.items() if n > 1 and k in self.defs and k not in COMMON_DEFS}
        self.used: set[str] = set()

    def node(self, s: Any, typed: bool, seen: tuple[str, ...] = ()) -> dict[str, Any]:
        """Names at every depth; the JSON type only where `typed` (the top level)."""
        if not isinstance(s, dict):
            return {}
        branches = s.get("anyOf") or s.get("oneOf")
        if branches:
            kept = [b for b in branches if not (isinstance(b, dict) and b.get("type") == "null")]
            if len(kept) == 1:
                return self.node(kept[0], typed, seen)
            nodes = [self.node(b, typed, seen) for b in kept]
            if all(set(n) <= {"type"} for n in nodes):  # plain types only: one "type" list (or nothing)
                if not typed or not all("type" in n for n in nodes):
                    return {}
                types = sorted({t for n in nodes for t in (n["type"] if isinstance(n["type"], list) else [n["type"]])})
                return {"type": types[0] if len(types) == 1 else types}
            return {"anyOf": nodes}
        ref = s.get("$ref")
        if isinstance(ref, str):
            name = ref.rsplit("/", 1)[-1]
            target = self.defs.get(name, {})
            if name in COMMON_DEFS or name in seen:
                return {"type": "object"} if typed else {}
            if name in self.shared:
                self.used.add(name)
                return {"type": "object", "$ref": f"#/$defs/{name}"} if typed else {"$ref": f"#/$defs/{name}"}
            return self.node(target, typed, seen + (name,))
        t = s.get("type")
        if "properties" in s:
            out = {"properties": {k: self.node(v, False, seen) for k, v in s["properties"].items()}}
            return {"type": "object", **out} if typed else out
        if t == "array":
            items = s.get("items") or (s.get("prefixItems") or [None])[0]
            inner = self.node(items, False, seen) if items else {}
            out = {"items": inner} if inner else {}
            return {"type": "array", **out} if typed else out
        if t == "object" and isinstance(s.get("additionalProperties"), dict):
            inner = self.node(s["additionalProperties"], False, seen)
            out = {"additionalProperties": inner} if inner else {}
            return {"type": "object", **out} if typed else out
        if isinstance(t, list):
            t = [x for x in t if x != "null"]
            t = t[0] if len(t) == 1 else t
        return {"type": t} if typed and t else {}


def listed_output_schema(full: dict[str, Any] | None, long: bool) -> dict[str, Any] | None:
    """The compact schema of tools/list (module doc), from the full one."""
    if full is None:
        return None
    from evokernel_mcp.surface.shaping import EMPTY_DROPPED

    c = _Compactor(full)
    out: dict[str, Any] = {"type": "object",
                           "properties": {k: c.node(v, True) for k, v in full.get("properties", {}).items()}}
    req = [r for r in full.get("required", []) if not long and r not in EMPTY_DROPPED]
    if req:
        out["required"] = req
    defs: dict[str, Any] = {}
    done: set[str] = set()
    while c.used - done:  # shared defs, and the shared defs they use in turn
        name = sorted(c.used - done)[0]
        done.add(name)
        defs[name] = c.node(c.defs[name], False, (name,))
    if defs:
        out["$defs"] = defs
    return out
