"""Replay the conv3d_depthwise optimization journey through the MCP client, step by step.

For every step in resources/reference_kernels/conv3d_depthwise (step1 .. step7): compile_kernel (sm_90,
gfx942, gfx950: registers/VGPRs, shared memory/LDS, occupancy and its binding limit), verify_vs_pytorch
(every shape set, fresh random inputs), benchmark against PyTorch in the same call (the full shape set),
profile_pmc (preset overview: findings) -- all through a real MCP client talking to `evokernel-mcp serve`
over stdio. Writes bench/results/journey_conv3d_<device>_<date>.{md,json,png} (table, raw results, chart:
time bars + bandwidth line per step) and the table into the folder README between the journey markers.

  python3 tools/journey.py                     # on a GPU host (the server runs on the same host)
  python3 tools/journey.py --compile-only      # CPU host: only the compile reports
  python3 tools/journey.py --from-bench <conv3d_steps json>  # chart only (bench/conv3d_steps.py output)
  python3 tools/journey.py --journal           # also label each call experiment="conv3d/<step>"
  python3 tools/journey.py --from-json <GPU run json> --compile-from <compile-only json>   # AMD columns added
The --journal flag is off by default: the tools accept `experiment` only once the journal is wired in.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

import anyio

REPO = Path(__file__).resolve().parent.parent
KDIR = REPO / "resources/reference_kernels/conv3d_depthwise"
RESULTS = REPO / "bench/results"
STEPS = {  # step -> (language, kernel, Triton signature/constexprs or C++ workgroup)
    "step1_naive": ("triton", "_conv3d_dw_naive",
                    {"signature": {"x_ptr": "*bf16", "w_ptr": "*bf16", "y_ptr": "*bf16", "C": "i32", "D": "i32",
                                   "H": "i32", "W": "i32"}, "constexprs": {"BLOCK_H": 8, "BLOCK_W": 128}}),
    "step2_ndhwc": ("triton", "_conv3d_dw_ndhwc",
                    {"signature": {"x_ptr": "*bf16", "w_ptr": "*bf16", "y_ptr": "*bf16", "C": "i32", "D": "i32",
                                   "H": "i32", "W": "i32"}, "constexprs": {"BLOCK_W": 16, "BLOCK_C": 64}}),
    "step3_lds_tile": ("cxx", "conv3d_dw_lds_tile", {"workgroup_size": 128}),
    "step4_tensor_core": ("cxx", "conv3d_dw_tensor_core", {"workgroup_size": None}),  # 128 (NVIDIA), 256 (AMD)
    "step5_scheduled": ("cxx", "conv3d_dw_scheduled", {"workgroup_size": 128}),
    "step6_mma_stream": ("cxx", "conv3d_dw_mma_stream", {"workgroup_size": 128}),
    "step7_mma_tiles": ("cxx", "conv3d_dw_mma_tiles", {"workgroup_size": None}),  # 128 (NVIDIA), 256 (AMD)
}
TARGETS = ["sm_90", "gfx942", "gfx950"]
MARK_BEGIN, MARK_END = "<!-- journey:begin -->", "<!-- journey:end -->"


def candidate(step: str) -> str:
    if STEPS[step][0] == "triton":
        return (KDIR / step / "kernel.py").read_text()
    ns: dict = {"__file__": str(KDIR / "_cxx.py")}
    exec(compile((KDIR / "_cxx.py").read_text(), str(KDIR / "_cxx.py"), "exec"), ns)
    return ns["candidate_source"](KDIR / step)


async def call(client, name: str, args: dict) -> dict | None:
    r = await client.call_tool(name, args)
    if r.is_error:
        print(f"  [{name}] tool error: {r.content[0].text[:600]}", flush=True)
        return {"error": r.content[0].text[:2000]}
    res = r.structured_content or {}
    while res.get("job_id") and res.get("state", "done") not in ("done", "failed", "cancelled") \
            and not res.get("results") and not res.get("cases") and not res.get("dispatches"):
        r = await client.call_tool("job_result", {"job_id": res["job_id"], "wait_s": 50})
        if r.is_error:
            return {"error": r.content[0].text[:2000]}
        res = r.structured_content or {}
        res = res.get("result") or res
    return res


def compile_args(step: str, target: str) -> dict:
    lang, kernel, extra = STEPS[step]
    if lang == "triton":
        return {"source": (KDIR / step / "kernel.py").read_text(), "language": "triton", "kernel": kernel,
                "target": target, "signature": extra["signature"], "constexprs": extra["constexprs"],
                "options": {"num_warps": 4}}
    wg = extra["workgroup_size"] or (256 if target.startswith("gfx") else 128)
    return {"source": (KDIR / step / "kernel.cu").read_text(), "language": "hip" if target.startswith("gfx") else "cuda",
            "kernel": kernel, "target": target, "options": {"workgroup_size": wg}}


def resource_row(res: dict | None) -> dict:
    if not res or res.get("error") or not res.get("ok"):
        diags = [d.get("message") for d in (res or {}).get("diagnostics", [])][:2]
        return {"ok": False, "error": (res or {}).get("error") or diags}
    k = res["kernels"][0]
    occ = k.get("occupancy") or {}
    return {"ok": True, "registers": k.get("registers"), "vgpr": k.get("vgpr_count"), "agpr": k.get("agpr_count"),
            "lds_bytes": k.get("lds_bytes"), "scratch_bytes": k.get("scratch_bytes"),
            "spills": k.get("vgpr_spill_count"), "waves_per_simd": occ.get("waves_per_simd"),
            "warps_per_sm": occ.get("warps_per_sm"), "limiter": occ.get("limiter")}


async def replay(args) -> dict:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    rep: dict = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "steps": {}}
    params = StdioServerParameters(command=sys.executable, args=["-m", "evokernel_mcp", "serve"], env=dict(os.environ))
    async with Client(params) as client:
        rep["device"] = await call(client, "query_rocminfo", {})
        for step in args.steps:
            print(f"== {step}", flush=True)
            st: dict = {"compile": {}}
            extra = {"experiment": f"conv3d/{step}"} if args.journal else {}
            for t in args.targets:
                st["compile"][t] = resource_row(await call(client, "compile_kernel", compile_args(step, t)))
                print(f"  compile {t}: {st['compile'][t]}", flush=True)
            if not args.compile_only:
                src = candidate(step)
                st["verify"] = await call(client, "verify_vs_pytorch", {"task": "conv3d_depthwise", "candidate": src,
                                                                        "seeds": 2, "wait_s": 50, **extra})
                print(f"  verify passed={st['verify'].get('passed')}", flush=True)
                st["benchmark"] = await call(client, "benchmark", {
                    "task": "conv3d_depthwise", "candidate": src, "shapes": ["full"], "min_reps": 30,
                    "max_time_s": 3.0, "wait_s": 50, "timeout_s": 600, **extra})
                b = (st["benchmark"].get("results") or [{}])[0]
                print(f"  benchmark: {(b.get('candidate') or {}).get('median_ms')} ms vs "
                      f"{(b.get('baseline') or {}).get('median_ms')} ms, speedup {b.get('speedup')}", flush=True)
                if args.profile:
                    st["profile"] = await call(client, "profile_pmc", {"task": "conv3d_depthwise", "candidate": src,
                                                                       "preset": "overview", "wait_s": 50, **extra})
            rep["steps"][step] = st
            if getattr(args, "on_step", None):
                args.on_step(rep)  # written after every step: a cut-off run still leaves its table
        if args.journal and not args.compile_only:
            rep["journal"] = await export_journal(client)
    return rep


async def export_journal(client) -> dict:
    """The journal's own view of the replay: distilled lessons and its trajectory chart, saved next to ours."""
    import base64

    out = await call(client, "export_trajectory", {"task": "conv3d_depthwise", "preview_chars": 0})
    if not out or out.get("error") or not out.get("artifact_id"):
        return {"error": (out or {}).get("error", "no export")}
    saved = {}
    for name, uri in (("trajectory.png", out["chart_uri"]), ("report.md", out["report_uri"])):
        c = (await client.read_resource(uri)).contents[0]
        data = base64.b64decode(c.blob) if getattr(c, "blob", None) else c.text.encode()
        dest = RESULTS / f"journey_conv3d_journal_{datetime.date.today().isoformat()}_{name}"
        dest.write_bytes(data)
        if os.environ.get("OUT"):  # a lent GPU host returns only what is under $OUT
            Path(os.environ["OUT"], dest.name).write_bytes(data)
        saved[name] = str(dest.relative_to(REPO))
        print(f"  journal {name} -> {saved[name]}", flush=True)
    pts = out.get("points")
    return {"artifact_id": out["artifact_id"], "points": pts if isinstance(pts, int) else len(pts or []),
            "saved": saved}


def table(rep: dict) -> tuple[str, list[dict]]:
    dev = ((rep.get("device") or {}).get("devices") or [{}])[0].get("name", "?") if isinstance(rep.get("device"), dict) else "?"
    timed = any(st.get("benchmark") for st in rep["steps"].values())
    src = (f"[measured: tools/journey.py, benchmark tool, {dev}, {rep['date'][:10]}]" if timed else
           f"[measured: tools/journey.py --compile-only, compile_kernel on a host without a GPU, {rep['date'][:10]}]")
    rows, base = [], None
    lines = ["| step | verified (all shape sets) | median ms (full) | speedup vs PyTorch (same call) | GB/s | "
             "fraction of FP32 floor | fraction of memory floor | sm_90 regs / occupancy | gfx942 VGPR / waves | "
             "gfx950 VGPR / waves | source |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for step, st in rep["steps"].items():
        b = ((st.get("benchmark") or {}).get("results") or [{}])[0]
        ms = (b.get("candidate") or {}).get("median_ms")
        base = (b.get("baseline") or {}).get("median_ms") or base
        comp = st.get("compile", {})
        cs = lambda t: (f"{comp[t].get('registers') or comp[t].get('vgpr')} / "  # noqa: E731
                        f"{comp[t].get('warps_per_sm') or comp[t].get('waves_per_simd')} ({comp[t].get('limiter')})"
                        if comp.get(t, {}).get("ok") else "-")
        roof = b.get("roofline") or {}  # floor time / measured time: datasheet FP32 rate, measured copy bandwidth
        fp32 = roof.get("fraction_of_peak_tflops")
        mem = roof.get("fraction_of_measured_bandwidth") or roof.get("fraction_of_peak_bandwidth")
        pct = lambda v: "-" if v is None else f"{100 * v:.1f}%"  # noqa: E731
        rows.append({"step": step, "ms": ms, "gbs": b.get("achieved_gbs")})
        f = lambda v, p: "-" if v is None else f"{v:.{p}f}"  # noqa: E731
        lines.append(f"| {step} | {(st.get('verify') or {}).get('passed', '-')} | {f(ms, 4)} | {f(b.get('speedup'), 2)} | "
                     f"{f(b.get('achieved_gbs'), 0)} | {pct(fp32)} | {pct(mem)} | {cs('sm_90')} | "
                     f"{cs('gfx942')} | {cs('gfx950')} | {src} |")
    if base:
        rows.insert(0, {"step": "PyTorch", "ms": base, "gbs": 442e6 / base / 1e6})
    return "\n".join(lines) + "\n", rows


def chart(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if r.get("ms")]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    xs = range(len(rows))
    bars = ax.bar(xs, [r["ms"] for r in rows], color=["#999999"] + ["#3b75af"] * (len(rows) - 1))
    ax.bar_label(bars, labels=[f"{r['ms']:.3f} ms" for r in rows], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("median time, full shape (ms, log)")
    ax.set_xticks(list(xs), [r["step"].replace("_", "\n", 1) for r in rows], fontsize=8)
    ax2 = ax.twinx()
    ax2.plot(list(xs), [r.get("gbs") or 0 for r in rows], "o-", color="#d9534f")
    ax2.set_ylabel("achieved GB/s (442 MB minimal traffic)", color="#d9534f")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def update_readme(md: str, png: Path) -> None:
    readme = KDIR / "README.md"
    text = readme.read_text()
    if MARK_BEGIN not in text:
        return
    rel = os.path.relpath(png, KDIR)
    body = f"{MARK_BEGIN}\n{md}\n![journey chart]({rel})\n{MARK_END}"
    head, rest = text.split(MARK_BEGIN, 1)
    readme.write_text(head + body + rest.split(MARK_END, 1)[1])


def from_bench(path: Path) -> None:
    """The chart from bench/conv3d_steps.py's JSON (development numbers, CUDA events; not the tool)."""
    b = json.loads(path.read_text())
    rows = [{"step": "PyTorch", "ms": b["pytorch"]["median_ms"], "gbs": 442e6 / b["pytorch"]["median_ms"] / 1e6}]
    for st, r in b["steps"].items():
        if "@" not in st and r.get("timing"):
            rows.append({"step": st, "ms": r["timing"]["median_ms"], "gbs": 442e6 / r["timing"]["median_ms"] / 1e6})
    out = path.with_suffix(".png")
    chart(rows, out, f"conv3d_depthwise steps, {b['device']}, {b['date'][:10]} (bench/conv3d_steps.py, CUDA events)")
    print(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", nargs="*", default=list(STEPS))
    ap.add_argument("--targets", nargs="*", default=TARGETS)
    ap.add_argument("--compile-only", action="store_true")
    ap.add_argument("--no-profile", dest="profile", action="store_false")
    ap.add_argument("--journal", action="store_true", help="pass experiment='conv3d/<step>' to the tools")
    ap.add_argument("--no-readme", dest="readme", action="store_false")
    ap.add_argument("--from-bench", type=Path)
    ap.add_argument("--compile-from", type=Path, help="a journey JSON (e.g. from --compile-only on a host with "
                    "clang-19) whose compile reports fill the targets this host cannot compile")
    ap.add_argument("--from-json", type=Path, help="a journey JSON of a GPU run: write its table and the README's "
                    "block again (with --compile-from: the compile reports that run could not make), no GPU work")
    args = ap.parse_args()
    if args.from_bench:
        from_bench(args.from_bench)
        return 0
    if args.from_json:
        rep = json.loads(args.from_json.read_text())
        write(rep, args, final=True, chart_too=False)
        return 0
    args.on_step = lambda rep: write(rep, args, final=False)
    rep = anyio.run(replay, args)
    write(rep, args, final=True)
    return 0


def fill_compile(rep: dict, path: Path) -> None:
    """Compile reports this host could not make (no clang-19 here), taken from a run on a host that could."""
    other = json.loads(path.read_text())
    for step, st in rep["steps"].items():
        for t, row in ((other.get("steps") or {}).get(step, {}).get("compile") or {}).items():
            if row.get("ok") and not st["compile"].get(t, {}).get("ok"):
                st["compile"][t] = {**row, "from": f"{path.name} ({other.get('date', '?')[:10]})"}


def write(rep: dict, args, final: bool, chart_too: bool = True) -> None:
    if args.compile_from:
        fill_compile(rep, args.compile_from)
    md, rows = table(rep)
    dev = next(iter(((rep.get("device") or {}).get("devices") or [{}])), {}).get("name") or "cpu"
    stem = RESULTS / f"journey_conv3d_{'H200' if 'H200' in dev else dev.replace(' ', '_')}_{rep['date'][:10]}"
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(rep, indent=1, default=str))
    stem.with_suffix(".md").write_text(f"# conv3d_depthwise journey ({dev}, {rep['date']})\n\n{md}")
    if not args.compile_only and final:
        if chart_too:
            chart(rows, stem.with_suffix(".png"), f"conv3d_depthwise journey, {dev}, {rep['date'][:10]} (benchmark tool)")
        if args.readme:
            update_readme(md, stem.with_suffix(".png"))
    if final:
        print(md)
    if os.environ.get("OUT"):
        for suf in (".json", ".md", ".png"):
            if stem.with_suffix(suf).exists():
                Path(os.environ["OUT"], stem.with_suffix(suf).name).write_bytes(stem.with_suffix(suf).read_bytes())


if __name__ == "__main__":
    sys.exit(main())
