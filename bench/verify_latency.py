"""verify_vs_pytorch latency through a real MCP client talking to a stdio server subprocess.

    PYTHONPATH=. python3 bench/verify_latency.py [--task vector_add] [--shapes small] [--reps 20]

Measures (1) cold start: server spawn + initialize + the first verify (which starts the runner:
torch/triton import, first kernel compile), and (2) warm verify round trip: median/min/max of --reps
repeated calls (same candidate, seeds=1). Writes bench/results/verify_latency_<device>_<date>.md
(and a copy under $OUT when set) with device, date and versions. Target (GPU): warm < 0.5 s.
Also (3) 50 different candidates verified back to back (each a fresh sandboxed process).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import anyio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.results_file import write_result  # noqa: E402

CANDIDATE = (REPO / "tests" / "verify" / "candidates" / "vadd_triton.py")


def variants(candidate: str, n: int) -> list[str]:
    """n DIFFERENT sources (a distinct comment each): no process or compile cache may serve two of them."""
    return [f"# candidate variant {i}\n_VARIANT = {i}\n" + candidate for i in range(n)]


async def measure(task: str, shapes: list[str], reps: int, candidate: str, pace_s: float = 1.0,
                  n_distinct: int = 50) -> dict:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    params = StdioServerParameters(command=sys.executable, args=["-m", "evokernel_mcp", "serve"], env=env,
                                   cwd=str(REPO))
    args = {"task": task, "candidate": candidate, "shapes": shapes, "seeds": 1, "wait_s": 300, "timeout_s": 300}
    t0 = time.perf_counter()
    async with Client(params) as c:
        t_init = time.perf_counter() - t0
        r = await c.call_tool("verify_vs_pytorch", args)
        t_first = time.perf_counter() - t0
        if r.is_error or not r.structured_content.get("passed"):
            raise SystemExit(f"first verify did not pass: {r.structured_content or r.content}")
        first = r.structured_content
        warm = []
        for _ in range(reps):  # one call per second (the spares are replaced between calls)
            t = time.perf_counter()
            r = await c.call_tool("verify_vs_pytorch", args)
            warm.append(time.perf_counter() - t)
            print(f"warm {len(warm)}: {warm[-1]:.3f} s", file=sys.stderr, flush=True)
            assert not r.is_error and r.structured_content["passed"], r
            await anyio.sleep(max(0.0, pace_s - warm[-1]))
        t = time.perf_counter()
        distinct_ok, each = 0, []
        for src in variants(candidate, n_distinct):  # back to back: each a fresh process, a cold compile
            t1 = time.perf_counter()
            r = await c.call_tool("verify_vs_pytorch", {**args, "candidate": src})
            each.append(time.perf_counter() - t1)
            distinct_ok += bool(not r.is_error and r.structured_content.get("passed"))
            print(f"distinct {len(each)}: {each[-1]:.3f} s", file=sys.stderr, flush=True)
        distinct_s = time.perf_counter() - t
    return {"init_s": t_init, "cold_s": t_first, "warm": warm, "result": first, "distinct_s": distinct_s,
            "distinct_n": n_distinct, "distinct_ok": distinct_ok, "distinct_each": each}


TORCH_CANDIDATE = "import torch\n\n\ndef run(x, y):\n    return torch.add(x, y)\n"


def write_report(m: dict, task: str, shapes: list[str], tag: str = "", what: str = "") -> Path:
    res = m["result"]
    device = res.get("device") or "unknown"
    name = (res.get("device_name") or device).replace(" ", "_").replace("/", "_")
    now = dt.datetime.now()
    w = sorted(m["warm"])
    vers = res.get("versions", {})
    lines = [
        f"# verify_vs_pytorch latency ({now.isoformat(timespec='seconds')})", "",
        f"- candidate: {what}",
        f"- host: {platform.node()}; CPUs: {os.cpu_count()}; device: {device} ({res.get('device_name')})",
        f"- versions: python {platform.python_version()}, torch {vers.get('torch')}, triton {vers.get('triton')}, "
        f"cuda {vers.get('cuda')}, hip {vers.get('hip')}",
        "- path: MCP Client -> stdio server subprocess -> job manager -> runner -> sandboxed reference and candidate "
        f"processes; task {task}, shapes {shapes}, "
        "seeds=1 (candidate run twice + reference native and float64)", "",
        "| measure | seconds |", "|---|---|",
        f"| server spawn + initialize | {m['init_s']:.3f} |",
        f"| cold: spawn + initialize + first verify (runner start, imports, first compile) | {m['cold_s']:.3f} |",
        f"| warm verify round trip, median of {len(w)} | {statistics.median(w):.4f} |",
        f"| warm min / max | {w[0]:.4f} / {w[-1]:.4f} |",
        f"| {m['distinct_n']} different candidates back to back, total ({m['distinct_ok']} passed) | "
        f"{m['distinct_s']:.2f} |",
        f"| ... per candidate | {m['distinct_s'] / max(m['distinct_n'], 1):.3f} |",
        f"| ... per candidate, median / max | {statistics.median(m['distinct_each'] or [0]):.3f} / "
        f"{max(m['distinct_each'] or [0]):.3f} |", "",
        "Each different candidate is a new source: a fresh sandboxed process (and, for Triton, a cold compile: "
        "the compile cache is kept per source, runtime/kernel_cache.py, so only the warm calls of one source "
        "reuse it).", "",
        f"Isolation in force: {res.get('isolation')} (each candidate in a fresh sandboxed process; the reference "
        "in its own cached process). Earlier shared-runner figures (one process for every job, no sandbox): "
        "25 ms warm verify, ~9 s cold (CHANGELOG.md).", "",
        f"Target on the GPU machine: warm median < 0.5 s -> {'MET' if statistics.median(w) < 0.5 else 'NOT MET'}.",
    ]
    return write_result(f"verify_latency_{name}_{now.date().isoformat()}{'_' + tag if tag else ''}.md", "\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="vector_add")
    ap.add_argument("--shapes", nargs="+", default=["small"])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--candidate", type=Path, default=CANDIDATE)
    ap.add_argument("--torch", action="store_true", help="a plain torch candidate (no JIT compile) instead")
    ap.add_argument("--tag", default="", help="suffix of the result file")
    ap.add_argument("--pace-s", type=float, default=1.0, help="one warm call per this many seconds")
    ap.add_argument("--distinct", type=int, default=50, help="different candidates evaluated back to back")
    a = ap.parse_args()
    src = TORCH_CANDIDATE if a.torch else a.candidate.read_text()
    what = ("plain torch (torch.add; nothing to compile)" if a.torch
            else f"{a.candidate.relative_to(REPO) if a.candidate.is_relative_to(REPO) else a.candidate} (Triton: a JIT "
            "compile in each fresh process)")
    m = anyio.run(measure, a.task, a.shapes, a.reps, src, a.pace_s, a.distinct)
    path = write_report(m, a.task, a.shapes, a.tag, what)
    print(path.read_text())
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
