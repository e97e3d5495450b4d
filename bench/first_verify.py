"""Seconds from the server's spawn to the answer of its first verify_vs_pytorch, through a real MCP client
talking to a stdio server subprocess.

    PYTHONPATH=. python3 bench/first_verify.py [--task vector_add] [--shapes small] [--torch] [--delay-s 0]
                                               [--warm-start auto|on|off]

Spawns `python -m evokernel_mcp serve`, initializes, calls verify_vs_pytorch right away (or after --delay-s,
to see what a server that had time to warm its runner answers) and prints: spawn to initialized, spawn to
the first verify's answer, and that verify's own round trip. The runner's log (under the server's home,
workers/*.stderr.log) says where its start went. Writes bench/results/first_verify_<device>_<date>.md (and a
copy under $OUT when set) with device, date and versions. Target (GPU, runner warmed at startup): the first
verify answers within 10 s of the spawn.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import time
from pathlib import Path

import anyio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.results_file import write_result  # noqa: E402

CANDIDATE = REPO / "tests" / "verify" / "candidates" / "vadd_triton.py"
TORCH_CANDIDATE = "import torch\n\n\ndef run(x, y):\n    return torch.add(x, y)\n"
TARGET_S = 10.0


async def measure(task: str, shapes: list[str], candidate: str, delay_s: float, warm_start: str = "auto") -> dict:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    params = StdioServerParameters(command=sys.executable, args=["-m", "evokernel_mcp", "serve", "--warm-start", warm_start],
                                   env=env,
                                   cwd=str(REPO))
    args = {"task": task, "candidate": candidate, "shapes": shapes, "seeds": 1, "wait_s": 300, "timeout_s": 300}
    t0 = time.perf_counter()
    async with Client(params) as c:
        t_init = time.perf_counter() - t0
        if delay_s:
            await anyio.sleep(delay_s)
        t1 = time.perf_counter()
        r = await c.call_tool("verify_vs_pytorch", args)
        t_first = time.perf_counter() - t0
        call_s = time.perf_counter() - t1
        res = r.structured_content or {}
        t2 = time.perf_counter()
        r2 = await c.call_tool("verify_vs_pytorch", args)
        second_s = time.perf_counter() - t2
    return {"warm_start": warm_start, "init_s": t_init, "first_s": t_first, "call_s": call_s, "second_s": second_s,
            "delay_s": delay_s,
            "passed": bool(res.get("passed")) and not r.is_error, "result": res,
            "second_passed": bool((r2.structured_content or {}).get("passed"))}


def write_report(m: dict, task: str, shapes: list[str], what: str) -> Path:
    res = m["result"]
    device = res.get("device") or "unknown"
    name = str(res.get("device_name") or device).replace(" ", "_").replace("/", "_")
    now = dt.datetime.now()
    vers = res.get("versions") or {}
    met = m["passed"] and m["first_s"] - m["delay_s"] <= TARGET_S
    lines = [
        f"# first verify after the server's start ({now.isoformat(timespec='seconds')})", "",
        f"- candidate: {what}; task {task}, shapes {shapes}, seeds=1",
        f"- host: {platform.node()}; CPUs: {os.cpu_count()}; device: {device} ({res.get('device_name')})",
        f"- versions: python {platform.python_version()}, torch {vers.get('torch')}, triton {vers.get('triton')}, "
        f"cuda {vers.get('cuda')}, hip {vers.get('hip')}",
        "- path: MCP Client -> stdio server subprocess (spawned by this script) -> job manager -> runner -> "
        f"sandboxed reference and candidate processes; serve --warm-start {m['warm_start']}", "",
        "| measure | seconds |", "|---|---|",
        f"| spawn -> initialized | {m['init_s']:.2f} |",
        f"| wait before the first call (--delay-s) | {m['delay_s']:.2f} |",
        f"| spawn -> first verify answered ({'passed' if m['passed'] else 'NOT passed'}) | {m['first_s']:.2f} |",
        f"| first verify's round trip alone | {m['call_s']:.2f} |",
        f"| second verify's round trip ({'passed' if m['second_passed'] else 'NOT passed'}) | {m['second_s']:.2f} |",
        "", f"Target: the first verify answers within {TARGET_S:g} s of the spawn (less any --delay-s) -> "
        f"{'MET' if met else 'NOT MET'}.",
    ]
    return write_result(f"first_verify_{name}_{now.date().isoformat()}_warm-{m['warm_start']}.md", "\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="vector_add")
    ap.add_argument("--shapes", nargs="+", default=["small"])
    ap.add_argument("--candidate", type=Path, default=CANDIDATE)
    ap.add_argument("--torch", action="store_true", help="a plain torch candidate (no JIT compile) instead")
    ap.add_argument("--delay-s", type=float, default=0.0, help="wait this long after initialize before verifying")
    ap.add_argument("--warm-start", choices=["auto", "on", "off"], default="auto",
                    help="the server's --warm-start (auto: on where the first device is a GPU)")
    a = ap.parse_args()
    src = TORCH_CANDIDATE if a.torch else a.candidate.read_text()
    what = "plain torch (torch.add)" if a.torch else f"{a.candidate.name} (Triton JIT compile in a fresh process)"
    m = anyio.run(measure, a.task, a.shapes, src, a.delay_s, a.warm_start)
    path = write_report(m, a.task, a.shapes, what)
    print(path.read_text())
    print(f"wrote {path}")
    if not m["passed"]:
        print(f"first verify did not pass: {m['result']}", file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
