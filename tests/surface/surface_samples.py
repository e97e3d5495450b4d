"""Helpers for the surface tests: result samples built from the tools' own models."""

from __future__ import annotations

from typing import Any, get_type_hints

from pydantic import BaseModel


def minimal(schema: dict, root: dict):
    """The smallest value a JSON schema accepts (required fields only), from the model's own schema."""
    if "$ref" in schema:
        return minimal(root["$defs"][schema["$ref"].split("/")[-1]], root)
    if "default" in schema:
        return schema["default"]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return minimal(next(b for b in schema[key] if b.get("type") != "null"), root)
    if "enum" in schema:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    t = schema.get("type")
    if t == "object" or "properties" in schema:
        return {k: minimal(schema["properties"][k], root) for k in schema.get("required", [])}
    return {"string": "x", "number": 1.5, "integer": 1, "boolean": False, "array": [], "null": None}[t]


def result_of(fn, **fields: Any) -> BaseModel:
    """An instance of the tool function's result model: its required fields filled minimally, then `fields`."""
    model = get_type_hints(fn)["return"]
    schema = model.model_json_schema()
    return model.model_validate({**minimal(schema, schema), **fields})
