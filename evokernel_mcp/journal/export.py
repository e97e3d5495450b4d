"""export_trajectory: a markdown report and a PNG chart of time per step (matplotlib, Agg, no pyplot)."""

from __future__ import annotations

import io
from pathlib import Path

from evokernel_mcp.journal.distill import render_distilled, render_journal
from evokernel_mcp.journal.models import Distilled, ExperimentRow, NoteRecord

BASELINE_LINES = (("pytorch", "PyTorch baseline (median)", "--"), ("source", "baseline source (median)", ":"),
                  (None, "baseline (median)", "-."))


def baseline_lines(bases: dict[str | None, list[float]]) -> list[tuple[str, str, float]]:
    """(legend label, line style, median) per baseline kind the rows were timed against: PyTorch's and a named
    baseline source's are never drawn as one line."""
    out = []
    for kind, label, style in BASELINE_LINES:
        ms = sorted(bases.get(kind) or [])
        if ms:
            out.append((label, style, ms[len(ms) // 2]))
    return out


def chart_png(task: str, rows: list[ExperimentRow], shape: str | None) -> tuple[bytes, int]:
    """Time per step on `shape`: valid variants with their CI (blue), the running best (line), variants with an
    invalid or unverified time (red x), failed variants without a time (red ticks on the axis), and the
    baselines' medians (dashed: PyTorch; dotted: a baseline source a call named, e.g. an earlier step). Returns
    (png bytes, points drawn)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 4.8), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    good_x, good_y, err_lo, err_hi, bad_x, bad_y, none_x = [], [], [], [], [], [], []
    bases: dict[str | None, list[float]] = {}  # the baseline kind ('pytorch', 'source', None) -> its medians
    untimed_x = []  # verified, never timed on this shape: not a failure
    devices = set()
    for r in rows:
        t = next((x for x in r.times if x.shape == shape), None)
        if t is not None and t.baseline_median_ms is not None:
            bases.setdefault(t.baseline, []).append(t.baseline_median_ms)
        if t is not None and t.device:
            devices.add(t.device)
        if t is not None and t.valid and r.verdict == "valid" and t.median_ms is not None:
            good_x.append(r.step)
            good_y.append(t.median_ms)
            lo, hi = t.ci_median_ms or (t.median_ms, t.median_ms)
            err_lo.append(max(0.0, t.median_ms - lo))
            err_hi.append(max(0.0, hi - t.median_ms))
        elif t is not None and t.median_ms is not None:
            bad_x.append(r.step)
            bad_y.append(t.median_ms)
        elif t is None and r.verdict == "valid":
            untimed_x.append(r.step)
        else:
            none_x.append(r.step)
    if good_x:
        ax.errorbar(good_x, good_y, yerr=[err_lo, err_hi], fmt="o", color="tab:blue", capsize=3,
                    label="valid (median, CI)")
        best, run = [], float("inf")
        for y in good_y:
            run = min(run, y)
            best.append(run)
        last = max(r.step for r in rows)
        ax.step(good_x + [last], best + best[-1:], where="post", color="tab:blue", alpha=0.5, label="best so far")
    if bad_x:
        ax.plot(bad_x, bad_y, "x", color="tab:red", markersize=8, label="failed / unverified (time not valid)")
    base = []
    for label, style, ms in baseline_lines(bases):
        base.append(ms)
        ax.axhline(ms, color="gray", linestyle=style, label=label)
    if none_x:
        ax.plot(none_x, [0.0] * len(none_x), "|", color="tab:red", markersize=14, transform=ax.get_xaxis_transform(),
                clip_on=False, label="failed, no time")
    if untimed_x:
        ax.plot(untimed_x, [0.0] * len(untimed_x), "|", color="tab:gray", markersize=14,
                transform=ax.get_xaxis_transform(), clip_on=False, label="verified, not timed")
    ys = good_y + bad_y + base
    if ys and min(ys) > 0 and max(ys) / min(ys) > 20:
        ax.set_yscale("log")
    ax.set_xlabel("step (variant, in order tried)")
    ax.set_ylabel(f"median time on '{shape}' (ms)" if shape else "median time (ms)")
    dev = ", ".join(sorted(devices)) or "no device recorded"
    ax.set_title(f"{task}: time per step ({dev})")
    if rows and len(rows) <= 30:
        ax.set_xticks([r.step for r in rows])
        ax.set_xticklabels([r.label[-18:] for r in rows], rotation=45, ha="right", fontsize=7)
    if good_x or bad_x or base or none_x:
        ax.legend(fontsize=7, loc="best")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue(), len(good_x) + len(bad_x) + len(none_x)


def report_markdown(d: Distilled, rows: list[ExperimentRow], notes: list[NoteRecord], shape: str | None) -> str:
    return (render_distilled(d) + "\n![time per step](trajectory.png)\n\n"
            + render_journal(d.task, rows, notes, shape, max_rows=500, max_notes=500))


def write_files(dest: str | Path, report: str, png: bytes) -> list[Path]:
    """For scripts (tools/journey.py): write report.md and trajectory.png into dest."""
    d = Path(dest)
    d.mkdir(parents=True, exist_ok=True)
    (d / "report.md").write_text(report, encoding="utf-8")
    (d / "trajectory.png").write_bytes(png)
    return [d / "report.md", d / "trajectory.png"]
