"""What a benchmark result says beyond its timings: which shape sets were timed and which not (and why), and
its verdict's reason in one line, where a wrong answer wins over a later too_big."""

from __future__ import annotations

from evokernel_mcp.benchmark.models import BenchmarkResult, ShapeResult
from evokernel_mcp.models import ErrorInfo
from evokernel_mcp.shape_defaults import ShapeChoice, SkippedShape


def shapes_outcome(results: list[ShapeResult], err: ErrorInfo | None, err_shape: str | None,
                    choice: ShapeChoice | None) -> tuple[list[SkippedShape], ErrorInfo | None]:
    """(shape sets not timed, with why; the error left at the top). A shape set too big for the free memory
    after an invalid one (a wrong answer) is a skipped shape set: the invalid timing is the verdict."""
    if choice is None:
        return [], err
    done = {r.shape for r in results}
    skipped = list(choice.skipped)
    for name in [s for s in choice.shapes if s not in done]:
        why = (f"{err.kind}: {err.message}"[:600] if err is not None and name == err_shape
               else f"not reached: the benchmark ended earlier ({err.kind})" if err is not None else "not reached")
        skipped.append(SkippedShape(shape=name, reason=why))
    if err is not None and err.kind == "too_big" and any(r.valid is False for r in results):
        err = None
    return skipped, err


def verdict_reason(res: BenchmarkResult) -> str | None:
    """One line: why the result is not valid (the first invalid shape set, even if an error came later), else
    the error; None when every shape set timed is valid."""
    bad = next((r for r in res.results if r.valid is False), None)
    if bad is not None:
        return f"{bad.invalid_reason or 'invalid'} at shape {bad.shape}: {bad.invalid_detail or ''}".strip()[:600]
    if res.error is not None:
        return f"{res.error.kind}: {res.error.message}"[:600]
    if res.state in ("failed", "cancelled"):
        return res.message or res.state
    return None
