"""The text block of a result: its verdict and the reason, in one or two lines, for a client (or a person)
that shows only the text.

Read generically from the result's fields, so every tool (also one added later) gets it:
- a job handle (`job` while queued/running): the job, its progress and the call that finishes it;
- job_result: the finished job in its tool's words (the tool's own fields are at the top level);
- `error` {kind, message}: the error; `passed` false: the first failing case (shape, seed, mismatches,
  first index, errors); `ok` false: the first error diagnostic (line:column message);
- lists of items with `valid` (benchmark results[], evaluate_batch ranked[]): how many are invalid, the
  first invalid one's reason (invalid_reason / failed_stage, and its detail), the speedups of the valid;
- `degraded`: the first of degraded_reasons; a failed or cancelled `state`: its message;
- otherwise the short scalar fields (the headline facts).
"""

from __future__ import annotations

from typing import Any

HEAD_CHARS = 160
REASON_CHARS = 200
TEXT_CHARS = 600  # head, two reason lines, the cut note
SKIP = ("provenance", "trimmed", "job", "versions", "status", "stdout", "stderr")
# evidence of a failing item (a verify case, a benchmark check), in the order a reader wants it
EVIDENCE = ("mismatches", "first_mismatch_index", "max_abs_err", "max_rel_err", "tol", "floor_abs_err", "nan_count",
            "inf_count", "unwritten_count", "inputs_mutated", "deterministic", "note")
NAMES = ("name", "shape", "kernel", "seed")
VERDICT_KEYS = ("passed", "ok", "error", "message", "degraded", "degraded_reasons")


def _cut(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3].rstrip() + "..."


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return "[" + ",".join(_fmt(x) for x in v[:6]) + (",..." if len(v) > 6 else "") + "]"
    return str(v)


def _label(item: dict[str, Any]) -> str:
    bits = [f"{k}={item[k]}" for k in NAMES if isinstance(item.get(k), str | int) and not isinstance(item.get(k), bool)]
    if item.get("probe") is True:
        bits.append("probe")
    return " ".join(bits)


def describe_failure(item: dict[str, Any]) -> str:
    """'shape=small seed=0: mismatches=1000 of 4096, first_mismatch_index=[17], max_abs_err=0.5 ...'."""
    bits = []
    for k in EVIDENCE:
        v = item.get(k)
        if v is None or v == [] or (k in ("nan_count", "inf_count", "unwritten_count") and v == 0):
            continue
        if k == "inputs_mutated" and v is not True or k == "deterministic" and v is not False:
            continue
        if k == "mismatches" and isinstance(item.get("numel"), int):
            bits.append(f"mismatches={v} of {item['numel']}")
            continue
        bits.append(f"{k}={_fmt(v)}")
    label = _label(item)
    return (f"{label}: " if label else "") + (", ".join(bits) or "failed")


def _error(e: Any) -> str | None:
    if isinstance(e, dict) and e.get("message"):
        return f"{e.get('kind') or 'error'}: {e['message']}"
    return str(e) if isinstance(e, str) and e else None


def _valid_lists(data: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    return [(k, v) for k, v in data.items() if isinstance(v, list) and v and all(isinstance(x, dict) for x in v)
            and any("valid" in x for x in v)]


def _speedup(item: dict[str, Any]) -> str:
    ci = item.get("speedup_ci")
    band = f" [{_fmt(ci[0])}, {_fmt(ci[1])}]" if isinstance(ci, list) and len(ci) == 2 else ""
    peak = item.get("fraction_of_peak")
    of_peak = f", {_fmt(peak)} of peak" if isinstance(peak, int | float) and not isinstance(peak, bool) else ""
    return f"{_label(item)}: {_fmt(item['speedup'])}x{band}{of_peak}".lstrip(": ")


def _invalid_reason(item: dict[str, Any]) -> str:
    why = item.get("invalid_reason") or (f"failed at {item['failed_stage']}" if item.get("failed_stage") else "invalid")
    detail = item.get("invalid_detail") or item.get("reason") or item.get("check_detail")
    return f"{_label(item)}: {why}" + (f" ({detail})" if detail else "")


def verdict(data: dict[str, Any]) -> tuple[str | None, list[str]]:
    """(verdict word or None, reason lines) of a result (module doc)."""
    reasons: list[str] = []
    word: str | None = None
    err = _error(data.get("error"))
    if err:
        word, reasons = "FAILED", [err]
    if data.get("passed") is False:
        word = "FAILED"
        bad = [c for c in data.get("cases") or [] if isinstance(c, dict) and c.get("passed") is False]
        if bad:
            reasons.append(f"first failing case ({len(bad)} of {len(data['cases'])} failed): {describe_failure(bad[0])}")
    elif data.get("passed") is True:
        word = "passed"
    if data.get("ok") is False:
        word = "FAILED"
        diags = [d for d in data.get("diagnostics") or [] if isinstance(d, dict)]
        first = next((d for d in diags if d.get("severity", "error") == "error"), diags[0] if diags else None)
        if first:
            where = ":".join(str(first[k]) for k in ("line", "column") if first.get(k) is not None)
            reasons.append((f"line {where}: " if where else "") + str(first.get("message", "")))
    elif data.get("ok") is True and word is None:
        word = "ok"
    for key, items in _valid_lists(data):
        bad = [x for x in items if x.get("valid") is False]
        if bad:
            word = word or ("INVALID" if len(bad) == len(items) else f"{len(bad)} of {len(items)} INVALID")
            reasons.append(f"first invalid of {key}: {_invalid_reason(bad[0])}")
        else:
            word = word or "all valid"
        timed = [x for x in items if x.get("valid") is not False and isinstance(x.get("speedup"), int | float)]
        if timed:
            reasons.append("speedup " + "; ".join(_speedup(x) for x in timed[:3]) + ("; ..." if len(timed) > 3 else ""))
    if data.get("degraded") is True:
        word = word or "DEGRADED"
        why = [r for r in data.get("degraded_reasons") or [] if isinstance(r, str)]
        reasons.append("degraded: " + (why[0] if why else "see degraded_reasons"))
    if data.get("state") in ("failed", "cancelled") and not err:
        word = word or data["state"].upper()
        reasons.append(str(data.get("message") or ("cancelled: by cancel_job, or its caller went away"
                                                    if data["state"] == "cancelled" else "no reason given")))
    return word, reasons


def _facts(data: dict[str, Any]) -> str:
    bits = []
    for k, v in data.items():
        if k in SKIP or k in VERDICT_KEYS or k.endswith("_at") or v is False:
            continue
        if isinstance(v, bool | int | float) or (isinstance(v, str) and len(v) <= 60 and "\n" not in v):
            bits.append(f"{k}={_fmt(v)}")
        elif isinstance(v, list):
            bits.append(f"{k}: {len(v)}")
    return ", ".join(bits)


def summary_text(tool: str, data: dict[str, Any], max_chars: int = TEXT_CHARS) -> str:
    """The text block: '<tool>: <verdict>; <facts>' and the reason (module doc)."""
    status = data.get("status") if isinstance(data.get("status"), dict) else None
    name = f"{tool} ({status.get('tool') or status.get('kind')})" if tool == "job_result" and status else tool
    job = data.get("job") if isinstance(data.get("job"), dict) else None
    if job and job.get("state") in ("queued", "running"):
        prog = f", {job['progress']}" if job.get("progress") else ""
        head = f"{name}: not finished within wait_s: job {job.get('job_id')} {job.get('state')}{prog}"
        lines = [_cut(head, HEAD_CHARS), _cut(f"next: {job.get('next_call')}", REASON_CHARS)]
    else:
        word, reasons = verdict(data)
        head = f"{name}: " + "; ".join(b for b in (word, _facts(data)) if b)
        lines = [_cut(head, HEAD_CHARS)] + [_cut(r, REASON_CHARS) for r in reasons[:2]]
    if isinstance(data.get("trimmed"), dict):
        lines.append(f"cut to fit: full result in artifact {data['trimmed'].get('artifact_id')} (read_artifact)")
    text = "\n".join(lines)
    return text if len(text) <= max_chars else text[: max_chars - 3] + "..."
