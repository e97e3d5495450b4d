"""Search step 7's variants (conv3d_depthwise) through the MCP client, as an agent would; one command.

Every variant is step7_mma_tiles/kernel.cu with other #define values. Before any GPU work, each variant
is checked on this host: the CPU emulation of its index math (step7_mma_tiles/emulate.py, float64, vs
F.conv3d on small shapes) and, where nvcc is installed, an sm_90 compile with no spills. Then, through a
real MCP client talking to `evokernel-mcp serve` over stdio, every call labelled
experiment="conv3d/step7/<variant>" (the journal draws the search with export_trajectory):
  compile_kernel (sm_90 on a GPU host, gfx942/gfx950 with --amd: registers, occupancy),
  verify_vs_pytorch (every shape set, fresh random inputs),
  benchmark against step 6 (default arguments: every shape set; the full shape's row is reported),
then the best verified variant against PyTorch in one benchmark call (full shape), optionally profile_pmc
(--profile) on it, a journal note with the table, and export_trajectory. Prints a compact table and
writes bench/results/conv3d_step7_search_<device>_<date>.{md,json} (copied under $OUT when set).

  python3 bench/conv3d_step7_search.py                 # GPU host: the DEFAULT variants, no new one after --budget-s 200
  python3 bench/conv3d_step7_search.py --only v1 v3    # some variants
  python3 bench/conv3d_step7_search.py --cpu-only      # this host: emulation + nvcc + gfx942/gfx950 compiles
  python3 bench/conv3d_step7_search.py --profile       # also profile_pmc (preset memory) on the best
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
KDIR = REPO / "resources/reference_kernels/conv3d_depthwise"
STEP7 = KDIR / "step7_mma_tiles"
RESULTS = REPO / "bench/results"
KERNEL = "conv3d_dw_mma_tiles"
# name -> #define overrides of kernel.cu (the file's own values are v1)
VARIANTS = {  # v1..v6 as in the first H100 round (commit c31f27b), v7..v12 added for the second, v13.. after it;
    # kernel.cu's defaults are v23's (the fastest), so every other variant names MINB, PPS and STAGES
    "v1": {"STAGES": 4, "MINB": 3, "PPS": 1},  # 4 warps x 5 tiles, 8 planes, 4 stages: 12 warps/SM
    "v2": {"STAGES": 6, "MINB": 3, "PPS": 1},  # deeper ring (slower in the c31f27b run)
    "v3": {"WARPS": 2, "NPB": 4, "NPN": 4, "NT": 5, "MINB": 6, "STAGES": 4, "PPS": 1},  # 64-thread blocks, 4 planes, N = 4 x 2
    "v4": {"WARPS": 2, "NPB": 4, "NPN": 4, "NT": 5, "MINB": 6, "STAGES": 6, "PPS": 1},  # v3 with the deeper ring
    "v5": {"NPN": 4, "STAGES": 4, "MINB": 3, "PPS": 1},  # v1 with N = 4 planes x 2 segments
    "v6": {"WARPS": 8, "NPB": 16, "MINB": 1, "STAGES": 4, "PPS": 1},  # 16 planes a block: halo planes 2/16 (8 warps/SM)
    "v7": {"WARPS": 10, "NT": 2, "MINB": 2, "STAGES": 4, "PPS": 1},  # 10 warps x 2 tiles: 20 warps/SM, less ILP each
    "v8": {"WARPS": 10, "NT": 2, "MINB": 2, "STAGES": 3, "PPS": 1},  # v7, shallower ring
    "v9": {"WARPS": 2, "NPB": 4, "NPN": 4, "NT": 5, "MINB": 6, "STAGES": 3, "PPS": 1},  # v3, shallower ring
    "v10": {"STAGES": 3, "MINB": 3, "PPS": 1},  # v1, shallower ring
    "v11": {"PPS": 2, "STAGES": 6, "MINB": 3},  # v1, 2 row pairs per barrier (half the barriers)
    "v12": {"WARPS": 10, "NT": 2, "MINB": 2, "PPS": 2, "STAGES": 6},  # v7, 2 row pairs per barrier
    "v13": {"WARPS": 20, "NPB": 16, "NT": 2, "MINB": 1, "STAGES": 4, "PPS": 1},  # 16 planes a block, 20 warps/SM
    "v14": {"WARPS": 2, "NPB": 4, "NPN": 4, "NT": 5, "MINB": 6, "STAGES": 5, "PPS": 1},  # v3, 5-stage ring
    # the stalls profile of v3: a warp issues every 5.6 cycles, 52 % issue slots used, the copies' and the stores'
    # address math ~3/4 of the instructions: the tensor-memory accelerator moves pairs in and tiles out instead
    "v15": {"WARPS": 2, "NPB": 4, "NPN": 4, "NT": 5, "MINB": 6, "TMA": 1, "STAGES": 4, "PPS": 1},  # v3 with TMA (134 registers)
    "v16": {"WARPS": 2, "NPB": 4, "NPN": 4, "NT": 5, "MINB": 8, "STAGES": 6, "TMA": 1, "PPS": 1},  # 128 registers: 16 warps/SM
    "v17": {"WARPS": 2, "NPB": 4, "NPN": 4, "NT": 5, "MINB": 6, "STAGES": 6, "TMA": 1, "PPS": 1},  # v15, 6-stage ring
    # v15's profile: 41 % of the stall samples wait at the pairs' mbarriers (TMA loads late); the stores were cheap
    "v18": {"WARPS": 2, "NPB": 4, "NPN": 4, "NT": 5, "MINB": 6, "TMA": 2, "STAGES": 4, "PPS": 1},  # v3, TMA stores only
    "v19": {"WARPS": 2, "NPB": 4, "NPN": 4, "NT": 5, "MINB": 7, "TMA": 2, "STAGES": 4, "PPS": 1},  # v18 at 14 warps/SM
    # after the lean copies, the bf16x2 stores and the fresh first MMA, v1 fits 128 registers without spills
    "v20": {"MINB": 4, "STAGES": 4, "PPS": 1},  # v1 at 16 warps/SM
    "v21": {"WARPS": 2, "NPB": 4, "NPN": 4, "NT": 5, "MINB": 8, "STAGES": 4, "PPS": 1},  # v3 at 16 warps/SM
    "v22": {"STAGES": 6},  # v20 with 2 row pairs per barrier and a 6-stage ring (MINB 4, PPS 2, STAGES 6)
    # kernel.cu's defaults: v22 with an 8-stage ring (a slot index without a division): no faster on the source of
    # 2026-11-26 (run 14), 0.4 % faster on the lean loop of 2026-11-27 (two runs)
    "v23": {"STAGES": 8},
    # v23's profile: the shared-memory pipe bounds it (mio_throttle 22 % of the stalls, the flush's 16-byte reads
    # 6-way in ncu's count, each flush step a branch around a read and its dependent store). kernel.cu now swizzles
    # the output tile (OSWZ 1: writes and reads conflict-free), reads every flush step before its predicated stores,
    # and issues no copy for a thread without a chunk. Not run: TMA stores on v23's shape (TMA 2, PPS 1), whose dense
    # box puts the 4 planes of a C-fragment write 2 planes apart = 0 words modulo 32: 4-way (emulate.bank_conflicts)
    "v25": {"STAGES": 8, "OSWZ": 0},  # the same without the swizzle (the tile padded as before)
}
DEFAULT = ["v3", "v1", "v23"]
# The lessons of the search that made v22 and v23 (bench/results/conv3d_step7_search_NVIDIA_H100_80GB_HBM3_2026-11-26.md
# and _2026-11-27.md): each step's time on the full shape against the source before it, in one benchmark call on
# one H100.
_SRC = "benchmark tool, one H100 80GB HBM3, 2026-11-26, against the earlier source in the same call"
_SRC27 = "benchmark tool, one H100 80GB HBM3, 2026-11-27, against the source of 2026-11-26 in the same call"
LESSONS = [
    {"variant": "v3", "ms": 0.2263, "source": "profile_pmc preset stalls and thread_trace, one H100, 2026-11-26",
     "text": "stalls profile of v3 (0.2263 ms): a warp issues every 5.6 cycles, schedulers busy 52 %, 'wait' 38 % "
             "of the stall samples; thread_trace: 41 % of the samples on integer and 15 % on branch instructions "
             "(each copy's 64-bit address rebuilt every pair), MMAs 15 %: the loop is bound by its own overhead"},
    {"variant": "v3", "ms": 0.2403, "source": _SRC,
     "text": "TMA loads of a 2.5 KB box a pair (v15) cut the loop's instructions by a third but ran slower (0.2403 "
             "against 0.2268 ms): 41 % of the stall samples wait at the pairs' mbarriers; TMA stores alone (v18, "
             "0.2385 ms) add barrier stalls. At this box size cp.async with lean addressing wins"},
    {"variant": "v3", "ms": 0.2046, "source": _SRC,
     "text": "branch-free cp.async copies from one 64-bit row offset a pair, the taps staged in shared memory "
             "before the A table: v3 0.2046 ms against 0.2271 (1.11x)"},
    {"variant": "v3", "ms": 0.1964, "source": _SRC,
     "text": "no clamp on the tiles past W: a tile's shared-memory offsets are the first tile's plus a constant "
             "(immediates), 147 registers instead of 157: v3 0.1964 ms"},
    {"variant": "v1", "ms": 0.1879, "source": _SRC,
     "text": "rows m and m + 8 of the MMA tile made adjacent output columns: a C register pair leaves as one "
             "bf16x2 store (half the stores, no byte shuffles); the first pairs issued before the A table is built: "
             "v1 0.1879 ms"},
    {"variant": "v1", "ms": 0.1860, "source": _SRC,
     "text": "the first MMA of a block writes its accumulators (no zeroing): 156 registers instead of 167, v1 "
             "0.1860 ms"},
    {"variant": "v22", "ms": 0.1757, "source": _SRC,
     "text": "at 128 registers without spills v1 runs 4 blocks (16 warps) an SM; with 2 row pairs a barrier and "
             "a 6-stage ring (v22): 0.1757 ms, 39.8x PyTorch's 6.949 ms in one call"},
    {"variant": "v22", "ms": 0.1690, "source": _SRC27,
     "text": "v22's SASS: 691 instructions per 4 pairs, 240 of them MMAs and B reads; the rest mostly the flush "
             "(each store's 64-bit address rebuilt from the chunk id) and the copies. Copies from one row pointer "
             "per row of the pair, a flush whose steps are planes apart (one offset a thread, immediates), blocks "
             "completing at fixed places, no MMAs for blocks -1 and nb: 479 instructions, v22 0.1690 ms against "
             "0.1754 (1.04x); 31 % fewer instructions for 3.6 % less time: no longer bound by issue alone"},
    {"variant": "v23", "ms": 0.1682, "source": _SRC27,
     "text": "with the lean loop an 8-stage ring (v23) is 0.4 % faster than 6 stages in two runs (0.1682 against "
             "0.1690, 0.1688 against 0.1694 ms); profile_pmc memory: DRAM 74.4 and 75.3 % of peak (two dispatches, "
             "170.3 and 168.1 us), at the target's edge"},
    {"variant": "v22", "ms": 0.1694, "source": _SRC27,
     "text": "the last block of a channel (3 of 8 output planes at D = 61) as 4 planes x 2 halves of W: 3 tiles a "
             "warp instead of 5, 5 % fewer MMAs in all; no faster (0.1694 against 0.1691 ms without it, same run). "
             "Dropped: the MMA count is not what bounds the kernel now"},
    {"variant": "v23", "ms": 0.1656,
     "source": "benchmark tool, one H100 80GB HBM3, 2026-11-27, against the lean loop's source (v23) in the same call",
     "text": "v23's stalls: mio_throttle first (22 %), 45 % of the stall samples on shared-memory instructions, the "
             "flush's 16-byte reads 6-way and each flush step a branch around a read and its dependent store. A "
             "swizzled output tile (column ^ 4 x row: C-fragment writes and flush reads conflict-free by "
             "emulate.bank_conflicts) and a flush that issues its reads before its predicated stores: 0.1656 against "
             "0.1688 ms (1.02x, resolved), DRAM 75.9 and 76.3 % of peak (memory preset), 75.6 and 76.1 % (stalls "
             "preset); mio_throttle still first (27 %): the B reads and the copies now hold the shared-memory pipe"},
]


def lesson_note(lesson: dict, labelled: set) -> dict:
    """record_note's arguments for one of LESSONS. record_note takes only a label the journal already holds, so a
    lesson about a variant this run did not verify (its label absent from a fresh journal) is a note of the task,
    its text led by the variant's name."""
    note = {"task": "conv3d_depthwise", "kind": "lesson", "text": lesson["text"],
            "evidence": {"kind": "measured", "value": lesson["ms"], "unit": "ms", "source": lesson["source"]}}
    if lesson["variant"] in labelled:
        note["experiment"] = f"conv3d/step7/{lesson['variant']}"
    else:
        note["text"] = f"step 7 {lesson['variant']}: {lesson['text']}"
    return note


def variant_source(overrides: dict, step_dir: Path = STEP7, strict: bool = True) -> str:
    """step_dir's kernel.cu with these #define values (strict: every name must be defined there; else the names
    it lacks are left out, as an earlier source may lack a newer define)."""
    src = (step_dir / "kernel.cu").read_text()
    for k, v in overrides.items():
        src, n = re.subn(rf"#define {k} \d+", f"#define {k} {v}", src)
        assert n == 1 or (n == 0 and not strict), k
    return src


def candidate(cu_src: str, step_dir: Path = STEP7) -> str:
    """One self-contained candidate source: the launcher, the C++ text, the step's run()."""
    launcher = (KDIR / "_cxx.py").read_text()
    assert "'''" not in cu_src
    return launcher + f"\n\nCUDA_SRC = r'''{cu_src}'''\n\n" + (step_dir / "kernel.py").read_text()


def _emulate_module():
    spec = importlib.util.spec_from_file_location("step7_emulate", STEP7 / "emulate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def cpu_checks(name: str, src: str) -> dict:
    """Emulation vs F.conv3d (NVIDIA and AMD layouts) on small shapes, and an nvcc sm_90 build if nvcc is here."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    emu, out = _emulate_module(), {}
    for target in ("nvidia", "amd"):
        cf = emu.config(src, target)
        widths = [W for W in (8, 24, 48) if W % cf["TILEW"] == 0 and W < cf["WMAX"]] + [cf["WMAX"]]
        worst = 0.0
        for C, D, H, Wd in ((1, 5, 6, widths[0]), (2, cf["NPB"] + 5, 9, widths[-1])):
            g = torch.Generator().manual_seed(7)
            x = torch.randn((1, C, D, H, Wd), generator=g).to(torch.bfloat16).double()
            w = (0.2 * torch.randn((C, 1, 3, 5, 5), generator=g)).to(torch.bfloat16).double()
            y = emu.emulate(x.numpy(), w.numpy(), src, target)
            ref = F.conv3d(x, w, padding=(0, 2, 2), groups=C)[0].numpy()
            worst = max(worst, float(np.nan_to_num(np.abs(y - ref), nan=np.inf).max()))
        out[f"emulate_{target}_max_err"] = worst
    nvcc = shutil.which("nvcc")
    if nvcc:
        with tempfile.TemporaryDirectory() as d:
            cu = Path(d) / "k.cu"
            cu.write_text(src)
            r = subprocess.run([nvcc, "-cubin", "-arch=sm_90", "-O3", "-std=c++17", "-Xptxas", "-v", "-o",
                                str(Path(d) / "k.cubin"), str(cu)], capture_output=True, text=True, timeout=300)
        m = re.search(r"Used (\d+) registers", r.stderr)
        sp = re.search(r"(\d+) bytes spill stores", r.stderr)
        out.update(nvcc_ok=r.returncode == 0, nvcc_registers=int(m.group(1)) if m else None,
                   nvcc_spill_bytes=int(sp.group(1)) if sp else None)
    cf = emu.config(src, "nvidia")
    out.update(smem_bytes=cf["SMEM_BYTES"], wmax=cf["WMAX"], threads=cf["THREADS"])
    return out


def config_threads(src: str) -> int:
    return _emulate_module().config(src, "nvidia")["THREADS"]


def _journey():
    """tools/journey.py (not a package): its MCP `call` helper, which follows a job handle to its result."""
    spec = importlib.util.spec_from_file_location("conv3d_journey", REPO / "tools" / "journey.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


call = _journey().call


def compile_row(res: dict) -> dict:
    if not res or res.get("error") or not res.get("ok"):
        diags = [d.get("message") for d in (res or {}).get("diagnostics", [])][:2]
        return {"ok": False, "error": (res or {}).get("error") or diags}
    k = res["kernels"][0]
    occ = k.get("occupancy") or {}
    return {"ok": True, "registers": k.get("registers"), "vgpr": k.get("vgpr_count"), "agpr": k.get("agpr_count"),
            "lds_bytes": k.get("lds_bytes"), "scratch_bytes": k.get("scratch_bytes"), "spills": k.get("vgpr_spill_count"),
            "occupancy": occ.get("warps_per_sm") or occ.get("waves_per_simd"), "limiter": occ.get("limiter")}


def full_row(bench: dict) -> dict:
    rows = (bench or {}).get("results") or []
    return next((r for r in rows if r.get("shape") == "full"), rows[-1] if rows else {})


async def search(args, rep_cpu: dict) -> dict:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    rep: dict = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "variants": {},
                 "cpu": rep_cpu}
    step6 = candidate((KDIR / "step6_mma_stream/kernel.cu").read_text(), KDIR / "step6_mma_stream")
    params = StdioServerParameters(command=sys.executable, args=["-m", "evokernel_mcp", "serve"], env=dict(os.environ))
    async with Client(params) as client:
        dev = await call(client, "query_rocminfo", {})
        rep["device"] = ((dev.get("devices") or [{}])[0]).get("name") if isinstance(dev, dict) else None
        gpu = bool(rep["device"]) and not args.cpu_only
        t_start = time.time()
        for name in args.only:
            t0 = time.time()
            if gpu and t0 - t_start > args.budget_s:
                print(f"  {name}: skipped (the search's {args.budget_s:.0f} s budget for variants is spent)", flush=True)
                rep["variants"][name] = {"defines": VARIANTS[name], "cpu": rep["cpu"].get(name, {}), "skipped": "time budget"}
                continue
            src = variant_source(VARIANTS[name])
            label = f"conv3d/step7/{name}"
            v: dict = {"defines": VARIANTS[name], "cpu": rep["cpu"].get(name, {}), "compile": {}}
            targets = ["sm_90"] + (["gfx942", "gfx950"] if args.amd or not gpu else [])
            for t in targets:
                amd = t.startswith("gfx")  # wave64: the same warps, twice the lanes
                wg = v["cpu"].get("threads") or config_threads(src)
                v["compile"][t] = compile_row(await call(client, "compile_kernel", {
                    "source": src, "language": "hip" if amd else "cuda", "kernel": KERNEL,
                    "target": t, "options": {"workgroup_size": wg * (2 if amd else 1)}}))
                print(f"  {name} compile {t}: {v['compile'][t]}", flush=True)
            if gpu:
                cand = candidate(src)
                v["verify"] = await call(client, "verify_vs_pytorch", {"task": "conv3d_depthwise", "candidate": cand,
                                                                      "seeds": 2, "wait_s": 50, "experiment": label})
                v["verified"] = bool(v["verify"].get("passed"))
                print(f"  {name} verify passed={v['verified']} {_verify_brief(v['verify'])}", flush=True)
                if v["verified"]:
                    base = step6
                    if args.baseline_dir:  # the same defines on another kernel.cu/kernel.py (an earlier source)
                        bdir = Path(args.baseline_dir)
                        base = candidate(variant_source(VARIANTS[name], bdir, strict=False), bdir)
                    v["bench_vs_step6"] = await call(client, "benchmark", {"task": "conv3d_depthwise", "candidate": cand,
                                                                           "baseline": base, "wait_s": 50,
                                                                           "timeout_s": 600, "experiment": label})
                    b = full_row(v["bench_vs_step6"])
                    why = b.get("invalid_reason") or str(v["bench_vs_step6"].get("error") or "")[:300]
                    print(f"  {name} vs step6: {(b.get('candidate') or {}).get('median_ms')} ms vs "
                          f"{(b.get('baseline') or {}).get('median_ms')} ms, speedup {b.get('speedup')} {why}", flush=True)
                for preset in args.profile_each:  # the counters of every variant, to decide the next one
                    v.setdefault("profiles", {})[preset] = pr = await call(client, "profile_pmc", {
                        "task": "conv3d_depthwise", "candidate": cand, "preset": preset, "shapes": ["full"],
                        "wait_s": 50, "experiment": label})
                    d0 = (pr.get("dispatches") or [{}])[0]
                    print(f"  {name} {preset}: " + ", ".join(f"{k} {x.get('value')}" for k, x in
                                                            (d0.get("derived") or {}).items()), flush=True)
                    for f in (pr.get("findings") or [])[:4]:
                        print(f"    finding: {f.get('text')}", flush=True)
                if args.trace_each:  # where in the code the warps wait (per-instruction samples)
                    v["trace"] = tr = await call(client, "thread_trace", {
                        "task": "conv3d_depthwise", "candidate": cand, "shapes": ["full"], "top_n": 25,
                        "wait_s": 50, "experiment": label})
                    for f in (tr.get("findings") or [])[:8]:
                        print(f"    trace: {f.get('text')}", flush=True)
            v["wall_s"] = round(time.time() - t0, 1)
            rep["variants"][name] = v
            write(rep, final=False)
        ok = [(n, (full_row(v.get("bench_vs_step6")).get("candidate") or {}).get("median_ms"))
              for n, v in rep["variants"].items()]
        ok = sorted([(ms, n) for n, ms in ok if ms])
        if gpu and ok:
            best = ok[0][1]
            rep["best"] = best
            cand = candidate(variant_source(VARIANTS[best]))
            label = f"conv3d/step7/{best}"
            rep["bench_vs_pytorch"] = await call(client, "benchmark", {"task": "conv3d_depthwise", "candidate": cand,
                                                                       "shapes": ["full"], "wait_s": 50, "timeout_s": 600,
                                                                       "experiment": label})
            b = full_row(rep["bench_vs_pytorch"])
            print(f"  best {best} vs PyTorch: {(b.get('candidate') or {}).get('median_ms')} ms vs "
                  f"{(b.get('baseline') or {}).get('median_ms')} ms, speedup {b.get('speedup')}", flush=True)
            if args.baseline_dir and args.vs_step6:  # the A/B ran against the earlier source: step 6 too
                rep["bench_best_vs_step6"] = await call(client, "benchmark", {
                    "task": "conv3d_depthwise", "candidate": cand, "baseline": step6, "wait_s": 50, "timeout_s": 600,
                    "experiment": label})
                b = full_row(rep["bench_best_vs_step6"])
                print(f"  best {best} vs step6: {(b.get('candidate') or {}).get('median_ms')} ms vs "
                      f"{(b.get('baseline') or {}).get('median_ms')} ms, speedup {b.get('speedup')}", flush=True)
            if args.profile:
                rep["profile"] = await call(client, "profile_pmc", {"task": "conv3d_depthwise", "candidate": cand,
                                                                    "preset": args.profile_preset, "shapes": ["full"],
                                                                    "wait_s": 50, "experiment": label})
                for f in (rep["profile"].get("findings") or [])[:6]:
                    print(f"  finding: {f.get('text')}", flush=True)
            md, _ = table(rep)
            rep["note"] = await call(client, "record_note", {
                "task": "conv3d_depthwise", "experiment": label, "kind": "lesson",
                "text": f"step 7 search: best variant {best} ({VARIANTS[best] or 'kernel.cu defaults'}) "
                        f"{ok[0][0]} ms on the full shape in its benchmark against "
                        f"{'the same defines of an earlier source' if args.baseline_dir else 'step 6'}.",
                "evidence": {"kind": "measured", "value": ok[0][0], "unit": "ms",
                             "source": f"benchmark tool on {rep['device']}"}})
            labelled = {n for n, v in rep["variants"].items() if v.get("verify")}  # labels this journal holds
            for lesson in LESSONS if args.lessons else []:  # what each step of the search taught (its numbers)
                rep.setdefault("lessons", []).append(await call(client, "record_note", lesson_note(lesson, labelled)))
            if not args.no_export:
                out = await call(client, "export_trajectory", {"task": "conv3d_depthwise", "preview_chars": 0,
                                                                    "label": "conv3d/step7/*"})
                rep["trajectory"] = {k: out.get(k) for k in ("artifact_id", "chart_uri", "report_uri", "points") if k in out}
                await save_trajectory(client, out)
    return rep


_STEMS: dict[str, Path] = {}


def fresh_stem(base: Path, suffixes: tuple[str, ...]) -> Path:
    """This run's file stem: `base`, or `base_runN` where files of an earlier run (committed results a README
    cites) already have the name: a run never overwrites another's results. The same stem for the whole run."""
    if str(base) not in _STEMS:
        stem, n = base, 1
        while any(stem.with_name(stem.name + s).exists() for s in suffixes):
            n += 1
            stem = base.with_name(f"{base.name}_run{n}")
        _STEMS[str(base)] = stem
    return _STEMS[str(base)]


async def save_trajectory(client, out: dict) -> None:
    import base64

    if not out or out.get("error") or not out.get("chart_uri"):
        return
    for name, uri in (("trajectory.png", out["chart_uri"]), ("report.md", out["report_uri"])):
        c = (await client.read_resource(uri)).contents[0]
        data = base64.b64decode(c.blob) if getattr(c, "blob", None) else c.text.encode()
        stem = fresh_stem(RESULTS / f"conv3d_step7_journal_{datetime.date.today().isoformat()}",
                          ("_trajectory.png", "_report.md"))
        dest = stem.with_name(f"{stem.name}_{name}")
        dest.write_bytes(data)
        if os.environ.get("OUT"):
            Path(os.environ["OUT"], dest.name).write_bytes(data)


def _verify_brief(v: dict) -> str:
    if v.get("error"):
        return str(v["error"])[:300]
    bad = [c for c in v.get("cases") or [] if not c.get("passed")]
    return "" if not bad else f"first failing case: {json.dumps(bad[0], default=str)[:300]}"


def table(rep: dict) -> tuple[str, list]:
    pt = full_row(rep.get("bench_vs_pytorch"))
    pt_ms = (pt.get("baseline") or {}).get("median_ms")
    lines = ["| variant | defines | verified | ms (full) | step 6 ms (same call) | speedup vs step 6 | vs PyTorch | "
             "sm_90 regs / spills (nvcc) | sm_90 warps/SM (compile_kernel) | smem B | gfx942 VGPR/waves | "
             "gfx950 VGPR/waves | emulation |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    rows = []
    for name, v in rep["variants"].items():
        b = full_row(v.get("bench_vs_step6"))
        ms, s6 = (b.get("candidate") or {}).get("median_ms"), (b.get("baseline") or {}).get("median_ms")
        if name == rep.get("best") and pt.get("speedup"):
            vs_pt = f"{pt['speedup']:.1f}x (same call)"
        elif ms and pt_ms:
            vs_pt = f"{pt_ms / ms:.1f}x (derived)"
        else:
            vs_pt = "-"
        cpu, comp = v.get("cpu", {}), v.get("compile", {})
        amd = lambda t: (f"{comp[t].get('vgpr')}+{comp[t].get('agpr') or 0} / {comp[t].get('occupancy')}"  # noqa: E731
                         + (f", {comp[t]['spills']} spills" if comp[t].get("spills") else "")
                         if comp.get(t, {}).get("ok") else "-")
        sm = comp.get("sm_90", {})
        emu = max(cpu.get("emulate_nvidia_max_err", float("nan")), cpu.get("emulate_amd_max_err", float("nan")))
        f = lambda x, p: "-" if x is None else f"{x:.{p}f}"  # noqa: E731
        defs = " ".join(f"{k}={val}" for k, val in v["defines"].items()) or "kernel.cu"
        lines.append(f"| {name} | {defs} | {v.get('verified', '-')} | {f(ms, 4)} | {f(s6, 4)} | "
                     f"{f(b.get('speedup'), 2)} | {vs_pt} | "
                     f"{cpu.get('nvcc_registers', '-')} / {cpu.get('nvcc_spill_bytes', '-')} | "
                     f"{sm.get('occupancy', '-')} ({sm.get('limiter', '-')}) | {cpu.get('smem_bytes', '-')} | {amd('gfx942')} | "
                     f"{amd('gfx950')} | {'ok' if emu == 0.0 else emu} |")
        rows.append({"variant": name, "ms": ms})
    return "\n".join(lines) + "\n", rows


def write(rep: dict, final: bool) -> None:
    md, _ = table(rep)
    dev = (rep.get("device") or "cpu").replace(" ", "_")
    stem = fresh_stem(RESULTS / f"conv3d_step7_search_{dev}_{rep['date'][:10]}", (".json", ".md"))
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(rep, indent=1, default=str))
    stem.with_suffix(".md").write_text(f"# conv3d_depthwise step 7 search ({rep.get('device')}, {rep['date']})\n\n"
                                       f"[measured: bench/conv3d_step7_search.py, MCP tools, {rep.get('device')}, "
                                       f"{rep['date'][:10]}]\n\n{md}")
    if final:
        print(md)
    if os.environ.get("OUT"):
        for suf in (".json", ".md"):
            Path(os.environ["OUT"], stem.with_suffix(suf).name).write_bytes(stem.with_suffix(suf).read_bytes())


def main() -> int:
    import anyio

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=DEFAULT, choices=list(VARIANTS))
    ap.add_argument("--cpu-only", action="store_true", help="no verify/benchmark (a host without a GPU)")
    ap.add_argument("--amd", action="store_true", help="also gfx942/gfx950 compiles on a GPU host (needs clang-19)")
    ap.add_argument("--profile", action="store_true", help="profile_pmc on the best variant")
    ap.add_argument("--profile-preset", default="memory")
    ap.add_argument("--profile-each", nargs="*", default=[], help="profile_pmc presets run on every verified variant")
    ap.add_argument("--trace-each", action="store_true", help="thread_trace on every verified variant")
    ap.add_argument("--lessons", action="store_true", help="record the search's lessons (LESSONS) as journal notes")
    ap.add_argument("--baseline-dir", help="benchmark each variant against the same defines of DIR/kernel.cu "
                    "(with DIR/kernel.py) instead of step 6: an A/B of two sources in one call")
    ap.add_argument("--vs-step6", action="store_true", help="with --baseline-dir: also benchmark the best against "
                    "step 6 (default arguments)")
    ap.add_argument("--no-export", action="store_true", help="skip export_trajectory")
    ap.add_argument("--skip-cpu-checks", action="store_true")
    ap.add_argument("--budget-s", type=float, default=200.0,
                    help="start no new variant after this many seconds (the whole run stays under 5 minutes)")
    args = ap.parse_args()
    rep_cpu = {}
    for name in args.only:
        if args.skip_cpu_checks:
            break
        rep_cpu[name] = cpu_checks(name, variant_source(VARIANTS[name]))
        c = rep_cpu[name]
        print(f"  {name} cpu: emulation err nvidia {c['emulate_nvidia_max_err']} amd {c['emulate_amd_max_err']}, "
              f"nvcc regs {c.get('nvcc_registers')} spills {c.get('nvcc_spill_bytes')} smem {c['smem_bytes']} B", flush=True)
        if c["emulate_nvidia_max_err"] != 0.0:
            print(f"  {name}: the emulation disagrees with F.conv3d: dropped", flush=True)
            args.only = [n for n in args.only if n != name]

    rep = anyio.run(search, args, rep_cpu)
    write(rep, final=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
