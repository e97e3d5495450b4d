"""The trail compressed (distill) and the journal as markdown (resources, export)."""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict

from evokernel_mcp.journal.analysis import (
    Experiment,
    Rec,
    best_so_far,
    group,
    iso,
    main_shape,
    note_counts,
    row_of,
    source_checks,
    time_on,
)
from evokernel_mcp.journal.models import Distilled, ExperimentRow, FailureClass, NoteRecord
from evokernel_mcp.models import Provenance

NOTE_TEXT_MAX = 300


def note_record(n: sqlite3.Row, cut: int | None = None) -> NoteRecord:
    text = n["text"]
    if cut and len(text) > cut:
        text = text[: cut - 3] + "..."
    try:
        ev = json.loads(n["evidence"])
    except ValueError:
        ev = {"kind": n["evidence_kind"]}
    return NoteRecord(note_id=n["id"], task=n["task"], experiment=n["experiment"], kind=n["kind"], text=text,
                      evidence=ev, verified=n["evidence_kind"] != "unverified", created_at=iso(n["created_at"]))


def compact(row: ExperimentRow, shape: str | None, detail_chars: int = 200) -> ExperimentRow:
    """The row as a list shows it: times on one shape only (all when shape is None), no resources."""
    upd: dict = {"resources": []}
    if shape is not None:
        upd["times"] = [t for t in row.times if t.shape == shape]
    if row.failure_detail and len(row.failure_detail) > detail_chars:
        upd["failure_detail"] = row.failure_detail[: detail_chars - 3] + "..."
    return row.model_copy(update=upd)


def build(task: str, recs: list[Rec], notes: list[sqlite3.Row], journal: str, *, max_claims: int = 15,
          max_lessons: int = 8, max_failure_classes: int = 10) -> Distilled:
    exps = group(recs)
    checks = source_checks(recs)
    counts = note_counts(notes, exps)
    rows = [row_of(e, checks, counts.get((e.task, e.label), 0)) for e in exps]
    shape = main_shape(exps)
    winners, _ = best_so_far(recs)
    valid = sorted((r for r in rows if r.verdict == "valid" and time_on(r, shape) is not None),
                   key=lambda r: time_on(r, shape))
    failures, used = _failure_classes(exps, rows, notes)
    lessons = [note_record(n, NOTE_TEXT_MAX) for n in notes
               if n["kind"] == "lesson" and n["id"] not in used and n["evidence_kind"] != "unverified"]
    claims = [note_record(n, NOTE_TEXT_MAX) for n in reversed(notes) if n["evidence_kind"] == "unverified"]
    verdicts: dict[str, int] = defaultdict(int)
    for r in rows:
        verdicts[r.verdict] += 1
    return Distilled(
        task=task, experiments=len(rows), results=len(recs), verdicts=dict(verdicts), winners=winners,
        top_valid=[compact(r, shape) for r in valid[:3]], main_shape=shape,
        failures=failures[:max_failure_classes], lessons=lessons[-max_lessons:],
        lessons_left_off=max(0, len(lessons) - max_lessons), unverified_claims=claims[:max_claims],
        unverified_claims_total=len(claims),
        verified_claims=sum(1 for n in notes if n["kind"] == "claim" and n["evidence_kind"] != "unverified"),
        provenance=[Provenance(field="*", source=f"journal {journal}",
                               detail="figures as recorded by the tools; each carries its result_id")])


def _failure_classes(exps: list[Experiment], rows: list[ExperimentRow],
                     notes: list[sqlite3.Row]) -> tuple[list[FailureClass], set[str]]:
    """Each failure class once: how many variants, which, the first one's evidence, and the lessons noted on
    those variants (or on their results). Returns them (most frequent first) and the ids of the notes used."""
    by_label = {(e.task, e.label): e for e in exps}
    groups: dict[str, list[ExperimentRow]] = defaultdict(list)
    for r in rows:
        if r.verdict == "failed":
            groups[r.failure_class or "unknown"].append(r)
    out, used = [], set()
    for cls, members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1][0].step)):
        keys = {(m.task, m.label) for m in members}
        rids = {rec.id for k in keys for rec in by_label[k].recs}
        lessons = []
        for n in notes:
            if n["kind"] != "lesson":
                continue
            if (n["task"], n["experiment"]) in keys or (n["result_id"] in rids):
                used.add(n["id"])
                text = n["text"] if len(n["text"]) <= NOTE_TEXT_MAX else n["text"][: NOTE_TEXT_MAX - 3] + "..."
                if text not in lessons:
                    lessons.append(text + ("" if n["evidence_kind"] != "unverified" else " [unverified]"))
        first = members[0]
        decider = by_label[(first.task, first.label)]
        out.append(FailureClass(
            failure_class=cls, count=len(members), labels=[m.label for m in members[:5]],
            labels_left_off=max(0, len(members) - 5), example=first.failure_detail,
            example_result_id=_decider_id(decider, first), lessons=lessons[:3]))
    return out, used


def _decider_id(e: Experiment, row: ExperimentRow) -> str | None:
    for tool in ("verify_vs_pytorch", "benchmark", "compile_kernel"):
        rec = e.latest(tool)
        if rec is not None and rec.verdict == "failed":
            return rec.id
    return next(iter(row.latest.values()), None)


# ---------------------------------------------------------------- markdown
def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g} ms"


def _ci(ci) -> str:
    return "" if not ci else f" [{ci[0]:.4g}, {ci[1]:.4g}]"


AGAINST = {"pytorch": " vs PyTorch", "source": " vs the call's baseline source"}


def _against(baseline: str | None) -> str:
    return AGAINST.get(baseline or "", "")


def render_distilled(d: Distilled) -> str:
    out = [f"# Distilled journal: {d.task}", "",
           f"{d.experiments} variants, {d.results} recorded calls; verdicts: "
           + (", ".join(f"{k} {v}" for k, v in sorted(d.verdicts.items())) or "none"), ""]
    out += ["## Best so far (valid verdicts only)", ""]
    if not d.winners:
        out.append("- none yet: no benchmark of a source whose verify passed")
    for w in d.winners:
        out.append(f"- {w.shape} on {w.device}: **{w.label}** (step {w.step}) {_ms(w.median_ms)}{_ci(w.ci_median_ms)}"
                   + (f", speedup {w.speedup:.3g}x{_ci(w.speedup_ci)}{_against(w.baseline)}" if w.speedup is not None
                      else "")
                   + f" (benchmark {w.result_id}, verify {w.verify_result_id}; {w.candidates} valid measurements)")
    out += ["", "## Failures (each class once, with its lesson)", ""]
    if not d.failures:
        out.append("- none recorded")
    for f in d.failures:
        more = f" +{f.labels_left_off} more" if f.labels_left_off else ""
        out.append(f"- **{f.failure_class}** x{f.count} ({', '.join(f.labels)}{more}): {f.example or ''}"
                   + (f" ({f.example_result_id})" if f.example_result_id else ""))
        for lesson in f.lessons or ["(no lesson recorded yet: record_note(kind='lesson', experiment=...))"]:
            out.append(f"  - lesson: {lesson}")
    if d.lessons:
        out += ["", "## Other lessons", ""]
        out += [f"- {n.text} ({_evidence(n)})" for n in d.lessons]
        if d.lessons_left_off:
            out.append(f"- ... {d.lessons_left_off} older lessons left off")
    out += ["", f"## Open unverified claims ({d.unverified_claims_total})", ""]
    if not d.unverified_claims:
        out.append("- none")
    for n in d.unverified_claims:
        out.append(f"- {n.note_id}: {n.text}" + (f" (on {n.experiment})" if n.experiment else "") + " -- ask for the source")
    if d.unverified_claims_total > len(d.unverified_claims):
        out.append(f"- ... {d.unverified_claims_total - len(d.unverified_claims)} more (distill(max_claims=...))")
    return "\n".join(out) + "\n"


def _evidence(n: NoteRecord) -> str:
    ev = n.evidence
    kind = ev.get("kind")
    if kind == "result":
        return f"result {ev.get('result_id')}"
    if kind == "doc":
        return str(ev.get("anchor"))
    if kind == "measured":
        return f"measured {ev.get('value')} {ev.get('unit')} by {ev.get('source')}"
    return "unverified"


def render_journal(task: str, rows: list[ExperimentRow], notes: list[NoteRecord], shape: str | None,
                   max_rows: int = 100, max_notes: int = 60) -> str:
    out = [f"# Experiment journal: {task}", "",
           f"{len(rows)} variants, {len(notes)} notes. Times: median on shape {shape or '-'} (CI). "
           f"The distilled form: evokernel://journal/{task}/distilled", "",
           "| step | label | verdict | time | speedup | failure | results |", "|---|---|---|---|---|---|---|"]
    shown = rows[-max_rows:]
    if len(rows) > len(shown):
        out.append(f"| ... | {len(rows) - len(shown)} earlier variants left off | | | | | |")
    for r in shown:
        t = next((x for x in r.times if x.shape == shape), None)
        tm = "-" if t is None else (_ms(t.median_ms) + _ci(t.ci_median_ms) if t.valid else f"invalid: {t.invalid_reason}")
        sp = "-" if t is None or t.speedup is None or not t.valid else \
            f"{t.speedup:.3g}x{_ci(t.speedup_ci)}{_against(t.baseline)}"
        fail = (r.failure_class or "") + (f": {r.failure_detail[:120]}" if r.failure_detail else "")
        out.append(f"| {r.step} | {r.label} | {r.verdict} | {tm} | {sp} | {fail.replace('|', '/')} | "
                   f"{', '.join(f'{k.split(chr(95))[0]} {v}' for k, v in r.latest.items())} |")
    out += ["", "## Notes", ""]
    if not notes:
        out.append("- none")
    for n in notes[-max_notes:]:
        out.append(f"- [{n.kind}] {n.text}" + (f" (on {n.experiment})" if n.experiment else "") + f" -- {_evidence(n)}")
    if len(notes) > max_notes:
        out.append(f"- ... {len(notes) - max_notes} earlier notes left off")
    return "\n".join(out) + "\n"
