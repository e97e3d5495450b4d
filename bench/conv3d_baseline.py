"""The flagship task's PyTorch baseline on the GPU, with % of roofline, through our benchmark tool.

conv3d_depthwise (bf16, x [1,512,61,45,80], w [512,1,3,5,5], padding (0,2,2), groups=512; 16.31 GFLOP):
measure_ceilings first (copy GB/s, matmul TFLOP/s), then benchmark() with the PyTorch reference as the
baseline and the same PyTorch call as the candidate (a self-check: the speedup must be ~1 and flagged
as noise). Rooflines with the vector-ALU peak (what a depthwise conv runs on) and, for reference, the
matrix-unit peak.

Run on the GPU machine from the repo root:  PYTHONPATH=. python3 bench/conv3d_baseline.py
Writes bench/results/conv3d_baseline_<device>_<date>.{md,json} (and copies under $OUT when set).
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("EVOKERNEL_DEVICES", "cuda:0")  # this script's own runner pool (not the server's)

import anyio  # noqa: E402

from evokernel_mcp.app import close_app  # noqa: E402
from evokernel_mcp.benchmark import roofline as rl  # noqa: E402
from evokernel_mcp.benchmark.api import benchmark, measure_ceilings  # noqa: E402
from evokernel_mcp.tasks import load_task  # noqa: E402

TORCH_CANDIDATE = '''
import torch.nn.functional as F


def run(x, weight):
    return F.conv3d(x, weight, bias=None, stride=1, padding=(0, 2, 2), groups=x.shape[1])
'''
SHAPES = ["medium", "full"]


def matrix_roofline(res, task) -> dict:
    """The same medians against the matrix-unit bf16 peak (datasheet) and the measured bf16 matmul rate."""
    out = {}
    name = res.device.split(": ", 1)[-1] if res.device else None
    arch = "sm_90" if name and ("H100" in name or "H200" in name) else None
    for sr in res.results:
        if arch is None or sr.baseline is None:
            continue
        ss = task.shape_set(sr.shape)
        bw, tf = rl.datasheet_peaks(arch, rl.resolve_product(arch, name), "bf16", "matrix")
        r = rl.compute_roofline(sr.baseline.median_ms, ss.bytes, ss.flops, peak_gbs=bw.value if bw else None,
                                peak_tflops=tf.value if tf else None)
        out[sr.shape] = r.model_dump()
    return out


async def run() -> dict:
    rep: dict = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    ceil = await measure_ceilings(refresh=True, wait_s=300)
    rep["ceilings"] = ceil.model_dump(mode="json")
    res = await benchmark(candidate=TORCH_CANDIDATE, task="conv3d_depthwise", shapes=SHAPES, compute_unit="vector",
                          min_reps=30, max_time_s=3.0, target_rel_ci=0.003, wait_s=500, timeout_s=500)
    rep["benchmark"] = res.model_dump(mode="json")
    rep["matrix_roofline"] = matrix_roofline(res, load_task("conv3d_depthwise"))
    await close_app()
    return rep


def rows(rep: dict) -> list[str]:
    b = rep["benchmark"]
    out = ["| shape | PyTorch median ms | CI | reps | GB/s | TFLOP/s | roofline ms (vector) | bound | % of roofline "
           "| % peak BW | % measured BW | self-speedup | noise |", "|" + "---|" * 13]
    for r in b["results"]:
        base, roof = r["baseline"], r["baseline_roofline"] or {}
        pct = lambda v: "-" if v is None else f"{100 * v:.1f}%"  # noqa: E731
        num = lambda v, p=3: "-" if v is None else f"{v:.{p}f}"  # noqa: E731
        out.append(f"| {r['shape']} | {num(base['median_ms'], 4)} | [{num(base['ci_median_ms'][0], 4)}, "
                   f"{num(base['ci_median_ms'][1], 4)}] | {base['reps']} | {num(roof.get('achieved_gbs'), 0)} | "
                   f"{num(roof.get('achieved_tflops'), 2)} | {num(roof.get('roofline_ms'), 4)} | {roof.get('bound')} | "
                   f"{pct(roof.get('fraction_of_roofline'))} | {pct(roof.get('fraction_of_peak_bandwidth'))} | "
                   f"{pct(roof.get('fraction_of_measured_bandwidth'))} | {num(r['speedup'])} | {r['noise']} |")
    return out


def main() -> None:
    rep = anyio.run(run)
    b = rep["benchmark"]
    day = rep["date"][:10]
    dev = (b.get("device") or "unknown").split(": ", 1)[-1].replace("NVIDIA ", "").replace(" ", "_")
    c = rep["ceilings"]
    md = [f"# conv3d_depthwise PyTorch baseline: {b.get('device')}, {rep['date']}", "",
          f"versions {json.dumps(b.get('versions'))}; clocks {json.dumps(b.get('clocks'))}",
          f"measured ceilings: copy {c.get('copy_gbs') or 0:.0f} GB/s, matmul {json.dumps(c.get('matmul_tflops'))} "
          "TFLOP/s", f"timing: {b.get('timing_method')}", "", *rows(rep), "",
          f"Matrix-unit (bf16 tensor core) roofline for the same medians: {json.dumps(rep['matrix_roofline'])}", "",
          f"error: {json.dumps(b.get('error'))}; flags: {json.dumps([r['flags'] for r in b['results']])}"]
    text = "\n".join(md) + "\n"
    targets = [REPO / "bench" / "results"] + ([Path(os.environ["OUT"])] if os.environ.get("OUT") else [])
    for d in targets:
        d.mkdir(parents=True, exist_ok=True)
        (d / f"conv3d_baseline_{dev}_{day}.md").write_text(text)
        (d / f"conv3d_baseline_{dev}_{day}.json").write_text(json.dumps(rep, indent=1, default=str))
    print("\n".join(rows(rep)))


if __name__ == "__main__":
    main()
