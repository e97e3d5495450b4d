"""JSON schemas as the agent sees them.

Input schemas are read by the model on every turn, so they are compacted: no `title` keywords, an
optional `X | None = None` is shown as plain `X` (null is still accepted by the server), the first
paragraph of the docstring is the description. Typed patches add enums and the compile options model.
Output schemas: output_schema.py. The fields every result shares are described once (RESULT_GLOSSARY).
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

MAX_DESCRIPTION_CHARS = 170
SECOND_SENTENCE_CHARS = 150
UNION_DESCRIPTION_CHARS = 240
# Keywords left out of the listed schemas (the full schema in evokernel://tools/{name} keeps them, and the
# server enforces them with an error that names the limit).
LISTED_DROPS = frozenset({"maxLength", "minLength", "pattern", "discriminator", "minimum", "maximum",
                          "exclusiveMinimum", "exclusiveMaximum"})
MAX_ARG_DESCRIPTION_CHARS = 60
# Arguments for experts: accepted (and checked) like any other, but not listed in tools/list, which a
# model reads every turn; the tool's description names them and evokernel://tools/{name} has the full
# schema. Add a tool's rarely used knobs here rather than growing the listed schemas.
ADVANCED: dict[str, tuple[str, ...]] = {
    "benchmark": ("timeout_s", "timer", "subtract_event_overhead", "add_launch_cost", "compute_unit", "seed", "use_graph",
                  "cold_cache", "target_rel_ci", "device", "confirm", "control", "overrides", "experiment", "flops",
                  "bytes"),
    "verify_vs_pytorch": ("timeout_s", "stop_on_first_failure", "device", "probe", "overrides", "experiment",
                          "tolerance"),
    "profile_pmc": ("shape", "timeout_s", "experiment", "arch", "warmup", "iters", "max_dispatches",
                    "compile_waves_per_simd", "device"),
    "thread_trace": ("shape", "timeout_s", "experiment", "att_target_cu", "att_shader_engine_mask", "att_simd_select",
                     "att_buffer_size", "att_library_path", "warmup", "device"),
    "measure_ceilings": ("timeout_s", "device"),
    "evaluate_batch": ("stages", "shapes", "overrides", "compile", "timeout_s", "max_time_s", "experiment"),
    "sweep": ("configs", "stages", "shapes", "overrides", "timeout_s", "max_time_s", "experiment"),
    "list_experiments": ("limit", "offset", "shape", "sort"),
    "compare_experiments": ("max_diff_lines", "max_counters"),
    "distill": ("max_claims",),
    "export_trajectory": ("preview_chars",),
    "compile_kernel": ("experiment", "task", "specialize", "options.matrix_instr_nonkdim", "options.kpack",
                       "options.enable_fp_fusion",
                       "options.maxnreg", "options.timeout_s"),
    "read_artifact": ("name",),
}


def _is_null(s: Any) -> bool:
    return isinstance(s, dict) and s.get("type") == "null"


def compact_schema(schema: Any, *, in_properties: bool = False, shorten: bool = True) -> Any:
    """Drop `title` keywords (not properties named title), collapse `anyOf [X, null]` to X, drop default null;
    with shorten, argument descriptions are cut to their first sentence."""
    if isinstance(schema, list):
        return [compact_schema(x, shorten=shorten) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for k, v in schema.items():
        if in_properties:
            out[k] = compact_schema(v, shorten=shorten)
            continue
        if k == "title":
            continue
        if k == "default" and v is None:
            continue
        if shorten and (k in LISTED_DROPS or (k == "additionalProperties" and v is False)):
            continue  # the listed schema leaves limits and patterns to the server, which checks them
        if k == "description" and isinstance(v, str):
            out[k] = short_arg_description(v) if shorten else " ".join(v.split())
            continue
        out[k] = compact_schema(v, in_properties=k in ("properties", "$defs"), shorten=shorten)
    if not in_properties and "anyOf" in out:
        branches = [b for b in out["anyOf"] if not _is_null(b)]
        if len(branches) == 1 and len(branches) < len(out["anyOf"]):
            rest = {k: v for k, v in out.items() if k != "anyOf"}
            out = {**branches[0], **rest}
    return out


def short_arg_description(text: str, limit: int = MAX_ARG_DESCRIPTION_CHARS) -> str:
    """An argument's description for tools/list: its first sentence, cut at a clause end near the limit."""
    text = " ".join(text.split())
    m = re.search(r"(?<!e\.g)(?<!i\.e)(?<!etc)[.!?](\s+(?=[A-Z('\"])|$)", text)
    first = text[: m.start() + 1] if m else text
    if len(first) <= limit:
        return first
    cut = first[:limit]
    end = max(cut.rfind("; "), cut.rfind(", "), cut.rfind(" ("), cut.rfind(": "))
    return (cut[:end] if end > limit // 2 else cut[: cut.rfind(" ")]).rstrip(",;:( ") + " ..."


def short_description(doc: str | None) -> str:
    """The first sentence of a docstring (whitespace collapsed), and the second too while short; the rest
    of the docstring is in evokernel://tools/{name}."""
    text = " ".join(re.split(r"\n\s*\n", (doc or "").strip(), maxsplit=1)[0].split())
    ends = [m.end() for m in re.finditer(r"(?<!e\.g)(?<!i\.e)(?<!etc)[.!?](?=\s+[A-Z(']|$)", text)]
    if not ends:
        return text if len(text) <= MAX_DESCRIPTION_CHARS else short_arg_description(text, MAX_DESCRIPTION_CHARS)
    keep = ends[0]
    for e in ends[1:]:
        if e <= SECOND_SENTENCE_CHARS:
            keep = e
    out = text[:keep]
    return out if len(out) <= MAX_DESCRIPTION_CHARS else short_arg_description(out, MAX_DESCRIPTION_CHARS)


# ---------------------------------------------------------------- typed patches of input schemas
def _compile_patch() -> dict[str, Any]:
    from evokernel_mcp.compile.options import TARGETS, CompileOptions

    opts = compact_schema(CompileOptions.model_json_schema(), shorten=False)
    for key, p in opts.get("properties", {}).items():
        p.pop("default", None)
        if key != "workgroup_size":
            p.pop("description", None)  # the names say it; the per-option text is in evokernel://tools/...
    opts["description"] = "Triton: num_warps, num_stages ...; HIP/CUDA: workgroup_size, flags (allow-listed)."
    return {"target": {"enum": list(TARGETS)}, "options": opts}


PATCHES = {"compile_kernel": _compile_patch}


def patch_input_schema(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """Apply the tool's typed patch (enums, typed options) onto its compacted input schema."""
    make = PATCHES.get(name)
    if make is None:
        return schema
    props = schema.get("properties", {})
    for arg, extra in make().items():
        if arg in props:
            if "enum" in extra and props[arg].get("type") == "string":
                props[arg] = {**props[arg], **extra}
            elif "properties" in extra:
                props[arg] = extra
    return schema


DETACH_SCHEMA = {"type": "boolean", "default": False,
                 "description": "Keep the job running if this call or session ends."}


# Arguments that mean the same in every tool: described once, in the server instructions (GLOSSARY),
# not again in each schema.
COMMON_ARGS: dict[str, str] = {
    "candidate": "Python source defining run(*inputs) or class ModelNew(nn.Module) (KernelBench form).",
    "task": "a shipped task name (list_tasks), a task folder or a KernelBench .py path; or pass reference.",
    "reference": "KernelBench-form source (class Model, get_inputs) instead of task.",
    "wait_s": "seconds the call waits before it returns a job handle (job_result finishes it).",
    "detach": "true keeps the job running when the call or the session ends.",
    "job_id": "the id in a job handle (list_jobs shows yours).",
    "experiment": "a journal label for this variant (e.g. 'conv3d/step3-lds'); the call is recorded under it.",
}
# Result fields every tool shares: described once here (the server instructions), not in each listed
# output schema (output_schema.COMMON_DEFS); evokernel://tools/{name} has the full output schema.
RESULT_GLOSSARY = (
    "Results: the text block says the verdict and its reason; structuredContent has the fields. "
    "provenance[]: {field, source, detail}, where each number came from. trimmed: {artifact_id, uri, "
    "full_chars, omitted[]} when the result was cut to fit (the full one is an artifact). A long tool not done "
    "within wait_s returns {job_id, state, message, job: {job_id, tool, state, age_s, progress, detached, "
    "next_call}}; job_result then returns the tool's own fields at the top level, with finished and status "
    "(the job). evokernel://tools/{name} has each tool's full input and output schema, with descriptions.")
GLOSSARY = ("Arguments shared by the tools: " + " ".join(f"{k}: {v}" for k, v in COMMON_ARGS.items()) + "\n"
            + RESULT_GLOSSARY)


def _drop_common_descriptions(schema: dict[str, Any]) -> None:
    for name, prop in schema.get("properties", {}).items():
        if name in COMMON_ARGS and isinstance(prop, dict):
            prop.pop("description", None)


def full_input_schema(name: str, raw: dict[str, Any], long: bool) -> dict[str, Any]:
    """Every argument the tool takes (compacted and patched): what strict checking uses."""
    schema = patch_input_schema(name, compact_schema(copy.deepcopy(raw), shorten=False))
    if long:
        schema.setdefault("properties", {})["detach"] = dict(DETACH_SCHEMA)
    return schema


def listed_input_schema(name: str, full: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The schema shown in tools/list (advanced arguments left out) and the names left out."""
    hidden = [a for a in ADVANCED.get(name, ()) if _has_optional(full, a)]
    listed = compact_schema(full)  # a copy, descriptions shortened
    for a in hidden:
        *parents, leaf = a.split(".")
        node = listed
        for p in parents:
            node = node["properties"][p]
        node["properties"].pop(leaf)
    _drop_common_descriptions(listed)
    for name in _collapse_unions(listed):
        desc = full["properties"][name].get("description")
        if desc:
            listed["properties"][name]["description"] = short_arg_description(desc, UNION_DESCRIPTION_CHARS)
    _drop_unused_defs(listed)
    return listed, hidden


def _has_optional(schema: dict[str, Any], dotted: str) -> bool:
    node = schema
    *parents, leaf = dotted.split(".")
    for p in parents:
        node = node.get("properties", {}).get(p, {})
    return leaf in node.get("properties", {}) and leaf not in node.get("required", [])


def _collapse_unions(schema: dict[str, Any]) -> list[str]:
    """An argument that is a union of several object shapes is listed by its description alone (which
    shows the forms); the shapes are in evokernel://tools/{name}."""
    out: list[str] = []
    for name, prop in schema.get("properties", {}).items():
        branches = prop.get("anyOf", []) + prop.get("oneOf", [])
        nested = [b for b in branches for b in (b.get("oneOf", []) + b.get("anyOf", []) or [b])]
        if sum(1 for b in nested if "$ref" in b or b.get("type") == "object") >= 3:
            schema["properties"][name] = {k: v for k, v in prop.items() if k in ("description", "default")}
            out.append(name)
    return out


def _drop_unused_defs(schema: dict[str, Any]) -> None:
    defs = schema.get("$defs")
    if not defs:
        return
    text = json.dumps({k: v for k, v in schema.items() if k != "$defs"})
    used = {k for k in defs if f"#/$defs/{k}" in text}
    for _ in range(5):  # defs that refer to other defs
        more = {k for k in defs if k not in used and any(f"#/$defs/{k}" in json.dumps(defs[u]) for u in used)}
        if not more:
            break
        used |= more
    for k in list(defs):
        if k not in used:
            defs.pop(k)
    if not defs:
        schema.pop("$defs")
