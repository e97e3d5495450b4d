"""Do profile_pmc and thread_trace give the same counters and findings from one code version to the next?

Runs profile_pmc with every preset and thread_trace on two candidates, through the plain tool functions on
the GPU host (ncu on NVIDIA, rocprofv3 on AMD), and writes what an agent reads (bound, per-dispatch counter
names and derived metrics, findings, the trace's instruction classes and hot instructions) as JSON:

    PYTHONPATH=. python3 bench/profile_parity.py --out before.json      # on one code version
    PYTHONPATH=. python3 bench/profile_parity.py --out after.json       # on the next
    python3 bench/profile_parity.py --compare before.json after.json    # same counters, findings, classes?

The candidates: KernelBench level-1 23_Softmax (rows shrunk to --softmax-dim columns so ncu's many passes
stay short; the problem file is read from --kernelbench) and conv3d_depthwise step 6 on its `medium` set.
Counters are compared by name (the same set must come back) and derived metrics within --rel (run-to-run
noise of a hardware counter); findings by their text with the numbers taken out.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import traceback
from pathlib import Path

import anyio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SOFTMAX_CAND = "import torch\n\ndef run(x):\n    return torch.softmax(x, dim=1)\n"


def _softmax_ref(kernelbench: Path, dim: int) -> str:
    src = (kernelbench / "23_Softmax.py").read_text()
    return re.sub(r"^dim = \d+", f"dim = {dim}", src, flags=re.M)


def _conv3d_step6() -> str:
    import importlib.util

    spec = importlib.util.spec_from_file_location("cxx", REPO / "resources/reference_kernels/conv3d_depthwise/_cxx.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.candidate_source(REPO / "resources/reference_kernels/conv3d_depthwise/step6_mma_stream")


def _pmc_view(res) -> dict:
    return {"bound": res.bound, "degraded": res.degraded, "dispatches_total": res.dispatches_total,
            "dispatches": [{"kernel": d.kernel, "counters": sorted(d.counters),
                            "derived": {k: v.value for k, v in d.derived.items()}} for d in res.dispatches],
            "findings": [f.text for f in res.findings]}


def _trace_view(res) -> dict:
    return {"kernel": res.kernel, "degraded": res.degraded, "class_breakdown": res.class_breakdown,
            "stall_reasons": res.stall_reasons, "hot": [h.instruction for h in res.hot_instructions[:8]],
            "findings": [f.text for f in getattr(res, "findings", []) or []]}


async def _one(out: dict, name: str, coro_fn, view) -> None:
    try:
        res = await coro_fn()
        if getattr(res, "state", "done") != "done":
            out[name] = {"error": f"not finished: {res.state}"}
        elif getattr(res, "error", None):
            out[name] = {"error": str(res.error)}
        else:
            out[name] = view(res)
    except Exception as e:  # noqa: BLE001 - record it, go on with the other cases
        out[name] = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-2000:]}
    print(name, json.dumps(out[name])[:400], flush=True)


async def run_all(args) -> dict:
    from evokernel_mcp.app import close_app
    from evokernel_mcp.profile import api
    from evokernel_mcp.profile.presets import PRESET_NAMES

    cases = {
        "softmax": {"candidate": SOFTMAX_CAND, "reference": _softmax_ref(Path(args.kernelbench), args.softmax_dim)},
        "conv3d_step6": {"candidate": _conv3d_step6(), "task": "conv3d_depthwise", "shapes": ["medium"]},
    }
    out: dict = {}
    common = {"wait_s": 600, "timeout_s": 600}
    for cname, kw in cases.items():
        for preset in PRESET_NAMES:
            await _one(out, f"{cname}/pmc/{preset}",
                       lambda kw=kw, preset=preset: api.profile_pmc(preset=preset, max_dispatches=4, **kw, **common),
                       _pmc_view)
        await _one(out, f"{cname}/trace", lambda kw=kw: api.thread_trace(**kw, **common), _trace_view)
    await close_app()
    return out


STATIC = ("device__attribute_", "c2clink__", "nvlink__", "numa__", "profiler__")  # device facts, not measured


def _strip_numbers(text: str) -> str:
    text = re.sub(r"^.{1,80}? #\d+: ", "", text)  # the dispatch a finding names ("kernel #0: ...")
    text = text.replace(" (tensor-pipe and CUDA-core FLOPs)", "")
    return re.sub(r"[-+]?\d[\d.,]*(e[-+]?\d+)?", "#", text)


def _measured(counters: list[str]) -> set[str]:
    return {c for c in counters if not c.startswith(STATIC) and ".peak_sustained" not in c}


def compare(a: dict, b: dict, rel: float) -> list[str]:
    """Differences an agent would notice between two runs' views (empty: the same answers)."""
    diffs: list[str] = []
    for name in sorted(set(a) | set(b)):
        x, y = a.get(name), b.get(name)
        if x is None or y is None:
            diffs.append(f"{name}: only in {'after' if x is None else 'before'}")
            continue
        if "error" in x or "error" in y:
            if ("error" in x) != ("error" in y):
                diffs.append(f"{name}: error before={x.get('error')!r} after={y.get('error')!r}")
            continue
        for key in ("bound", "kernel"):
            if x.get(key) != y.get(key):
                diffs.append(f"{name}: {key} {x.get(key)!r} -> {y.get(key)!r}")
        lost = {_strip_numbers(t) for t in x.get("findings", [])} - {_strip_numbers(t) for t in y.get("findings", [])}
        if lost:  # a finding of before that is gone (new findings are additions, listed by --show-new)
            diffs.append(f"{name}: findings lost: {sorted(lost)}")
        for dx, dy in zip(x.get("dispatches", []), y.get("dispatches", [])):
            if not _measured(dx["counters"]) <= set(dy["counters"]):
                diffs.append(f"{name}: measured counters of {dx['kernel']} lost: "
                             f"{sorted(_measured(dx['counters']) - set(dy['counters']))[:10]}")
            for k in sorted(set(dx["derived"]) & set(dy["derived"])):
                vx, vy = dx["derived"].get(k), dy["derived"].get(k)
                if vx is None or vy is None or (k == "flops" and vx == 0):  # FFMA-only before: tensor FLOPs now
                    continue
                elif abs(vx - vy) > rel * max(abs(vx), abs(vy), 1e-9):
                    diffs.append(f"{name}: derived {k} {vx:.4g} -> {vy:.4g}")
        if set(x.get("class_breakdown", {})) != set(y.get("class_breakdown", {})):
            diffs.append(f"{name}: instruction classes {sorted(x['class_breakdown'])} -> {sorted(y['class_breakdown'])}")
    return diffs


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="write the views here (JSON)")
    p.add_argument("--kernelbench", default=str(REPO.parent / "shared/kernelbench/level1"))
    p.add_argument("--softmax-dim", type=int, default=65536)
    p.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    p.add_argument("--rel", type=float, default=0.15, help="derived metrics within this relative difference")
    args = p.parse_args()
    if args.compare:
        a, b = (json.loads(Path(f).read_text()) for f in args.compare)
        diffs = compare(a, b, args.rel)
        print("\n".join(diffs) if diffs else f"same counters, findings and classes in {len(a)} cases")
        return 1 if diffs else 0
    out = anyio.run(run_all, args)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
