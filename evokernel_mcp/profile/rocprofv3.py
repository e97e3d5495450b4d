"""Running rocprofv3 (counters and ATT thread trace) in a child process; finding and parsing its files.

Counter collection: one `pmc:` line per pass in an `-i` input file; rocprofv3 runs the application
once per line and writes DIR/pmc_<N>/.../<prefix>_counter_collection.csv (FORMATS.md §2.2). Files are
found by globbing, so both `-o NAME` and host/pid layouts work. Passes are merged per dispatch by
(kernel name, ordinal of that kernel within its pass): every pass runs the same application.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from evokernel_mcp import executables
from evokernel_mcp.errors import ParseError, ToolNotFound
from evokernel_mcp.profile.models import CounterDispatch, KernelDispatchRecord
from evokernel_mcp.profile.rocprof_parsers import (
    parse_rocprofv3_counter_collection,
    parse_rocprofv3_kernel_trace,
)
from evokernel_mcp.subproc import probe_version

log = logging.getLogger(__name__)
TOOL = "rocprofv3"
INSTALL_HINT = ("Install ROCm's rocprofiler-sdk (apt install rocprofiler-sdk; rocprofv3 lives in /opt/rocm/bin) "
                "or set ROCPROFV3 to its path.")
ATT_LIB = "librocprof-trace-decoder.so"
ATT_HINT = ("The ATT decoder library librocprof-trace-decoder.so was not found. ROCm 7: install the "
            "rocprof-trace-decoder package (it puts the library in /opt/rocm/lib), or download it from "
            "https://github.com/ROCm/rocprof-trace-decoder/releases and set ROCPROF_ATT_LIBRARY_PATH to its "
            "directory (or pass att_library_path).")
MAX_FILE_BYTES = 8 * 1024 * 1024


def find_rocprofv3() -> tuple[str, str | None]:
    path = executables.require("rocprofv3", hint=INSTALL_HINT)
    return path, probe_version(path, ("--version",))


def find_att_library(explicit: str | None = None) -> str:
    """Directory holding librocprof-trace-decoder.so: explicit > $ROCPROF_ATT_LIBRARY_PATH > ROCm lib dirs."""
    rocm = os.environ.get("ROCM_PATH", "/opt/rocm")
    cands = [explicit, os.environ.get("ROCPROF_ATT_LIBRARY_PATH"), f"{rocm}/lib", "/opt/rocm/lib"]
    for c in cands:
        if not c:
            continue
        p = Path(c)
        if p.is_file() and p.name.startswith("librocprof-trace-decoder"):
            return str(p.parent)
        if p.is_dir() and any(p.glob("librocprof-trace-decoder*.so*")):
            return str(p)
    raise ToolNotFound(ATT_LIB, searched=[c for c in cands if c], env_var="ROCPROF_ATT_LIBRARY_PATH", hint=ATT_HINT)


def input_file_text(passes: list[list[str]]) -> str:
    return "".join("pmc: " + " ".join(p) + "\n" for p in passes)


def binds(exe: str) -> list[str]:
    """Directories of this rocprofv3 install to bind into the sandbox (its launcher and its ROCm tree)."""
    here = [os.path.dirname(os.path.abspath(exe)), os.path.dirname(os.path.realpath(exe))]
    return list(dict.fromkeys(here + [os.path.dirname(h) for h in here]))


def counter_argv(exe: str, input_txt: Path, out_dir: Path, kernel_regex: str | None,
                 iteration_range: str | None) -> list[str]:
    """The collection command before '--' (the session adds the sandboxed child after it); paths relative to
    the child's scratch dir."""
    argv = [exe, "-i", str(input_txt), "--kernel-trace", "--output-format", "csv", "-d", str(out_dir),
            "-o", "prof"]
    if kernel_regex:
        argv += ["--kernel-include-regex", kernel_regex]
    if iteration_range:
        argv += ["--kernel-iteration-range", iteration_range]
    return argv


def att_argv(exe: str, out_dir: Path, kernel_regex: str | None, iteration_range: str | None, *, target_cu: int,
             se_mask: str, simd_select: str, buffer_size: str, library_dir: str | None) -> list[str]:
    argv = [exe, "--att", "--att-target-cu", str(target_cu), "--att-shader-engine-mask", se_mask,
            "--att-simd-select", simd_select, "--att-buffer-size", buffer_size, "--kernel-trace",
            "--output-format", "csv", "-d", str(out_dir), "-o", "prof"]
    if library_dir:
        argv += ["--att-library-path", library_dir]
    if kernel_regex:
        argv += ["--kernel-include-regex", kernel_regex]
    if iteration_range:
        argv += ["--kernel-iteration-range", iteration_range]
    return argv


_PASS_RE = re.compile(r"(?:^|/)pmc_(\d+)(?:/|$)")
_RUN_RE = re.compile(r"(?:^|/)run_(\d+)(?:/|$)")


def _pass_of(path: Path, root: Path) -> tuple[int, int]:
    """(run, pass): one rocprofv3 run per group writes root/run_<k>/pmc_1/...; a combined run root/pmc_<N>/..."""
    rel = path.relative_to(root).as_posix()
    m, r = _PASS_RE.search(rel), _RUN_RE.search(rel)
    return (int(r.group(1)) if r else 0, int(m.group(1)) if m else 1)


def collect_files(out_dir: Path) -> dict[str, str]:
    """All text outputs (CSV/JSON/txt) under out_dir keyed by a flat artifact-safe name."""
    files = {}
    for p in sorted(out_dir.rglob("*")):
        if p.is_file() and p.suffix in (".csv", ".json", ".txt") and p.stat().st_size <= MAX_FILE_BYTES:
            name = re.sub(r"[^A-Za-z0-9._-]", "_", p.relative_to(out_dir).as_posix())[-120:].lstrip("._-")
            files[name or p.name] = p.read_text(errors="replace")
    return files


def read_counter_passes(out_dir: Path) -> tuple[list[list[CounterDispatch]], list[KernelDispatchRecord]]:
    cc = sorted(out_dir.rglob("*_counter_collection.csv"), key=lambda p: _pass_of(p, out_dir))
    if not cc:
        raise ParseError(TOOL, str(out_dir), message="no *_counter_collection.csv was written: no dispatch matched "
                         "the kernel filter, or the counters could not be collected (see rocprofv3 stderr)")
    passes = [parse_rocprofv3_counter_collection(p.read_text(), p.name) for p in cc]
    kt = sorted(out_dir.rglob("*_kernel_trace.csv"), key=lambda p: _pass_of(p, out_dir))
    trace = parse_rocprofv3_kernel_trace(kt[0].read_text(), kt[0].name) if kt else []
    return passes, trace


def merge_passes(passes: list[list[CounterDispatch]], trace: list[KernelDispatchRecord]) -> list[CounterDispatch]:
    """Merge per dispatch: the k-th dispatch of kernel K in pass i joins the k-th of K in pass 1.
    Durations: the counter CSV's End-Start (7.0) else the first pass's kernel trace (same ordinal)."""
    def keyed(ds):
        seen: dict[str, int] = {}
        out = {}
        for d in ds:
            k = seen.get(d.kernel, 0)
            seen[d.kernel] = k + 1
            out[(d.kernel, k)] = d
        return out

    base = [d.model_copy(deep=True) for d in passes[0]]
    base_keys = keyed(base)
    for later in passes[1:]:
        for key, d in keyed(later).items():
            if key in base_keys:
                base_keys[key].counters.update(d.counters)
    trace_keys = keyed(sorted(trace, key=lambda t: t.start_ns))
    for key, d in base_keys.items():
        if d.duration_ns is None and key in trace_keys:
            d.duration_ns = trace_keys[key].duration_ns
    return base


def find_att_dirs(out_dir: Path) -> list[Path]:
    """ui_output_agent_*_dispatch_* directories (decoder output), newest layout first."""
    return sorted(p for p in out_dir.rglob("ui_output_agent_*_dispatch_*") if p.is_dir())
