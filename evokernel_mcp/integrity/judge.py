"""Pure judgement of one replayed exploit: the tool's answer against the defence the exploit must meet."""

from __future__ import annotations

import json
from typing import Any

from evokernel_mcp.integrity.models import Expect


def _error_kind(body: dict[str, Any]) -> str | None:
    err = body.get("error")
    if isinstance(err, dict):
        return err.get("kind")
    return None


def _benchmark_rows(body: dict[str, Any]) -> list[dict[str, Any]]:
    rows = body.get("results")
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def observe(is_error: bool, body: dict[str, Any] | None, text: str) -> str:
    """One short line of what came back (for the table)."""
    if is_error:
        kind = _error_kind(body or {}) or "tool error"
        return f"tool error ({kind}): {text.strip().splitlines()[0][:90] if text.strip() else ''}"
    body = body or {}
    if body.get("state") in ("queued", "running"):
        return f"not finished: state={body.get('state')}"
    if body.get("state") in ("failed", "cancelled"):
        return f"job {body['state']}" + (f": {_error_kind(body)}" if _error_kind(body) else "")
    if "passed" in body:
        kind = _error_kind(body)
        return f"passed={body['passed']}" + (f", error {kind}" if kind else "")
    rows = _benchmark_rows(body)
    if rows:
        bits = []
        for r in rows:
            if r.get("valid"):
                bits.append(f"{r.get('shape', '?')}: valid {r.get('speedup')}x")
            else:
                bits.append(f"{r.get('shape', '?')}: invalid ({r.get('invalid_reason') or _error_kind(r) or '?'})")
        return "; ".join(bits)[:160]
    kind = _error_kind(body)
    return f"error {kind}" if kind else "answered"


def verdict_held(expect: Expect, is_error: bool, body: dict[str, Any] | None) -> tuple[bool, str]:
    """Whether the answer meets the exploit's verdict (not the secret/write/next-job checks)."""
    body = body or {}
    if body.get("state") in ("queued", "running") and not is_error:
        return False, "the job did not finish within the replay's wait"
    if body.get("state") in ("failed", "cancelled") and expect.verdict != "answered" and not expect.error_kinds:
        if _error_kind(body) == "internal":
            return False, "the job failed in the harness, not on the exploit"
        return True, ""  # the job failed: no verdict and no speedup came out of it
    if expect.error_kinds and not is_error:
        kinds = {_error_kind(body)} | {_error_kind(r) for r in _benchmark_rows(body)}
        if not kinds & set(expect.error_kinds):
            return False, f"error kind {sorted(k for k in kinds if k)} not in {list(expect.error_kinds)}"
    if expect.verdict == "answered":
        return True, ""
    if expect.verdict == "rejected":
        return (True, "") if is_error else (False, "the tool accepted it")
    if is_error:
        return True, ""
    if expect.verdict == "verify_fails":
        return (False, "verify passed") if body.get("passed") is True else (True, "")
    rows = _benchmark_rows(body)
    if not rows:
        return (True, "") if body.get("error") else (False, "no results and no error")
    for r in rows:
        sp = r.get("speedup")
        if r.get("valid") and expect.strict:
            return False, f"{r.get('shape', '?')} valid ({sp}x)"
        if r.get("valid") and sp is not None and sp > expect.max_speedup:
            return False, f"{r.get('shape', '?')} valid at {sp}x"
    return True, ""


def leaked(secrets: list[str], is_error: bool, body: dict[str, Any] | None, text: str) -> str | None:
    """The first planted secret found anywhere in the answer, or None."""
    blob = text + json.dumps(body or {}, default=str)
    for s in secrets:
        if s and s in blob:
            return s[:6] + "..."
    return None
