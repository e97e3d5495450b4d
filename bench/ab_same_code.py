"""Comparisons a search loop can bet on , through the MCP client (in-process server).

1. Same code on both sides (candidate == the reference as ModelNew): N calls per kernel; the interval must
   hold 1 in >= 95 % of calls over >= 40 calls on >= 6 kinds; the GEMM's speedups within 2 % of each other.
   Kernels: cuBLAS bf16 GEMM 4096^3, a 3-kernel elementwise chain (16M fp32), softmax 4096x4096 fp32,
   a ~2 us add, a cuDNN conv3d (~7 ms), and KernelBench level-1 problems by path (../shared/kernelbench).
2. The 5 %-difference check: bench/candidates_ab/five_percent_more.py vs 1_Square_matrix_multiplication_,
   resolved (interval excludes 1) in >= 9 of 10 calls.
3. The cheats in bench/candidates_ab/: each valid=false with the expected reason and no speedup.

Run on the GPU machine from the repo root:  PYTHONPATH=. python3 bench/ab_same_code.py [--calls 8]
  [--max-time-s 2] [--only same,five,cheats] [--kernels gemm,softmax,...] [--tag T] [--kb DIR]
The acceptance campaign at DEFAULT arguments (bench/ab_campaign.py: same code on 12 kernels, 5 % and 2 % more
work, precision downgrades, forges with and without confirm, the wall of a default call), one command:
  PYTHONPATH=. python3 bench/ab_same_code.py --campaign --kb .kb/level1 [--budget-s 480] [--same-calls 48]
  writes bench/results/campaign_<device>_<date>.md (and the .json under $OUT when set).
Writes bench/results/ab_same_code_<device>_<date>[_T].{md,json} (device, date, clocks, versions), and
copies under $OUT when set. On the CPU path it runs too (host timing; small sizes via --cpu-small).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
KB = next((p for p in (REPO / ".kb" / "level1", REPO.parent / "shared" / "kernelbench" / "level1") if p.is_dir()),
          REPO.parent / "shared" / "kernelbench" / "level1")  # .kb/: an uncommitted copy carried to a GPU host
CAND = REPO / "bench" / "candidates_ab"

import anyio  # noqa: E402

REF_TMPL = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self{init_args}):
        super().__init__()
{init_body}

    def forward(self, {args}):
{body}


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return [{init_inputs}]
'''


def make_ref(args, body, inputs, init_args="", init_body="        pass", init_inputs=""):
    body = "\n".join("        " + ln for ln in body.strip().splitlines())
    return REF_TMPL.format(args=args, body=body, inputs=inputs, init_args=init_args, init_body=init_body,
                           init_inputs=init_inputs)


def kernels(small: bool, extra_kb: tuple[str, ...] = ()) -> dict[str, str]:
    n, m, e = (256, 256, 1 << 14) if small else (4096, 4096, 1 << 24)
    c = (1, 4, 4, 8, 4) if small else (4, 32, 16, 64, 64)  # conv3d: batch, in ch, depth, h=w, out ch
    out = {
        "gemm_bf16_4096": make_ref("a, b", "return a @ b",
                               f"torch.randn({n}, {n}, dtype=torch.bfloat16), torch.randn({n}, {n}, dtype=torch.bfloat16)"),
        "elementwise_chain_16M": make_ref("x", "y = x * 1.5\ny = y + 0.25\nreturn torch.relu(y)", f"torch.randn({e})"),
        "softmax_4096": make_ref("x", "return torch.softmax(x, dim=-1)", f"torch.randn({m}, {m})"),
        "add_2us": make_ref("x, y", "return x + y", "torch.randn(1 << 16), torch.randn(1 << 16)"),
        "conv3d_cudnn": make_ref("x", "return self.conv(x)", f"torch.randn({c[0]}, {c[1]}, {c[2]}, {c[3]}, {c[3]})",
                             init_body=f"        self.conv = nn.Conv3d({c[1]}, {c[4]}, 3)"),
    }
    for name in ("1_Square_matrix_multiplication_", "23_Softmax", "40_LayerNorm", "42_Max_Pooling_2D",
                 "97_ScaledDotProductAttention"):
        p = KB / f"{name}.py"
        if p.exists():
            out[f"kb1_{name}"] = str(p)
    for num in extra_kb:
        for p in sorted(KB.glob(f"{num}_*.py")):
            out[f"kb1_{p.stem}"] = str(p)
    return out


def same_code_candidate(ref: str) -> str:
    from evokernel_mcp.kb_candidates import same_code

    return same_code(Path(ref).read_text() if ref.endswith(".py") and Path(ref).exists() else ref)


async def call(client, args: dict) -> dict:
    r = await client.call_tool("benchmark", args)
    if r.is_error:
        return {"error": r.content[0].text[:500]}
    sc = r.structured_content
    if sc.get("job_id"):
        r = await client.call_tool("job_result", {"job_id": sc["job_id"], "wait_s": 600})
        sc = r.structured_content if not r.is_error else {"error": r.content[0].text[:500]}
    return sc


def _row(sc: dict) -> dict:
    res = (sc.get("results") or [{}])[-1]
    ci = res.get("speedup_ci")
    return {"speedup": res.get("speedup"), "ci": ci, "holds_1": bool(ci and ci[0] <= 1.0 <= ci[1]),
            "noise": res.get("noise"), "valid": res.get("valid"), "invalid_reason": res.get("invalid_reason"),
            "invalid_detail": (res.get("invalid_detail") or "")[:600] or None, "paired_ci": res.get("paired_ci"),
            "noise_floor": res.get("noise_floor"), "resolved": res.get("resolved"),
            "clocks_moved": res.get("clocks_moved"), "cand_median_ms": (res.get("candidate") or {}).get("median_ms"),
            "base_median_ms": (res.get("baseline") or {}).get("median_ms"), "clocks": sc.get("clocks"),
            "error": sc.get("error"), "wall_s": sc.get("_wall_s")}


def _task_args(ref: str) -> dict:
    """KernelBench problems by path are sent as reference source (the server may not see ../shared)."""
    return {"reference": Path(ref).read_text() if ref.endswith(".py") and Path(ref).exists() else ref}


async def run_all(a, save=lambda out: None) -> dict:
    from mcp import Client

    from evokernel_mcp.server import build_server

    out: dict = {"same_code": {}, "five_percent": [], "cheats": {}}
    common = {"max_time_s": a.max_time_s, "wait_s": 600, "timeout_s": 1800}
    async with Client(build_server()) as client:
        common["control"] = True  # an advanced argument (not in the listed schema, accepted): the noise floor
        ks = kernels(a.cpu_small, tuple(a.kb_extra))
        for name, ref in ks.items():
            if "same" not in a.only or (a.kernels and not any(k in name for k in a.kernels)):
                continue
            rows = []
            per = dict(kv.split("=") for kv in a.calls_per.split(",") if "=" in kv)
            for _ in range(next((int(v) for k, v in per.items() if k in name), a.calls)):
                t0 = time.monotonic()
                sc = await call(client, {**_task_args(ref), "candidate": same_code_candidate(ref), **common})
                sc["_wall_s"] = round(time.monotonic() - t0, 1)
                rows.append(_row(sc))
                print(name, rows[-1]["speedup"], rows[-1]["ci"], rows[-1]["paired_ci"], rows[-1]["valid"],
                      rows[-1]["wall_s"], rows[-1]["invalid_detail"] or "", flush=True)
                out["same_code"][name] = rows
                save(out)  # after every call: a run cut short keeps what it measured
        mm = str(KB / "1_Square_matrix_multiplication_.py")
        if a.cpu_small or a.mm_n:
            common["overrides"] = {"N": a.mm_n or 256}
        if "five" in a.only:
            for _ in range(10):
                sc = await call(client, {**_task_args(mm), "candidate": (CAND / "five_percent_more.py").read_text(),
                                         **common})
                out["five_percent"].append(_row(sc))
                save(out)
        if "cheats" in a.only:
            for p in sorted(CAND.glob("*.py")):
                if p.stem != "five_percent_more":
                    out["cheats"][p.stem] = _row(await call(client, {**_task_args(mm), "candidate": p.read_text(),
                                                                     **common}))
                    save(out)
    return out


def _fmt(x, f="{:.4f}"):
    return "-" if x is None else f.format(x)


def to_markdown(res: dict, meta: dict) -> str:
    lines = [f"# Same-code A/B, 5 % check and cheats ({meta['device']}, {meta['date']})", "",
             f"versions: {meta['versions']}; max_time_s={meta['max_time_s']}; calls per kernel={meta['calls']}", "",
             "| kernel | calls | interval holds 1 | claimed a difference (resolved) | speedups | spread | clocks moved | "
             "noise floor band |", "|---|---|---|---|---|---|---|---|"]
    total = held = 0
    for k, rows in res["same_code"].items():
        sp = [r["speedup"] for r in rows if r["speedup"]]
        h = sum(r["holds_1"] for r in rows)
        total, held = total + len(rows), held + h
        spread = (max(sp) - min(sp)) / sorted(sp)[len(sp) // 2] if sp else None
        band = next((r["noise_floor"]["band"] for r in rows if r.get("noise_floor")), None)
        lines.append(f"| {k} | {len(rows)} | {h} | {sum(bool(r.get('resolved')) for r in rows)} | "
                     f"{', '.join(_fmt(s) for s in sp)} | {_fmt(spread, '{:.2%}')} | "
                     f"{sum(bool(r['clocks_moved']) for r in rows)} | {band} |")
    lines += ["", f"Same code: interval held 1 in {held} of {total} calls.", "",
              "| 5 % check call | speedup | ci | resolved | valid |", "|---|---|---|---|---|"]
    for i, r in enumerate(res["five_percent"]):
        lines.append(f"| {i} | {_fmt(r['speedup'])} | {r['ci']} | {r['resolved']} | {r['valid']} |")
    lines += ["", "| cheat | valid | invalid_reason | speedup | error |", "|---|---|---|---|---|"]
    for k, r in res["cheats"].items():
        lines.append(f"| {k} | {r['valid']} | {r['invalid_reason']} | {r['speedup']} | "
                     f"{(str(r['error'] or ''))[:80]} |")
    first = next((r["clocks"] for rows in res["same_code"].values() for r in rows if r.get("clocks")), None)
    lines += ["", f"Clocks (first call): {first}"]
    return "\n".join(lines) + "\n"


def main() -> None:
    import logging

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=8)
    ap.add_argument("--calls-per", default="", help="per-kernel call counts, e.g. gemm=5 (a name fragment = count)")
    ap.add_argument("--max-time-s", type=float, default=2.0)
    ap.add_argument("--only", default="same,five,cheats")
    ap.add_argument("--kernels", default="")
    ap.add_argument("--tag", default="")
    ap.add_argument("--kb-extra", default="", help="more KernelBench level-1 problems by number (e.g. 72,75)")
    ap.add_argument("--cpu-small", action="store_true", help="small sizes for the CPU path (plumbing only)")
    ap.add_argument("--kb", default="", help="KernelBench level1 directory (default: .kb/level1 or ../shared)")
    ap.add_argument("--campaign", action="store_true", help="the acceptance campaign at default arguments")
    ap.add_argument("--budget-s", type=float, default=480.0, help="campaign: no call starts after this")
    ap.add_argument("--same-calls", type=int, default=48, help="campaign: same-code calls (round-robin)")
    ap.add_argument("--sections", default=None, help="campaign: a comma-separated subset of wall, downgrade, "
                    "forge, five_percent, two_percent, same_code (default: all)")
    ap.add_argument("--mm-n", type=int, default=0, help="N override of 1_Square_matrix_multiplication_ for the 5 %% "
                    "check and the cheats (0: the file's own 4096)")
    a = ap.parse_args()
    a.kernels = [k for k in a.kernels.split(",") if k]
    a.kb_extra = [k for k in a.kb_extra.split(",") if k]
    global KB
    KB = Path(a.kb).resolve() if a.kb else KB
    a.kb = str(KB)
    import torch

    dev = torch.cuda.get_device_name(0).replace(" ", "_") if torch.cuda.is_available() else "cpu"
    meta = {"device": dev, "date": datetime.date.today().isoformat(), "max_time_s": a.max_time_s, "calls": a.calls,
            "versions": {"torch": torch.__version__, "python": platform.python_version(),
                         "cuda": torch.version.cuda, "hip": getattr(torch.version, "hip", None)}}
    if a.campaign:
        return _campaign(a, meta, dev)
    stem = REPO / "bench" / "results" / f"ab_same_code_{dev}_{meta['date']}{'_' + a.tag if a.tag else ''}"

    def save(res: dict) -> None:
        stem.with_suffix(".json").write_text(json.dumps({"meta": meta, **res}, indent=1, default=str))
        stem.with_suffix(".md").write_text(to_markdown(res, meta))
        if os.environ.get("OUT"):
            for suf in (".json", ".md"):
                shutil.copy(stem.with_suffix(suf), Path(os.environ["OUT"]) / stem.with_suffix(suf).name)

    res = anyio.run(run_all, a, save)
    save(res)
    print(to_markdown(res, meta))


def _campaign(a, meta: dict, dev: str) -> None:
    from bench.ab_campaign import run_campaign
    from bench.ab_campaign import to_markdown as campaign_md

    meta["command"] = " ".join(["python3", "bench/ab_same_code.py", *sys.argv[1:]])
    md = REPO / "bench" / "results" / f"campaign_{dev}_{meta['date']}{'_' + a.tag if a.tag else ''}.md"
    out_dir = Path(os.environ["OUT"]) if os.environ.get("OUT") else None

    def save(res: dict) -> None:
        md.write_text(campaign_md(res, meta))
        if out_dir is not None:
            shutil.copy(md, out_dir / md.name)
            (out_dir / md.with_suffix(".json").name).write_text(json.dumps({"meta": meta, **res}, indent=1,
                                                                           default=str))

    t0 = time.monotonic()
    res = anyio.run(run_campaign, a, save)
    meta["campaign_wall_s"] = round(time.monotonic() - t0, 1)
    save(res)
    print(campaign_md(res, meta))


if __name__ == "__main__":
    main()
