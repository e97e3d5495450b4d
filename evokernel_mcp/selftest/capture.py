"""`selftest --capture DIR`: the raw outputs of the device tools, in the layout of tests/fixtures/rocm
(<tool>/<file>, rocprofv3's own directory layout kept inside rocprofv3/<run>/) and tests/fixtures/cuda, with
manifest.json (GPU, ROCm/CUDA version, date, every command) and SOURCES.md. Nothing is reformatted: files are
the tools' stdout or the files they wrote. Check a bundle with `selftest --check-bundle DIR`."""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
from pathlib import Path

from evokernel_mcp import artifacts, executables
from evokernel_mcp.errors import EvoError
from evokernel_mcp.profile import presets, rocprof_safe, rocprofv3
from evokernel_mcp.profile.runner import LocalLaunch, local_env
from evokernel_mcp.selftest import sources
from evokernel_mcp.selftest.models import CaptureFile, Manifest, SelftestReport
from evokernel_mcp.subproc import resolve_executable, run_sync

MAX_BYTES = 32 * 1024 * 1024
_BY_NAME = [(re.compile(p), parser) for p, parser in [
    (r"_counter_collection\.csv$", "rocprofv3_counter_collection"), (r"_kernel_trace\.csv$", "rocprofv3_kernel_trace"),
    (r"_agent_info\.csv$", "rocprofv3_agent_info"), (r"^stats_ui_output.*\.csv$", "att_stats_csv"),
    (r"_stats\.csv$", "rocprofv3_stats"), (r"^code\.json$", "att_code_json"), (r"^filenames\.json$", "att_filenames"),
    (r"^se\d+_sm\d+_sl\d+_wv\d+\.json$", "att_wave"), (r"^occupancy\.json$", "att_occupancy"),
    (r"_results\.json$", "json")]]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:40] or "unknown"


class _Cap:
    def __init__(self, root: Path, man: Manifest):
        self.root, self.man = root, man

    def skip(self, what: str, why: str) -> None:
        self.man.skipped.append({"what": what, "why": why})

    def add(self, rel: str, command: str, parser: str | None, rc: int | None = 0, note: str = "") -> None:
        p = self.root / rel
        self.man.files.append(CaptureFile(path=rel, command=command, parser=parser, returncode=rc,
                                          bytes=p.stat().st_size, note=note))

    def run(self, rel: str, argv: list[str], parser: str | None, timeout_s: float = 120, use_stderr=False) -> bool:
        cmd = " ".join(argv)
        try:
            res = run_sync(argv, timeout_s=timeout_s)
        except EvoError as e:
            self.skip(cmd, str(e)[:400])
            return False
        text = res.stdout or (res.stderr if use_stderr else "")
        if res.returncode != 0 or not text.strip():
            self.skip(cmd, f"exit {res.returncode}: {(res.stderr or res.stdout)[-400:]}")
            return False
        (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
        (self.root / rel).write_text(text, encoding="utf-8")
        self.add(rel, cmd, parser)
        return True

    def register_tree(self, d: Path, command: str, rc: int | None) -> None:
        """Every file a profiler wrote under d, in its own layout; huge binaries are dropped and named."""
        for p in sorted(d.rglob("*")):
            if not p.is_file():
                continue
            rel = p.relative_to(self.root).as_posix()
            if p.stat().st_size > MAX_BYTES:
                self.skip(rel, f"{p.stat().st_size} bytes (over {MAX_BYTES}); removed from the bundle")
                p.unlink()
                continue
            parser = next((ps for rx, ps in _BY_NAME if rx.search(p.name)), None)
            self.add(rel, command, parser, rc)


def _tag(ctx, backend: str | None, versions: dict) -> tuple[str, list[dict]]:
    q = ctx.results.get("query_rocminfo") or {}
    devs = q.get("devices") or []
    gpus = [{"index": d.get("index"), "name": d.get("name"), "arch": d.get("arch"),
             "compute_units": d.get("compute_units")} for d in devs]
    if not devs:
        return "nogpu", gpus
    ver = versions.get("rocm") if backend == "rocm" else (versions.get("nvidia_driver") or "")
    kind = "rocm" if backend == "rocm" else "driver"
    return f"{_slug(devs[0].get('name') or '')}_{devs[0].get('arch')}_{kind}{_slug(ver or 'unknown')}", gpus


def _device_tools(cap: _Cap, tag: str) -> None:
    if executables.find("rocminfo"):
        cap.run(f"rocminfo/rocminfo_{tag}.txt", [executables.find("rocminfo")], "rocminfo")
    else:
        cap.skip("rocminfo", "not found")
    smi = executables.find("amd-smi")
    if smi:
        cap.run(f"amd-smi/static_json_{tag}.json", [smi, "static", "--json"], "amdsmi_json")
        cap.run(f"amd-smi/metric_json_{tag}.json", [smi, "metric", "--json"], "json")
        cap.run(f"amd-smi/static_text_{tag}.txt", [smi, "static"], "amdsmi_text")
        cap.run(f"amd-smi/version_{tag}.txt", [smi, "version"], None)
    else:
        cap.skip("amd-smi", "not found")
    nv = executables.find("nvidia-smi")
    if nv:
        cap.run(f"cuda/nvidia-smi-q-x_{tag}.xml", [nv, "-q", "-x"], "nvidia_smi_xml")
        cap.run(f"cuda/nvidia-smi-query_{tag}.csv", [nv, "--query-gpu=name,clocks.sm,clocks.mem,clocks.max.sm,"
                                                    "clocks.max.mem,memory.total,driver_version", "--format=csv"], None)


def _code_objects(cap: _Cap, ctx) -> None:
    aid = ctx.artifacts.get("compile_hip")
    if not aid:
        cap.skip("code object notes", "compile_hip did not run or failed")
        return
    try:
        hsaco = artifacts.path_of(aid, "kernel.hsaco")
        log = artifacts.path_of(aid, "compile.log")
    except EvoError as e:
        cap.skip("code object notes", str(e))
        return
    arch = (ctx.results.get("query_rocminfo") or {}).get("devices", [{}])[0].get("arch") \
        if ctx.backend == "rocm" and ctx.arch else "gfx942"
    d = cap.root / "code_object"
    d.mkdir(parents=True, exist_ok=True)
    shutil.copy(hsaco, d / f"selftest_add_{arch}.hsaco")
    cap.add(f"code_object/selftest_add_{arch}.hsaco", f"compile_kernel artifact {aid} kernel.hsaco", None)
    shutil.copy(log, d / f"compile_log_{arch}.txt")
    cap.add(f"code_object/compile_log_{arch}.txt", f"compile_kernel artifact {aid} compile.log", None)
    readelf = next((p for p in (resolve_executable("llvm-readelf"), resolve_executable("llvm-readelf-19")) if p), None)
    if readelf:
        cap.run(f"code_object/readelf_notes_{arch}_selftest.txt", [readelf, "--notes", str(d / f"selftest_add_{arch}.hsaco")],
                "amdgpu_metadata")
    else:
        cap.skip("llvm-readelf --notes", "llvm-readelf not found ($ROCM_PATH/llvm/bin or llvm-19)")


def _launch(work: Path, ctx) -> LocalLaunch:
    spec = {"task": sources.TASK, "candidate": sources.TRITON, "shape": "medium" if ctx.has_gpu else "small",
            "warmup": 1, "iters": 2}
    env = local_env("rocm:0" if ctx.backend == "rocm" and ctx.has_gpu else None)
    env, _ = rocprof_safe.single_visibility_env(env)
    return LocalLaunch(spec=spec, env=env, workdir=work, timeout_s=600)


def _profiler_run(cap: _Cap, argv: list[str], out: Path, launch: LocalLaunch) -> None:
    cmd = " ".join(map(str, argv))
    try:
        res = run_sync(argv, timeout_s=launch.timeout_s, env=launch.env, cwd=launch.workdir)
    except EvoError as e:
        cap.skip(cmd, str(e)[:600])
        return
    out.mkdir(parents=True, exist_ok=True)
    (out / "rocprofv3_stderr.txt").write_text(res.stderr[-2_000_000:], encoding="utf-8")
    cap.register_tree(out, cmd, res.returncode)
    if res.returncode != 0:
        cap.skip(cmd, f"exit {res.returncode} (outputs kept): {res.stderr[-400:]}")


def _rocprofv3(cap: _Cap, tag: str, ctx, rocm: str | None) -> None:
    exe = executables.find("rocprofv3")
    if not exe:
        cap.skip("rocprofv3", "not found")
        return
    cap.run(f"rocprofv3/version_{tag}.txt", [exe, "--version"], None, use_stderr=True)
    cap.run(f"rocprofv3/list-avail_{tag}.txt", [exe, "--list-avail"], "rocprofv3_list_avail", use_stderr=True)
    work = cap.root / "_work"
    work.mkdir(parents=True, exist_ok=True)
    launch = _launch(work, ctx)
    arch = ctx.arch if ctx.backend == "rocm" and ctx.arch in presets.AMD_ARCHES else "gfx942"
    passes = presets.split_passes(presets.preset_counters("overview", arch), arch)
    inp = work / "pmc_input.txt"
    inp.write_text(rocprofv3.input_file_text(passes), encoding="utf-8")
    out = cap.root / "rocprofv3" / f"pmc_{tag}_{sources.TASK}"
    _profiler_run(cap, [*rocprofv3.counter_argv(exe, inp, out, sources.KERNEL, "[2-3]"), "--", *launch.child()], out, launch)
    if out.is_dir():
        shutil.copy(inp, out / "pmc_input.txt")
        cap.add(out.relative_to(cap.root).as_posix() + "/pmc_input.txt", "the -i input file of that run", None)
    fmts = ["csv", "json"] + (["rocpd"] if rocm and rocm.split(".")[0].isdigit() and int(rocm.split(".")[0]) >= 7 else [])
    out = cap.root / "rocprofv3" / f"trace_{tag}_{sources.TASK}"
    _profiler_run(cap, [exe, "--kernel-trace", "--stats", "--output-format", *fmts, "-d", str(out), "-o", "trace",
                        "--kernel-include-regex", sources.KERNEL, "--", *launch.child()], out, launch)
    try:
        lib = rocprofv3.find_att_library()
    except EvoError as e:
        cap.skip("rocprofv3 --att", str(e)[:400])
        lib = None
    if lib:
        out = cap.root / "rocprofv3" / f"att_{tag}_{sources.TASK}"
        _profiler_run(cap, rocprofv3.att_argv(exe, out, sources.KERNEL, "[2]", target_cu=0, se_mask="0xF",
                                              simd_select="0xF", buffer_size="0x6000000", library_dir=lib)
                      + ["--", *launch.child()], out, launch)
    shutil.rmtree(work, ignore_errors=True)


def _cuda_pages(cap: _Cap, tag: str, ctx) -> None:
    for step, name, parser in [(f"profile_{p}", "ncu_raw.csv", "ncu_raw_csv") for p in ("overview", "memory")] + \
            [("thread_trace", "ncu_source_sass.csv", "ncu_source_csv")]:
        aid = ctx.artifacts.get(step)
        if not aid:
            continue
        try:
            src = artifacts.path_of(aid, name)
        except EvoError:
            continue
        rel = f"cuda/{name[:-4]}_{step}_{tag}.csv"
        (cap.root / "cuda").mkdir(parents=True, exist_ok=True)
        shutil.copy(src, cap.root / rel)
        cap.add(rel, f"{step} artifact {aid} {name} (ncu page)", parser)


def _sources_md(man: Manifest) -> str:
    rows = "\n".join(f"| `{f.path}` | `{f.command[:300]}` | {f.parser or ''} | {f.returncode} |" for f in man.files)
    skipped = "\n".join(f"- {s['what']}: {s['why']}" for s in man.skipped) or "- nothing"
    gpus = ", ".join(f"{g.get('name')} ({g.get('arch')})" for g in man.gpus) or "no GPU"
    return (f"# Captured by `evokernel-mcp selftest --capture` — provenance\n\nHost {man.host}, {gpus}, ROCm "
            f"{man.rocm_version or '-'}, driver {man.driver_version or '-'}, {man.created_utc}. Files are verbatim tool "
            f"output (stdout, or the files the profiler wrote, in its own layout). Versions: "
            f"{json.dumps(man.versions)}\n\n| file | command | parser | exit |\n|---|---|---|---|\n{rows}\n\n"
            f"## Not captured\n\n{skipped}\n")


def _integrity(cap: _Cap, ctx) -> None:
    """The integrity table (integrity/table.txt for a person, integrity/report.json with the same rows)."""
    data = ctx.results.get("integrity")
    if not data:
        cap.skip("integrity", "the integrity step did not run (--quick or --only)")
        return
    from evokernel_mcp.integrity.cli import table
    from evokernel_mcp.integrity.models import Report

    rep = Report.model_validate(data)
    (cap.root / "integrity").mkdir(parents=True, exist_ok=True)
    (cap.root / "integrity" / "report.json").write_text(rep.model_dump_json(indent=1), encoding="utf-8")
    (cap.root / "integrity" / "table.txt").write_text(table(rep) + "\n", encoding="utf-8")
    cap.add("integrity/report.json", "evokernel-mcp integrity --json", "integrity_report")
    cap.add("integrity/table.txt", "evokernel-mcp integrity", None)


def capture(root: Path, report: SelftestReport, ctx) -> Manifest:
    root.mkdir(parents=True, exist_ok=True)
    v = report.versions
    tag, gpus = _tag(ctx, ctx.backend, v)
    man = Manifest(created_utc=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), host=report.host,
                   backend=ctx.backend, gpus=gpus, rocm_version=v.get("rocm"), driver_version=v.get("nvidia_driver"),
                   cuda_version=v.get("nvcc"), versions=v)
    cap = _Cap(root, man)
    _device_tools(cap, tag)
    _code_objects(cap, ctx)
    _rocprofv3(cap, tag, ctx, v.get("rocm"))
    _cuda_pages(cap, tag, ctx)
    _integrity(cap, ctx)
    (root / "selftest.json").write_text(report.model_dump_json(indent=1), encoding="utf-8")
    (root / "manifest.json").write_text(man.model_dump_json(indent=1), encoding="utf-8")
    (root / "SOURCES.md").write_text(_sources_md(man), encoding="utf-8")
    return man
