"""Results sized for a context window.

The rule (also stated in tests/surface/test_budget.py): a token is ~4 characters of compact JSON, so
the default result of every tool must be at most BUDGET_TOKENS * CHARS_PER_TOKEN characters of
structuredContent (`json.dumps(..., separators=(",", ":"))`, which is what a client shows the model).

shape() does, in order: drop null fields (and empty stdout/stderr-like strings), round floats to
SIGNIFICANT_DIGITS significant digits (never into the integer part), merge provenance entries that
share source and detail into one entry whose `field` lists the fields; then, only if still over budget,
store the full shaped result as an artifact (result.json) and cut the largest lists and strings until
it fits, saying what was cut in `trimmed`. The text block beside it: verdict.py.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

BUDGET_TOKENS = 4000
CHARS_PER_TOKEN = 4
BUDGET_CHARS = BUDGET_TOKENS * CHARS_PER_TOKEN
SIGNIFICANT_DIGITS = 4
EMPTY_DROPPED = frozenset({"stdout", "stderr", "message", "note", "detail", "check_detail", "timer_note"})
MIN_LIST_KEEP = 1
MIN_STRING_KEEP = 400
MAP_MIN_KEYS = 30  # a dict of scalars with more keys than this is a map (counters ...), which may be cut


def size_chars(data: Any) -> int:
    return len(json.dumps(data, separators=(",", ":"), ensure_ascii=False, default=str))


def round_number(x: float, digits: int = SIGNIFICANT_DIGITS) -> float:
    if not math.isfinite(x) or x == 0:
        return x
    mag = math.floor(math.log10(abs(x))) + 1  # digits before the point
    return round(x, max(0, digits - mag)) if mag < digits else float(round(x))


def _prune(value: Any, key: str | None = None) -> Any:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if v is None or (v == "" and k in EMPTY_DROPPED):
                continue
            out[k] = _prune(v, k)
        if key == "provenance":
            return out
        return out
    if isinstance(value, list):
        items = [_prune(v) for v in value]
        return dedupe_provenance(items) if key == "provenance" else items
    if isinstance(value, float):
        return round_number(value)
    return value


_INDEXED = re.compile(r"^(?P<head>[^\[]*)\[(?P<i>\d+)\](?P<tail>.*)$")


def compress_fields(fields: list[str]) -> list[str]:
    """'devices[0].x', 'devices[1].x', 'devices[2].x' -> 'devices[0-2].x' (first index only; order kept)."""
    groups: dict[tuple[str, str], list[int]] = {}
    order: list[Any] = []
    for f in fields:
        m = _INDEXED.match(f)
        if not m:
            order.append(f)
            continue
        key = (m.group("head"), m.group("tail"))
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(int(m.group("i")))
    out = []
    for item in order:
        if isinstance(item, str):
            out.append(item)
            continue
        idx = sorted(set(groups[item]))
        runs, start = [], idx[0]
        for a, b in zip(idx, idx[1:] + [None]):
            if b != a + 1:
                runs.append(f"{start}-{a}" if a != start else f"{start}")
                start = b
        out.append(f"{item[0]}[{','.join(runs)}]{item[1]}")
    return out


def dedupe_provenance(items: list[Any]) -> list[Any]:
    """One entry per (source, detail), its fields joined: 'a, b, c' (indexed ones as 'x[0-3].y')."""
    if not all(isinstance(i, dict) and "source" in i for i in items):
        return items
    merged: dict[tuple[str, str | None], dict[str, Any]] = {}
    for it in items:
        key = (it.get("source"), it.get("detail"))
        if key in merged:
            fields = merged[key]["field"].split(", ")
            for f in str(it.get("field", "")).split(", "):
                if f and f not in fields:
                    fields.append(f)
            merged[key]["field"] = ", ".join(fields)
        else:
            merged[key] = dict(it)
            merged[key]["field"] = str(it.get("field", ""))
    for m in merged.values():
        m["field"] = ", ".join(compress_fields(m["field"].split(", ")))
    return list(merged.values())


def prune(data: dict[str, Any]) -> dict[str, Any]:
    """Drop nulls, round numbers, dedupe provenance (recursively)."""
    return _prune(data)


# ---------------------------------------------------------------- fitting into the budget
def _largest(data: Any, path: str = "") -> tuple[int, str, Any, Any] | None:
    """(size, path, container, key) of the largest list (longer than MIN_LIST_KEEP) or long string."""
    best: tuple[int, str, Any, Any] | None = None
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else []
    for k, v in items:
        p = f"{path}.{k}" if isinstance(data, dict) else f"{path}[{k}]"
        p = p.lstrip(".")
        if k == "provenance":
            continue
        cand = None
        if isinstance(v, list) and len(v) > MIN_LIST_KEEP:
            cand = (size_chars(v), p, data, k)
        elif _is_map(v):
            cand = (size_chars(v), p, data, k)
        elif isinstance(v, str) and len(v) > MIN_STRING_KEEP * 2:
            cand = (len(v), p, data, k)
        if cand and (best is None or cand[0] > best[0]):
            best = cand
        if isinstance(v, dict | list):
            inner = _largest(v, p)
            if inner and (best is None or inner[0] > best[0]):
                best = inner
    return best


def fit(data: dict[str, Any], budget_chars: int = BUDGET_CHARS, reserve_chars: int = 600) -> tuple[dict, list[str]]:
    """Cut the largest lists/strings of a copy of `data` until it fits budget_chars - reserve_chars.
    Returns (the cut copy, what was cut)."""
    out = json.loads(json.dumps(data, default=str))
    omitted: dict[str, str] = {}
    full_len: dict[str, int] = {}
    target = budget_chars - reserve_chars
    for _ in range(200):
        if size_chars(out) <= target:
            break
        big = _largest(out)
        if big is None:
            break
        _, path, container, key = big
        v = container[key]
        if isinstance(v, list):
            full_len.setdefault(path, len(v))
            container[key] = v[: max(MIN_LIST_KEEP, len(v) // 2)]
            omitted[path] = f"{path}: {len(container[key])} of {full_len[path]} kept"
        elif isinstance(v, dict):
            full_len.setdefault(path, len(v))
            container[key] = dict(list(v.items())[: max(MAP_MIN_KEYS // 2, len(v) // 2)])
            omitted[path] = f"{path}: {len(container[key])} of {full_len[path]} keys kept"
        else:
            full_len.setdefault(path, len(v))
            keep = max(MIN_STRING_KEEP, len(v) // 2)
            container[key] = v[:keep] + " ...[cut]"
            omitted[path] = f"{path}: first {keep} of {full_len[path]} characters kept"
    return out, list(omitted.values())


def _is_map(v: Any) -> bool:
    return isinstance(v, dict) and len(v) > MAP_MIN_KEYS and all(
        isinstance(x, int | float | str | bool) or x is None for x in v.values())
