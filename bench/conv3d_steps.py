"""Development bench for the conv3d_depthwise reference steps (resources/reference_kernels/conv3d_depthwise).

Standalone (torch + triton only, no server): for every step, verify against F.conv3d in float64 on
fresh random inputs for every shape set of the task (tolerance of task.md: |y - ref| <= 0.02 + 0.016|ref|,
all elements compared, NaN counted as a mismatch), then time the full shape with CUDA events around each launch and a
cold L2 (a 512 MB buffer is rewritten before each launch), median of REPS. PyTorch is timed the same way
in the same process. The final numbers of the READMEs come from our benchmark tool (tools/journey.py);
this script is for iterating.

Run on the GPU host from the repo root:  python3 bench/conv3d_steps.py [step ...]
Writes bench/results/conv3d_steps_<device>_<date>.{md,json} (and copies them under $OUT when set).
"""
from __future__ import annotations

import datetime
import importlib.util
import json
import os
import shutil
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parent.parent
STEPS_DIR = REPO / "resources/reference_kernels/conv3d_depthwise"
STEPS = ["step1_naive", "step2_ndhwc", "step3_lds_tile", "step4_tensor_core", "step5_scheduled", "step6_mma_stream",
         "step7_mma_tiles"]
SHAPES = {"small": (4, 5, 6, 8), "medium": (64, 17, 24, 40), "full": (512, 61, 45, 80)}  # C, D, H, W
FLOP_FULL, BYTES_FULL = 16.31e9, 442e6
REPS = int(os.environ.get("REPS", "50"))
if os.environ.get("WIDE"):  # an extra verify-only shape with W > 80 (step6's multi-tile halo path)
    SHAPES = {"small": SHAPES["small"], "medium": SHAPES["medium"], "wide": (8, 6, 20, 176), "full": SHAPES["full"]}


def load(step):
    """run() of a step; "step@OLD=>NEW[@OLD2=>NEW2...]" is a variant whose C++ source has each OLD replaced by NEW."""
    step, _, edits = step.partition("@")
    spec = importlib.util.spec_from_file_location(step, STEPS_DIR / step / "kernel.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for edit in filter(None, edits.split("@")):
        old, new = edit.split("=>")
        assert old in mod.CUDA_SRC, old
        mod.CUDA_SRC = mod.CUDA_SRC.replace(old, new)
    return mod.run


def torch_run(x, w):
    return F.conv3d(x, w, bias=None, stride=1, padding=(0, 2, 2), groups=x.shape[1])


def inputs(shape, seed):
    C, D, H, W = SHAPES[shape]
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn((1, C, D, H, W), generator=g, device="cuda").to(torch.bfloat16)
    w = (0.2 * torch.randn((C, 1, 3, 5, 5), generator=g, device="cuda")).to(torch.bfloat16)
    return x, w


def verify(fn, shape, seed):
    x, w = inputs(shape, seed)
    ref = F.conv3d(x.double(), w.double(), padding=(0, 2, 2), groups=x.shape[1])
    torch.cuda.empty_cache()
    y = fn(x, w)
    torch.cuda.synchronize()
    if y.shape != ref.shape:
        return {"shape": shape, "passed": False, "why": f"shape {tuple(y.shape)} != {tuple(ref.shape)}"}
    err = (y.double() - ref).abs()
    bad = int((err > 0.02 + 0.016 * ref.abs()).sum()) + int(torch.isnan(y).sum())
    return {"shape": shape, "seed": seed, "passed": bad == 0, "mismatches": bad, "max_abs_err": float(err.max()),
            "rel_l2_err": float((y.double() - ref).norm() / ref.norm())}


def time_full(fn, x, w):
    flush = torch.empty(512 * 2**20, dtype=torch.uint8, device="cuda")
    for _ in range(3):
        fn(x, w)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(REPS)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(REPS)]
    for i in range(REPS):
        flush.fill_(i & 0xFF)
        starts[i].record()
        fn(x, w)
        ends[i].record()
    torch.cuda.synchronize()
    ts = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
    return {"median_ms": statistics.median(ts), "min_ms": ts[0], "p90_ms": ts[int(0.9 * len(ts))]}


def main(steps):
    import triton
    dev = torch.cuda.get_device_name(0)
    rep = {"device": dev, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "versions": {"torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
                        "hip": torch.version.hip}, "method": f"CUDA events per launch, L2 flushed by a 512 MB fill "
           f"before each, median of {REPS} after 3 warm-ups; verify vs F.conv3d in float64", "steps": {}}
    x, w = inputs("full", 1234)
    rep["pytorch"] = time_full(torch_run, x, w)
    print(f"pytorch: {rep['pytorch']['median_ms']:.4f} ms", flush=True)
    for st in steps:
        r = {}
        try:
            fn = load(st)
            r["verify"] = [verify(fn, s, int.from_bytes(os.urandom(4), "little")) for s in SHAPES]  # fresh inputs, seed recorded
            r["timing"] = time_full(fn, x, w)
            r["passed"] = all(v["passed"] for v in r["verify"])
        except Exception as e:  # noqa: BLE001 - one broken step must not hide the others
            r["error"] = f"{type(e).__name__}: {e}"[:2000]
        rep["steps"][st] = r
        t = r.get("timing", {}).get("median_ms")
        print(st, "passed" if r.get("passed") else ("FAILED " + str(r.get("error") or r.get("verify"))[:600]),
              "" if t is None else f"{t:.4f} ms", flush=True)
    lines = [f"# conv3d_depthwise steps, development bench ({dev}, {rep['date']})", "",
             f"versions: {rep['versions']}; method: {rep['method']}", "",
             "| step | verified (small, medium, full) | median ms (full) | speedup vs PyTorch | GFLOP/s | GB/s (442 MB) |",
             "|---|---|---|---|---|---|",
             f"| PyTorch F.conv3d | reference | {rep['pytorch']['median_ms']:.4f} | 1.00 | "
             f"{FLOP_FULL / rep['pytorch']['median_ms'] / 1e6:.0f} | {BYTES_FULL / rep['pytorch']['median_ms'] / 1e6:.0f} |"]
    for st, r in rep["steps"].items():
        t = r.get("timing", {}).get("median_ms")
        base = rep["pytorch"]["median_ms"]
        ver = r.get("error") or ", ".join("pass" if v["passed"] else f"FAIL({v.get('mismatches')})" for v in r["verify"])
        lines.append(f"| {st} | {ver} | {'-' if t is None else f'{t:.4f}'} | "
                     f"{'-' if t is None else f'{base / t:.2f}'} | "
                     f"{'-' if t is None else f'{FLOP_FULL / t / 1e6:.0f}'} | "
                     f"{'-' if t is None else f'{BYTES_FULL / t / 1e6:.0f}'} |")
    md = "\n".join(lines) + "\n"
    print(md)
    tag = "H200" if "H200" in dev else dev.replace(" ", "_")
    out = REPO / "bench/results" / f"conv3d_steps_{tag}_{rep['date'][:10]}{os.environ.get('TAG', '')}"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(md)
    out.with_suffix(".json").write_text(json.dumps(rep, indent=1))
    if os.environ.get("OUT"):
        for suf in (".md", ".json"):
            shutil.copy(out.with_suffix(suf), Path(os.environ["OUT"]) / (out.name + suf))


def profile_once(steps):
    """One launch per step on the full shape (for ncu: PROFILE_ONCE=1 ncu ... python3 bench/conv3d_steps.py)."""
    x, w = inputs("full", 7)
    torch_run(x, w)
    for st in steps:
        load(st)(x, w)
    torch.cuda.synchronize()


if __name__ == "__main__":
    (profile_once if os.environ.get("PROFILE_ONCE") else main)(sys.argv[1:] or STEPS)
