"""`evokernel-mcp selftest`: argument parsing and the printed table (the only stdout writer of this package)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import anyio


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("selftest", help="run every tool end to end through the MCP client on a shipped task; "
                       "pass/fail/skip table with timings and versions (exit 1 on any failure)")
    p.add_argument("--capture", metavar="DIR", help="also save the raw tool outputs (fixtures layout + manifest.json)")
    p.add_argument("--only", help="comma-separated steps (prefixes work, e.g. 'compile,profile_pmc_memory')")
    p.add_argument("--quick", action="store_true", help="skip the slow steps (verify, benchmark, profile, trace)")
    p.add_argument("--json", action="store_true", dest="as_json", help="print the report as JSON")
    p.add_argument("--inproc", action="store_true", help="run the server in this process instead of over stdio")
    p.add_argument("--step-timeout-s", type=float, default=900.0, help="time limit of one step (default 900)")
    p.add_argument("--check-bundle", metavar="DIR", help="only parse a captured bundle back with our parsers")
    return p


def _table(report) -> str:
    lines = [f"evokernel-mcp selftest on {report.host} ({report.started_utc}), backend {report.backend}"]
    for d in report.devices:
        lines.append(f"  {d}")
    lines.append(f"{'step':22s} {'status':9s} {'time':>8s}  detail")
    for s in report.steps:
        t = f"{s.duration_s:.1f}s" if s.duration_s is not None else "-"
        lines.append(f"{s.name:22s} {s.status.upper():9s} {t:>8s}  {s.detail[:160]}")
    lines.append("versions: " + ", ".join(f"{k} {v}" for k, v in report.versions.items() if v))
    lines.append("missing:  " + (", ".join(k for k, v in report.versions.items() if not v) or "-"))
    c = report.counts()
    lines.append(f"{c['pass']} passed, {c['fail']} failed, {c['degraded']} degraded, {c['skip']} skipped"
                 + (f"; raw outputs in {report.capture_dir} (send that directory back)" if report.capture_dir else ""))
    return "\n".join(lines)


def _check(root: str, as_json: bool) -> int:
    from evokernel_mcp.selftest.bundle import check_bundle

    man, checks = check_bundle(Path(root))
    if as_json:
        print(json.dumps({"manifest": man.model_dump(mode="json"), "checks": [c.model_dump() for c in checks]},
                         indent=1))
    else:
        for c in checks:
            print(f"{'OK ' if c.ok else 'BAD'} {c.parser:30s} {c.path}  {c.detail[:120]}")
        print(f"{sum(c.ok for c in checks)} of {len(checks)} files parse; {len(man.skipped)} not captured")
    return 0 if all(c.ok for c in checks) else 1


def run(ns: argparse.Namespace) -> int:
    if ns.check_bundle:
        return _check(ns.check_bundle, ns.as_json)
    from evokernel_mcp.selftest.runner import run_selftest

    only = [o.strip() for o in ns.only.split(",") if o.strip()] if ns.only else None
    try:
        report = anyio.run(lambda: run_selftest(only=only, quick=ns.quick, capture_dir=ns.capture, inproc=ns.inproc,
                                                step_timeout_s=ns.step_timeout_s))
    except ValueError as e:
        print(f"selftest: {e}", file=sys.stderr)
        return 2
    print(report.model_dump_json(indent=1) if ns.as_json else _table(report))
    return report.exit_code
