"""Stand-in profilers for the CPU host (tests only): executables that RUN THE COMMAND THEY ARE GIVEN (the
sandboxed child, after `--`, with its stdin/stdout: the runner's channel) like the real tools, and write
genuine recorded outputs where the tools would:
- rocprofv3: then hands over to tests/fixtures/rocm_replay/rocprofv3 (verbatim recorded CSV/ATT files);
- ncu: writes the report named by --export and its messages to --log-file; `--import R --page raw|source
  --csv` prints the recorded H200 pages of tests/fixtures/cuda.
Each prints its argv as a JSON line on stderr (the session hands the profiler's stderr back). The rocprofv3
one exits 134 before the application runs when its pmc input names a counter listed in abort_if.txt beside it
(how several rocprofv3 releases fail on a counter group they cannot collect)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ROCPROF_REPLAY = FIXTURES / "rocm_replay" / "rocprofv3"
NCU_RAW = FIXTURES / "cuda" / "ncu_raw_axpy_full_h200.csv"
NCU_SOURCE = FIXTURES / "cuda" / "ncu_source_sass_axpy_h200.csv"

_RUN_CHILD = '''
import json, os, subprocess, sys
argv = sys.argv[1:]
sys.stderr.write("STANDIN-ARGV " + json.dumps(argv) + "\\n")
sys.stderr.flush()
def run_child():
    child = argv[argv.index("--") + 1:]
    rc = subprocess.run(child).returncode
    if rc != 0:
        sys.stderr.write(f"standin: application exited with {rc}\\n")
        sys.exit(rc)
'''

ROCPROFV3 = _RUN_CHILD + '''
abort_if = os.path.join(os.path.dirname(os.path.abspath(__file__)), "abort_if.txt")
if "-i" in argv and os.path.exists(abort_if):  # rocprofv3 on a group it cannot collect: rc 134, no application
    if set(open(abort_if).read().split()) & set(open(argv[argv.index("-i") + 1]).read().split()):
        sys.stderr.write("standin: aborting before the application runs (abort_if.txt)\\n")
        os._exit(134)
if "--" in argv:
    run_child()
os.environ.pop("REPLAY_RUN_CHILD", None)
os.execv(sys.executable, [sys.executable, @REPLAY@, *argv])
'''

NCU = _RUN_CHILD + '''
if argv[:1] == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler\\nVersion 2025.3.1.0 (STAND-IN)")
elif "--import" in argv:
    page = argv[argv.index("--page") + 1]
    sys.stdout.write(open(@RAW@ if page == "raw" else @SOURCE@).read())
else:
    run_child()
    open(argv[argv.index("--log-file") + 1], "w").write("==PROF== stand-in: profiled the application\\n")
    open(argv[argv.index("--export") + 1], "wb").write(b"stand-in report")
'''


def install(d: Path, *tools: str) -> Path:
    """Write the stand-ins (each a script run by this interpreter) into d, readable by the sandbox's uid."""
    d.mkdir(parents=True, exist_ok=True)
    body = {"rocprofv3": ROCPROFV3.replace("@REPLAY@", repr(str(ROCPROF_REPLAY))),
            "ncu": NCU.replace("@RAW@", repr(str(NCU_RAW))).replace("@SOURCE@", repr(str(NCU_SOURCE)))}
    for t in tools:
        exe = d / t
        exe.write_text(f"#!{sys.executable}\n" + body[t])
        exe.chmod(0o755)
    for p in (d, *d.parents):
        if str(p) in ("/", "/tmp"):
            break
        p.chmod(p.stat().st_mode | stat.S_IXOTH | stat.S_IROTH)
    return d


def use(monkeypatch, d: Path) -> None:
    monkeypatch.setenv("PATH", f"{d}:{os.environ['PATH']}")
    for v in ("ROCPROFV3", "NCU"):
        monkeypatch.delenv(v, raising=False)
    from evokernel_mcp.subproc import probe_version

    probe_version.cache_clear()
