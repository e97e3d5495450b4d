"""Time the docs index: cold build, cached lookup, BM25 build and a search; write a results table.

Run from the repo root: `python3 bench/docs_index.py` (no GPU needed). Prints the table and writes
bench/results/docs_index_<YYYY-MM-DD>.md (and $OUT/docs_index_<date>.md when $OUT is set).
"""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import sys
import time
from importlib.metadata import version
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.results_file import write_result  # noqa: E402
from evokernel_mcp.docs import index as docs_index  # noqa: E402
from evokernel_mcp.docs import read  # noqa: E402

QUERIES = ["LDS size gfx950", "sched_group_barrier mask", "s_waitcnt lgkmcnt", "bank conflicts padding"]


def _ms(fn, repeat: int) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), min(times)


def _cold() -> None:
    docs_index._CACHE.clear()
    docs_index.get_index()


def _cold_search() -> None:
    _cold()
    read.search_docs(QUERIES[0])


def main() -> None:
    t0 = time.perf_counter()
    _cold()  # first build includes markdown-it's lazy set-up
    first_ms = (time.perf_counter() - t0) * 1e3
    idx = docs_index.get_index()
    rows = [
        ("first build in this process (incl. parser warm-up)", first_ms, first_ms),
        ("cold build (scan + parse all pages)", *_ms(_cold, 20)),
        ("cached get_index (scan + stat only)", *_ms(docs_index.get_index, 50)),
        ("cold build + BM25 build + 1 search", *_ms(_cold_search, 10)),
        ("search_docs, warm (4 queries)", *_ms(lambda: [read.search_docs(q) for q in QUERIES], 50)),
    ]
    date = datetime.date.today().isoformat()
    n_sections = sum(len(p.sections) for p in idx.pages.values())
    lines = [
        f"# Docs index timings, {date}", "",
        f"- host: {platform.node()} {platform.machine()} ({os.cpu_count()} CPUs), {platform.platform()}",
        f"- python {platform.python_version()}, markdown-it-py {version('markdown-it-py')}, "
        f"mcp {version('mcp')}",
        f"- docs: {len(idx.pages)} pages, {n_sections} sections, "
        f"{sum(p.size_bytes for p in idx.pages.values())} bytes under {idx.base}", "",
        "| step | median ms | min ms |", "|---|---|---|",
        *[f"| {name} | {med:.2f} | {mn:.2f} |" for name, med, mn in rows],
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    write_result(f"docs_index_{date}.md", text)


if __name__ == "__main__":
    main()
