"""The journal tools as plain typed functions (the MCP adapter registers them): record_note,
list_experiments, compare_experiments, best_so_far, distill, export_trajectory; and the texts of the
resources evokernel://journal/{task} and evokernel://journal/{task}/distilled."""

from __future__ import annotations

import difflib
import re
from typing import Annotated, Literal

from pydantic import Field

from evokernel_mcp.errors import BadInput, EvoError, NotFound
from evokernel_mcp.journal import compare as cmp
from evokernel_mcp.journal import distill as dst
from evokernel_mcp.journal.analysis import Rec, group, iso, main_shape, note_counts, row_of, source_checks, time_on
from evokernel_mcp.journal.analysis import best_so_far as _best
from evokernel_mcp.journal.models import (
    LABEL_PATTERN,
    RESULT_ID_PATTERN,
    BestSoFar,
    Comparison,
    Distilled,
    Evidence,
    ExperimentList,
    NoteRecord,
    TrajectoryExport,
)
from evokernel_mcp.journal.record import task_key
from evokernel_mcp.journal.store import Store, get_store
from evokernel_mcp.models import Provenance

TaskArg = Annotated[str, Field(min_length=1, max_length=400, description=(
    "Task as recorded: the shipped task name (list_tasks), or 'ref-<sha8>' for a reference given as source."))]
_RID = re.compile(RESULT_ID_PATTERN)


def _prov(store: Store, field: str = "*", detail: str | None = None) -> list[Provenance]:
    return [Provenance(field=field, source=f"journal {store.path}",
                       detail=detail or "figures as recorded by compile/verify/benchmark/profile/trace; see result ids")]


def _close(word: str, options: list[str]) -> str:
    near = difflib.get_close_matches(word, options, n=3, cutoff=0.5)
    shown = near or options[:8]
    return (" Did you mean: " if near else " Known: ") + (", ".join(shown) if shown else "none yet") + "."


def _task(store: Store, task: str) -> str:
    key = task_key(task, {})
    known = store.tasks()
    if key not in known:
        raise NotFound(f"no journal entries for task {task!r} in {store.path}.{_close(key, known)} Record some by "
                       "passing experiment=<label> (and task) to compile_kernel / verify_vs_pytorch / benchmark.",
                       next_call="list_experiments()")
    return key


def _recs(store: Store, task: str | None) -> list[Rec]:
    return [Rec.of(r) for r in store.results(task=task)]


def _experiment(store: Store, label: str, task: str | None) -> tuple[str, str]:
    """(task, label) of a label or a result id ('r-...'); NotFound with suggestions otherwise."""
    if _RID.match(label):
        row = store.result(label)
        if row is None:
            raise NotFound(f"no result {label!r} in the journal {store.path}; list_experiments shows result ids.",
                           next_call="list_experiments()")
        return row["task"], row["experiment"]
    pairs = store.labels(task_key(task, {}) if task else None)
    hits = [(t, lab) for t, lab in pairs if lab == label]
    if not hits:
        where = f" of task {task!r}" if task else ""
        raise NotFound(f"no experiment labelled {label!r}{where} in the journal.{_close(label, [p[1] for p in pairs])}",
                       next_call="list_experiments()")
    if len(hits) > 1:
        raise BadInput(f"label {label!r} exists in several tasks ({', '.join(t for t, _ in hits)}): pass task.",
                       next_call=f"list_experiments(label={label!r})")
    return hits[0]


# ---------------------------------------------------------------- record_note
def _check_evidence(store: Store, ev: dict) -> str | None:
    """Validate what the schema cannot (the id exists, the doc anchor resolves); return a linked result id."""
    kind = ev["kind"]
    if kind == "result" or (kind == "measured" and _RID.match(ev["source"].strip())):
        rid = ev["result_id"] if kind == "result" else ev["source"].strip()
        if store.result(rid) is None:
            raise NotFound(f"evidence names result {rid!r}, which is not in the journal {store.path}; use a result_id "
                           "from list_experiments (field latest) or from the tool's result.",
                           next_call="list_experiments()")
        return rid
    if kind == "doc":
        _check_doc(ev["anchor"])
    return None


def _check_doc(uri: str) -> None:
    rest = uri[len("evokernel://docs/"):]
    path, _, anchor = rest.partition("#")
    try:
        from evokernel_mcp.docs import read

        if anchor:
            read.read_doc(path, anchor)
        else:
            from evokernel_mcp.docs.safety import resolve_doc

            resolve_doc(path)
    except EvoError as e:
        raise BadInput(f"doc evidence {uri!r} does not resolve: {e} (list_docs gives paths and section anchors; "
                       "write it as evokernel://docs/<path>#<anchor>).", next_call="list_docs()") from None


def _note_task(store: Store, task: str | None, experiment: str | None, rid: str | None) -> tuple[str, str | None]:
    if experiment is not None:
        return _experiment(store, experiment, task)
    if task is not None:
        key = task_key(task, {})
        from evokernel_mcp.paths import tasks_dir

        if key not in store.tasks() and not (tasks_dir() / key / "task.yaml").is_file():
            raise NotFound(f"unknown task {task!r}: neither a shipped task (list_tasks) nor in the journal."
                           f"{_close(key, store.tasks())}", next_call="list_tasks()")
        return key, None
    if rid is not None:
        return store.result(rid)["task"], None
    raise BadInput("record_note needs task (or experiment, or result evidence) to know which journal it belongs to.",
                   next_call="record_note(text=..., evidence=..., task='<list_tasks name>')")


def record_note(
    text: Annotated[str, Field(min_length=3, max_length=4000, pattern=r"\S", description=(
        "The lesson or claim, one or two sentences (e.g. 'LDS per workgroup is 160 KB on gfx950, not 64 KB').") )],
    evidence: Annotated[Evidence | Literal["unverified"], Field(description=(
        "What backs it: {'kind':'result','result_id':'r-...'} | {'kind':'doc','anchor':'evokernel://docs/<path>"
        "#<anchor>'} | {'kind':'measured','value':1.5,'unit':'ms','source':'r-... or tool on device'} | "
        "{'kind':'unverified'} (or the string 'unverified'): distill lists those as open claims."))],
    task: Annotated[str | None, Field(max_length=400, description="Task (default: the experiment's or the "
                                      "result's task).")] = None,
    experiment: Annotated[str | None, Field(pattern=LABEL_PATTERN, description=(
        "The variant the note is about (an existing label); distill shows its lessons with its failure class."))] = None,
    kind: Annotated[Literal["lesson", "claim"], Field(description="'lesson': what was learned; 'claim': a fact "
                                                      "asserted (about hardware, a tool, the kernel).")] = "lesson",
) -> NoteRecord:
    """Record a lesson or a claim in the experiment journal, with its evidence.

    Call after a variant fails (what it taught), or when you rely on a fact: back it with a result id, a doc
    anchor, or a measured value with unit and source; mark it 'unverified' when you have no source yet, so a
    person can ask for one (distill lists every unverified note). Unknown result ids, labels, doc anchors and
    tasks are errors."""
    store = get_store()
    ev = {"kind": "unverified"} if evidence == "unverified" else evidence.model_dump(exclude_none=True)
    rid = _check_evidence(store, ev)
    key, label = _note_task(store, task, experiment, rid)
    if label is None and experiment is None and rid is not None:
        row = store.result(rid)
        if row["task"] != key:
            raise BadInput(f"result {rid} belongs to task {row['task']!r}, not {key!r}.")
    nid, created, new = store.add_note(task=key, experiment=label, kind=kind, text=text.strip(), evidence=ev,
                                       result_id=rid)
    return NoteRecord(note_id=nid, task=key, experiment=label, kind=kind, text=text.strip(), evidence=ev,
                      verified=ev["kind"] != "unverified", created_at=iso(created), already_recorded=not new,
                      provenance=_prov(store, "note_id", "stored in the journal"))


# ---------------------------------------------------------------- list / best / compare
def _rows(store: Store, task: str | None):
    recs = _recs(store, task)
    exps = group(recs)
    checks = source_checks(recs)
    counts = note_counts(store.notes(task), exps)
    return recs, exps, [row_of(e, checks, counts.get((e.task, e.label), 0)) for e in exps]


def list_experiments(
    task: Annotated[str | None, Field(max_length=400, description="Only this task (default: all).")] = None,
    label: Annotated[str | None, Field(max_length=200, description="Exact label, or a glob with * ? [] (e.g. "
                                       "'conv3d/step3*').")] = None,
    verdict: Annotated[Literal["valid", "failed", "unverified", "pending"] | None, Field(
        description="Only this verdict.")] = None,
    sort: Annotated[Literal["time", "step", "speed"], Field(description=(
        "'time': latest activity first; 'step': in the order tried; 'speed': fastest valid median on `shape` "
        "first (the rest after)."))] = "time",
    shape: Annotated[str | None, Field(max_length=100, description="Shape set for 'speed' and the times shown "
                                       "(default: the shape benchmarked most).")] = None,
    limit: Annotated[int, Field(ge=1, le=100, description="Rows per page.")] = 10,
    offset: Annotated[int, Field(ge=0, description="Rows to skip (next_offset of the previous page).")] = 0,
) -> ExperimentList:
    """List the variants tried (experiments), with verdict, failure class, time and speedup, and the latest
    result id per tool. Call at the start of a session to see where the last one stopped (or read the
    resource evokernel://journal/{task}); page with offset."""
    store = get_store()
    key = _task(store, task) if task else None
    _, exps, rows = _rows(store, key)
    if label is not None:  # a glob that matches nothing lists nothing; an unknown exact label is an error
        keep = _label_match(label, [r.label for r in rows], glob_may_miss=True)
        rows = [r for r in rows if keep(r.label)]
    if verdict is not None:
        rows = [r for r in rows if r.verdict == verdict]
    shown_shape = shape or main_shape(exps)
    if sort == "time":
        last = {(e.task, e.label): e.recs[-1].seq for e in exps}
        rows.sort(key=lambda r: last[(r.task, r.label)], reverse=True)
    elif sort == "speed":
        rows.sort(key=lambda r: (time_on(r, shown_shape) is None, time_on(r, shown_shape) or 0.0, r.step))
    page = rows[offset: offset + limit]
    nxt = offset + limit if offset + limit < len(rows) else None
    return ExperimentList(experiments=[dst.compact(r, shown_shape) for r in page], total=len(rows), offset=offset,
                          next_offset=nxt, sort=sort, shape=shown_shape, journal=str(store.path),
                          provenance=_prov(store, "experiments"))


def best_so_far(
    task: TaskArg,
    shape: Annotated[str | None, Field(max_length=100, description="One shape set (default: every shape).")] = None,
) -> BestSoFar:
    """The fastest variant per shape (and device) among VALID verdicts only: its exact source passed
    verify_vs_pytorch (and never failed it) and the benchmark judged the shape valid. Says how many
    measurements were left out and why."""
    store = get_store()
    key = _task(store, task)
    best, excluded = _best(_recs(store, key), shape)
    return BestSoFar(task=key, best=best, excluded=excluded, provenance=_prov(store, "best"))


def compare_experiments(
    a: Annotated[str, Field(min_length=1, max_length=200, description="First variant: label (or a result id).")],
    b: Annotated[str, Field(min_length=1, max_length=200, description="Second variant: label (or a result id).")],
    task: Annotated[str | None, Field(max_length=400, description="Task, when a label exists in several.")] = None,
    max_diff_lines: Annotated[int, Field(ge=0, le=2000, description="Lines of source diff returned.")] = 60,
    max_counters: Annotated[int, Field(ge=0, le=200, description="Counter deltas returned (largest change "
                                       "first).")] = 20,
) -> Comparison:
    """Compare two variants side by side: the unified diff of their sources, compile resources (registers, LDS,
    spills, occupancy), median time per shape with the ratio's interval and a verdict ('b faster' only when
    the interval excludes 1), and profiler counter / trace deltas (single readings: no interval)."""
    store = get_store()
    ta, la = _experiment(store, a, task)
    tb, lb = _experiment(store, b, task or ta)
    if ta != tb:
        raise BadInput(f"{a!r} is in task {ta!r} and {b!r} in {tb!r}: compare variants of one task.")
    recs, exps, rows = _rows(store, ta)
    ea, eb = (next(e for e in exps if e.label == lab) for lab in (la, lb))
    ra, rb = (next(r for r in rows if r.label == lab) for lab in (la, lb))
    diff = cmp.source_diff(ea.candidate_sha, store.source(ea.candidate_sha), eb.candidate_sha,
                           store.source(eb.candidate_sha), max_diff_lines)
    times, notes = cmp.time_deltas(ra, rb)
    counters, left, cnotes = cmp.counter_deltas(ea, eb, max_counters)
    res = cmp.resource_deltas(cmp.compile_resources(ea), cmp.compile_resources(eb))
    if not res:
        notes.append("no compile_kernel result recorded for both variants: no resource diff")
    return Comparison(task=ta, a=dst.compact(ra, None).model_copy(update={"times": []}),
                      b=dst.compact(rb, None).model_copy(update={"times": []}), source=diff, resources=res,
                      times=times, counters=counters, counters_left_off=left, notes=notes + cnotes,
                      provenance=_prov(store, "*", f"a: {', '.join(ra.latest.values())}; b: {', '.join(rb.latest.values())}"))


# ---------------------------------------------------------------- distill / export / resources
def _distill(store: Store, key: str, max_claims: int = 15) -> Distilled:
    return dst.build(key, _recs(store, key), store.notes(key), str(store.path), max_claims=max_claims)


def distill(
    task: TaskArg,
    max_claims: Annotated[int, Field(ge=0, le=500, description="Unverified claims listed (all are counted).")] = 15,
) -> Distilled:
    """The trail compressed: the winners (valid verdicts only), the fastest valid variants, each failure
    class once with how often it happened, its evidence and the lessons noted on it, other lessons, and
    every open unverified claim (ask for a source). Read this first when resuming a task."""
    store = get_store()
    return _distill(store, _task(store, task), max_claims)


def export_trajectory(
    task: TaskArg,
    shape: Annotated[str | None, Field(max_length=100, description="Shape set charted (default: the shape "
                                       "benchmarked most).")] = None,
    preview_chars: Annotated[int, Field(ge=0, le=20000, description="Characters of the report returned inline.")] = 3000,
    label: Annotated[str | None, Field(max_length=200, description=(
        "Only these variants: an exact label, or a glob with * ? [] (e.g. 'conv3d/step7/*'); their notes and the "
        "task's own notes (about no variant) are kept. Default: every variant of the task."))] = None,
) -> TrajectoryExport:
    """Export the task's trajectory: a markdown report (distilled summary, every variant, every note) and a
    PNG chart of time per step (valid variants with CIs, the running best, failures, the PyTorch baseline),
    stored as an artifact (read_artifact, or the resource evokernel://artifacts/{id}/report.md). `label`
    narrows it to one search's variants (a task journal often holds several searches)."""
    from evokernel_mcp import artifacts
    from evokernel_mcp.journal import export

    store = get_store()
    key = _task(store, task)
    recs, exps, rows = _rows(store, key)
    raw_notes = store.notes(key)
    if label is not None:
        keep = _label_match(label, [r.label for r in rows])
        recs = [r for r in recs if keep(r.experiment)]
        exps, rows = [e for e in exps if keep(e.label)], [r for r in rows if keep(r.label)]
        raw_notes = [n for n in raw_notes if n["experiment"] is None or keep(n["experiment"])]
    the_shape = shape or main_shape(exps)
    d = dst.build(key, recs, raw_notes, str(store.path), max_claims=500)
    notes = [dst.note_record(n) for n in raw_notes]
    report = export.report_markdown(d, rows, notes, the_shape)
    png, points = export.chart_png(key, rows, the_shape)
    aid = artifacts.put("journal", {"report.md": report, "trajectory.png": png}, detail=f"trajectory of {key}")
    preview = report[:preview_chars]
    return TrajectoryExport(
        task=key, artifact_id=aid, files=["report.md", "trajectory.png"],
        chart_uri=f"evokernel://artifacts/{aid}/trajectory.png", report_uri=f"evokernel://artifacts/{aid}/report.md",
        points=points, shape=the_shape, markdown_preview=preview, preview_left_off_chars=len(report) - len(preview),
        provenance=_prov(store, "*", "chart and report drawn from the recorded results"))


def _label_match(label: str, known: list[str], glob_may_miss: bool = False):
    """A predicate on labels: `label` as a glob (* ? []) or exact; NotFound where it matches none of `known`
    (a glob may match none where glob_may_miss)."""
    import fnmatch

    glob = any(ch in label for ch in "*?[")
    keep = (lambda lab: lab is not None and fnmatch.fnmatchcase(lab, label)) if glob else (lambda lab: lab == label)
    if not (glob and glob_may_miss) and not any(keep(k) for k in known):
        raise NotFound(f"no experiment labelled {label!r}.{_close(label, known)}", next_call="list_experiments()")
    return keep


def journal_markdown(task: str) -> str:
    store = get_store()
    key = _task(store, task)
    _, exps, rows = _rows(store, key)
    notes = [dst.note_record(n, dst.NOTE_TEXT_MAX) for n in store.notes(key)]
    return dst.render_journal(key, rows, notes, main_shape(exps))


def distilled_markdown(task: str) -> str:
    store = get_store()
    return dst.render_distilled(_distill(store, _task(store, task)))


__all__ = ["best_so_far", "compare_experiments", "distill", "distilled_markdown", "export_trajectory",
           "journal_markdown", "list_experiments", "record_note"]
