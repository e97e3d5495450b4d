"""From recorded results to experiments: verdicts, times, best_so_far. Pure functions over rows."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from evokernel_mcp.journal.models import BestEntry, ExperimentRow, ShapeTime

VERIFY, BENCH, COMPILE = "verify_vs_pytorch", "benchmark", "compile_kernel"
RUN_TOOLS = (VERIFY, BENCH, "profile_pmc", "thread_trace")


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass
class Rec:
    """One recorded tool call, decoded."""

    seq: int
    id: str
    created_at: float
    task: str
    experiment: str
    tool: str
    sha: str | None
    summary: dict[str, Any]
    verdict: str
    failure_class: str | None
    device: str | None

    @classmethod
    def of(cls, row: sqlite3.Row) -> "Rec":
        try:
            summary = json.loads(row["summary"])
        except (TypeError, ValueError):
            summary = {}
        return cls(seq=row["seq"], id=row["id"], created_at=row["created_at"], task=row["task"],
                   experiment=row["experiment"], tool=row["tool"], sha=row["source_sha256"],
                   summary=summary if isinstance(summary, dict) else {}, verdict=row["verdict"],
                   failure_class=row["failure_class"], device=row["device"])


@dataclass
class Experiment:
    task: str
    label: str
    step: int
    recs: list[Rec] = field(default_factory=list)

    def latest(self, tool: str, *, done: bool = False) -> Rec | None:
        for r in reversed(self.recs):
            if r.tool == tool and not (done and r.verdict == "pending"):
                return r
        return None

    @property
    def candidate_sha(self) -> str | None:
        for r in reversed(self.recs):
            if r.tool in RUN_TOOLS and r.sha:
                return r.sha
        comp = self.latest(COMPILE)
        return comp.sha if comp else None


@dataclass
class SourceChecks:
    """Per (task, source sha): the verify results seen."""

    ok: dict[tuple[str, str], str] = field(default_factory=dict)   # -> latest passing verify id
    failed: set[tuple[str, str]] = field(default_factory=set)

    def state(self, task: str, sha: str | None) -> str:
        if sha is None:
            return "unverified_source"
        if (task, sha) in self.failed:
            return "failed_verify"
        return "verified" if (task, sha) in self.ok else "unverified_source"


def source_checks(recs: list[Rec]) -> SourceChecks:
    sc = SourceChecks()
    for r in recs:
        if r.tool != VERIFY or r.sha is None:
            continue
        if r.verdict == "ok":
            sc.ok[(r.task, r.sha)] = r.id
        elif r.verdict == "failed":
            sc.failed.add((r.task, r.sha))
    return sc


def group(recs: list[Rec]) -> list[Experiment]:
    """Experiments in order of first appearance; step counts per task from 1."""
    by_key: dict[tuple[str, str], Experiment] = {}
    steps: Counter[str] = Counter()
    for r in recs:
        key = (r.task, r.experiment)
        if key not in by_key:
            steps[r.task] += 1
            by_key[key] = Experiment(task=r.task, label=r.experiment, step=steps[r.task])
        by_key[key].recs.append(r)
    return list(by_key.values())


def _detail(r: Rec) -> str | None:
    s = r.summary
    if r.tool == COMPILE:
        errs = [e for e in s.get("errors") or [] if e]
        return "compile failed: " + (errs[0] if errs else "no diagnostic")
    if r.tool == VERIFY:
        return s.get("failure_detail") or (s.get("error") or {}).get("message")
    if r.tool == BENCH:
        bad = [x for x in s.get("shapes") or [] if not x.get("valid")]
        if bad:
            why = bad[0].get("invalid_detail") or "; ".join(bad[0].get("flags") or [])
            return f"benchmark shape {bad[0].get('shape')}: {bad[0].get('invalid_reason')}" + (f" ({why})" if why else "")
        return s.get("error")
    return None


def verdict_of(e: Experiment, checks: SourceChecks) -> tuple[str, str | None, str | None, Rec | None]:
    """(verdict, failure_class, failure_detail, the result that decided it)."""
    comp, ver, bench = e.latest(COMPILE), e.latest(VERIFY), e.latest(BENCH)
    last_run = max((r.seq for r in (ver, bench) if r), default=-1)
    if comp and comp.verdict == "failed" and comp.seq > last_run:
        return "failed", comp.failure_class, _detail(comp), comp
    if ver and ver.verdict == "failed":
        return "failed", ver.failure_class, _detail(ver), ver
    if bench and bench.verdict == "failed":
        return "failed", bench.failure_class, _detail(bench), bench
    if ver and ver.verdict == "pending":
        return "pending", None, None, ver
    if ver and ver.verdict == "ok":
        if bench is None or bench.verdict == "pending" or checks.state(e.task, bench.sha) == "verified":
            return "valid", None, None, ver
        return "unverified", None, "the benchmarked source differs from the verified one", bench
    if bench and bench.verdict == "pending":
        return "pending", None, None, bench
    return "unverified", None, None, None


def shape_times(bench: Rec | None) -> list[ShapeTime]:
    if bench is None or bench.verdict == "pending":
        return []
    out = []
    for s in bench.summary.get("shapes") or []:
        out.append(ShapeTime(
            shape=str(s.get("shape")), median_ms=s.get("median_ms"), ci_median_ms=s.get("ci_median_ms"),
            baseline_median_ms=s.get("baseline_median_ms"), speedup=s.get("speedup"), speedup_ci=s.get("speedup_ci"),
            baseline=bench.summary.get("baseline"),
            noise=s.get("noise"), valid=bool(s.get("valid")), invalid_reason=s.get("invalid_reason"),
            fraction_of_roofline=s.get("fraction_of_roofline"), device=bench.device, result_id=bench.id))
    return out


def row_of(e: Experiment, checks: SourceChecks, note_count: int = 0) -> ExperimentRow:
    verdict, cls, detail, _ = verdict_of(e, checks)
    comp = e.latest(COMPILE, done=True)
    latest: dict[str, str] = {}
    for r in e.recs:
        latest[r.tool] = r.id
    return ExperimentRow(
        task=e.task, label=e.label, step=e.step, verdict=verdict, failure_class=cls, failure_detail=detail,
        times=shape_times(e.latest(BENCH, done=True)), resources=(comp.summary.get("kernels") or []) if comp else [],
        latest=latest, candidate_sha256=e.candidate_sha, results=len(e.recs), notes=note_count,
        first_at=iso(e.recs[0].created_at), last_at=iso(e.recs[-1].created_at))


def note_counts(notes: list[sqlite3.Row], exps: list[Experiment]) -> dict[tuple[str, str], int]:
    owner = {r.id: (e.task, e.label) for e in exps for r in e.recs}
    counts: Counter[tuple[str, str]] = Counter()
    for n in notes:
        key = (n["task"], n["experiment"]) if n["experiment"] else owner.get(n["result_id"] or "")
        if key:
            counts[key] += 1
    return counts


def main_shape(exps: list[Experiment]) -> str | None:
    """The shape benchmarked most often; ties: the one with the slowest baseline (the largest)."""
    seen: Counter[str] = Counter()
    base: dict[str, float] = defaultdict(float)
    cand: dict[str, float] = defaultdict(float)
    for e in exps:
        for r in e.recs:
            if r.tool == BENCH:
                for s in r.summary.get("shapes") or []:
                    name = str(s.get("shape"))
                    seen[name] += 1
                    base[name] = max(base[name], s.get("baseline_median_ms") or 0.0)
                    cand[name] = max(cand[name], s.get("median_ms") or 0.0)
    if not seen:
        return None
    return max(seen, key=lambda n: (seen[n], base[n], cand[n]))


def time_on(row: ExperimentRow, shape: str | None) -> float | None:
    for t in row.times:
        if t.shape == shape and t.valid and t.median_ms is not None:
            return t.median_ms
    return None


def best_so_far(recs: list[Rec], shape: str | None = None) -> tuple[list[BestEntry], dict[str, int]]:
    """Per (shape, device): the fastest benchmark of a source whose verify passed (and never failed), on a
    shape the benchmark itself judged valid. Returns (best entries, excluded counts by reason)."""
    checks = source_checks(recs)
    steps = {(e.task, e.label): e.step for e in group(recs)}
    best: dict[tuple[str, str | None], tuple[Rec, dict[str, Any]]] = {}
    count: Counter[tuple[str, str | None]] = Counter()
    excluded: Counter[str] = Counter()
    for r in recs:
        if r.tool != BENCH or r.verdict == "pending":
            continue
        state = checks.state(r.task, r.sha)
        for s in r.summary.get("shapes") or []:
            name = str(s.get("shape"))
            if shape is not None and name != shape:
                continue
            if not s.get("valid"):
                excluded[str(s.get("invalid_reason") or "invalid")] += 1
            elif state != "verified":
                excluded[state] += 1
            elif s.get("median_ms") is None:
                excluded["no_time"] += 1
            else:
                key = (name, r.device)
                count[key] += 1
                if key not in best or s["median_ms"] < best[key][1]["median_ms"]:
                    best[key] = (r, s)
    out = []
    for (name, device), (r, s) in best.items():
        out.append(BestEntry(
            shape=name, device=device, label=r.experiment, step=steps[(r.task, r.experiment)], median_ms=s["median_ms"],
            ci_median_ms=s.get("ci_median_ms"), speedup=s.get("speedup"), speedup_ci=s.get("speedup_ci"),
            baseline_median_ms=s.get("baseline_median_ms"), baseline=r.summary.get("baseline"),
            verify_result_id=checks.ok[(r.task, r.sha)],
            result_id=r.id, candidates=count[(name, device)]))
    return out, dict(excluded)
