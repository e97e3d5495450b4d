"""The candidate's post-timing output checks (runner_side: check_timed on its last timed input storage
refilled with new values, check_fresh on fresh inputs, check_probe on verify's signed probe inputs; verify's
bar) as a result shows them: structured
(ShapeResult.checks) and as one readable sentence (ShapeResult.check_detail)."""

from __future__ import annotations

from typing import Any

from evokernel_mcp.benchmark.models import OutputCheck, OutputChecks

WHAT = {"timed": "timed call's output (input storage refilled)", "fresh": "output on fresh inputs",
        "probe": "output on verify's signed probe inputs"}


def _check(raw: Any) -> OutputCheck | None:
    if not isinstance(raw, dict):
        return None
    return OutputCheck(**{k: raw.get(k) for k in OutputCheck.model_fields})


def _words(name: str, c: OutputCheck) -> str:
    verdict = ("matched the reference" if c.passed else "did NOT match the reference" if c.passed is False
               else "not judged")
    bits = [f"{c.mismatches} mismatches" if c.mismatches else None,
            f"max_abs_err {c.max_abs_err:.3g}" if c.max_abs_err is not None else None,
            f"{c.nan_count} NaN" if c.nan_count else None, c.note]
    evidence = ", ".join(b for b in bits if b)
    return f"{WHAT[name]}: {verdict}" + (f" ({evidence})" if evidence else "")


def output_checks(raw: dict[str, Any]) -> tuple[OutputChecks | None, str | None]:
    """(checks, sentence) from a shape's raw record; (None, None) when neither check ran."""
    checks = OutputChecks(timed=_check(raw.get("check_timed")), fresh=_check(raw.get("check_fresh")),
                          probe=_check(raw.get("check_probe")))
    parts = [(n, c) for n, c in (("timed", checks.timed), ("fresh", checks.fresh), ("probe", checks.probe))
             if c is not None]
    if not parts:
        return None, None
    bars = {c.bar for _, c in parts if c.bar}
    sentence = "; ".join(_words(n, c) for n, c in parts)
    if len(bars) == 1:
        sentence += f"; bar: {bars.pop()}"
    return checks, sentence + "."
