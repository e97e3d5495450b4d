"""query_rocminfo on this machine: the full device report, how long discovery took, and whether any live
value contradicts the arch table.

Writes bench/results/query_rocminfo_<device>_<date>.json (the whole DeviceReport plus timing and versions)
and .md (a readable summary); copies both to $OUT when set.

Run from the repo root: `python3 bench/query_devices.py` (PYTHONPATH=. if the package is not installed).
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import os
import platform
import re
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from evokernel_mcp.devices.discovery import query_rocminfo  # noqa: E402


def _version(pkg: str) -> str | None:
    try:
        return importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
        return None


def _markdown(report: dict, meta: dict) -> str:
    lines = [f"# query_rocminfo on {meta['device']} ({meta['date']})", "",
             f"backend: **{report['backend']}**; discovery took {meta['discovery_s']:.2f} s "
             f"(cached call {meta['cached_call_ms']:.3f} ms). Versions: {json.dumps(meta['versions'])}", ""]
    lines += [f"- tool: {t['name']} {t.get('version') or ''} ({t.get('path') or 'python'})" for t in report["tools"]]
    lines += ["", "| # | name | arch | CUs/SMs | wave | LDS/WG B | L2 B | max MHz | memory B | GB/s | provenance |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for d in report["devices"]:
        srcs = sorted({p["source"].split("#")[0] for p in report["provenance"]
                       if p["field"].startswith(f"devices[{d['index']}].")})
        lines.append(f"| {d['index']} | {d['name']} | {d['arch']} | {d['compute_units']} | {d['wavefront_size']} | "
                     f"{d['lds_bytes_per_workgroup']} | {d['l2_bytes']} | {d['max_clock_mhz']} | "
                     f"{d['memory_bytes']} | {d['peak_bandwidth_gbs']} | {', '.join(srcs)} |")
    conflicts = [(d["index"], c) for d in report["devices"] for c in d["conflicts"]]
    lines += ["", "## Conflicts (live vs arch table)", ""]
    lines += [f"- device {i} `{c['field']}`: live {c['live_value']} ({c['live_source']}) vs table "
              f"{c['table_value']} ({c['table_source'].split(' (')[0]}): {c['note']}" for i, c in conflicts] or ["none"]
    lines += ["", "## Notes", ""] + [f"- {n}" for n in report["notes"]] + [""]
    lines += ["## Offline targets", ""] + [
        f"- {t['target']}: {'available via ' + '; '.join(t['compilers']) if t['available'] else 'no compiler here'}"
        for t in report["offline_targets"]] + [""]
    return "\n".join(lines)


def main() -> int:
    t0 = time.perf_counter()
    report = query_rocminfo(refresh=True)
    discovery_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    query_rocminfo()
    cached_ms = (time.perf_counter() - t1) * 1e3
    data = report.model_dump(mode="json")
    first = data["devices"][0]["name"] if data["devices"] else f"{platform.node()}-no-gpu"
    replay = any("replay" in (t["path"] or "") for t in data["tools"])  # a test stand-in, not hardware
    device = re.sub(r"[^A-Za-z0-9]+", "-", first).strip("-").lower() + ("-replay" if replay else "")
    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")
    meta = {"device": first + (" (REPLAYED recording, not live hardware)" if replay else ""), "date": date,
            "discovery_s": discovery_s, "cached_call_ms": cached_ms,
            "host": platform.node(), "versions": {
                "python": platform.python_version(), "evokernel_mcp": _version("evokernel-mcp"),
                "torch": _version("torch"), "triton": _version("triton"), "mcp": _version("mcp")}}
    out_dir = REPO / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"query_rocminfo_{device}_{date}"
    stem.with_suffix(".json").write_text(json.dumps({"meta": meta, "report": data}, indent=2) + "\n")
    stem.with_suffix(".md").write_text(_markdown(data, meta))
    if os.environ.get("OUT"):
        for suffix in (".json", ".md"):
            shutil.copy(stem.with_suffix(suffix), Path(os.environ["OUT"]) / stem.with_suffix(suffix).name)
    print(_markdown(data, meta))
    print(f"wrote {stem}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
