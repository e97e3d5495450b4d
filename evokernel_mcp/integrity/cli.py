"""`evokernel-mcp integrity`: argument parsing and the printed table (stdout is this command's, not a server's)."""

from __future__ import annotations

import argparse
import sys

import anyio

from evokernel_mcp.integrity.models import FAMILIES, Report, Row


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("integrity", help="replay the shipped exploit corpus against a fresh server on this host's "
                       "device; a table of exploit, expected defence, what happened, held/broke (exit 1 if any broke)")
    p.add_argument("--families", help=f"comma-separated families (default all: {','.join(FAMILIES)})")
    p.add_argument("--only", help="comma-separated exploit names")
    p.add_argument("--device", help="device id passed to every tool (default: the server's first)")
    p.add_argument("--json", action="store_true", dest="as_json", help="print the report as JSON (same rows)")
    p.add_argument("--inproc", action="store_true", help="run the server in this process instead of over stdio")
    p.add_argument("--list", action="store_true", dest="list_only", help="list the corpus and exit")
    return p


def table(report: Report) -> str:
    """One block per family: a screen each for a full run."""
    lines = [f"evokernel-mcp integrity on {report.device} ({report.backend}, {report.started_utc}); "
             + ", ".join(f"{k} {v}" for k, v in report.versions.items() if v)]
    for fam in FAMILIES:
        rows = [r for r in report.rows if r.family == fam]
        if not rows:
            continue
        lines += ["", f"## {fam}: {sum(r.held for r in rows)} of {len(rows)} held",
                  f"{'exploit':34s} {'tool':10s} {'result':6s} what happened"]
        for r in rows:
            lines.append(f"{r.exploit[:34]:34s} {r.tool.split('_')[0][:10]:10s} {'held' if r.held else 'BROKE':6s} "
                         f"{r.observed[:110]}")
    lines.append("")
    held = sum(r.held for r in report.rows)
    lines.append(f"{held} held, {len(report.rows) - held} broke, {len(report.skipped)} not for this device")
    return "\n".join(lines)


def _progress(row: Row) -> None:
    print(f"[integrity] {row.family}/{row.exploit}: {'held' if row.held else 'BROKE'} ({row.seconds}s)",
          file=sys.stderr, flush=True)


def run(ns: argparse.Namespace) -> int:
    from evokernel_mcp.integrity.corpus import load_corpus

    fams = [f.strip() for f in ns.families.split(",") if f.strip()] if ns.families else None
    unknown = sorted(set(fams or []) - set(FAMILIES))
    if unknown:
        print(f"integrity: unknown families {unknown}; known: {list(FAMILIES)}", file=sys.stderr)
        return 2
    if ns.list_only:
        for ex in load_corpus():
            if not fams or ex.family in fams:
                print(f"{ex.family:10s} {ex.name:36s} {ex.tool:18s} {ex.expect.describe()[:60]}  [{ex.source[:60]}]")
        return 0
    from evokernel_mcp.integrity.replay import run_integrity

    names = [n.strip() for n in ns.only.split(",") if n.strip()] if ns.only else None
    report = anyio.run(lambda: run_integrity(fams, names, ns.device, ns.inproc, _progress))
    print(report.model_dump_json(indent=1) if ns.as_json else table(report))
    return report.exit_code
