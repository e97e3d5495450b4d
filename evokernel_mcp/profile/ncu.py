"""Running Nsight Compute: profile into a report (--export), then export CSV pages from it (--import).

Collection (inside the sandbox, profile/runner_side.py): `ncu --metrics M --clock-control none
--profile-from-start off --target-processes all --replay-mode kernel --cache-control all --kernel-name regex:R
--launch-count N --export R -f --log-file ncu_log.txt -- python -m evokernel_mcp.runtime.child ...`. The child
brackets the measured launches with cudaProfilerStart/Stop, so warm-up (and Triton compilation) launches are not
profiled.
Thread trace: `--section SourceCounters --import-source yes`, then `ncu --import R --page source
--print-source cuda,sass --csv` (SASS with the source lines it came from), or `--print-source sass` when the
kernel has no line info.
"""

from __future__ import annotations

from pathlib import Path

from evokernel_mcp import executables
from evokernel_mcp.subproc import probe_version

TOOL = "ncu"
INSTALL_HINT = ("Install NVIDIA Nsight Compute (part of the CUDA toolkit: /usr/local/cuda/bin/ncu, or the "
                "nsight-compute package) or set NCU to its path. Counters need permission: run as root or set "
                "NVreg_RestrictProfilingToAdminUsers=0.")


def find_ncu() -> tuple[str, str | None]:
    path = executables.require("ncu", hint=INSTALL_HINT)
    ver = probe_version(path, ("--version",))
    return path, ver


LOG_FILE = "ncu_log.txt"  # ncu's own messages: never on the profiled child's stdout (the runner's channel)


def binds(exe: str) -> list[str]:
    """Directories of this ncu install to bind into the sandbox (its launcher and where it resolves to)."""
    import os

    return list(dict.fromkeys([os.path.dirname(os.path.abspath(exe)), os.path.dirname(os.path.realpath(exe))]))


def _common(exe: str, report: Path, kernel_regex: str | None, launch_count: int) -> list[str]:
    argv = [exe, "--clock-control", "none", "--profile-from-start", "off", "--target-processes", "all",
            "--replay-mode", "kernel", "--cache-control", "all", "--launch-count", str(launch_count),
            "--export", str(report), "--force-overwrite", "--log-file", LOG_FILE]
    if kernel_regex:
        argv += ["--kernel-name", f"regex:{kernel_regex}"]
    return argv


def metrics_argv(exe: str, report: Path, metrics: list[str], kernel_regex: str | None, launch_count: int) -> list[str]:
    """The collection command before '--' (the session adds the sandboxed child after it)."""
    return _common(exe, report, kernel_regex, launch_count) + ["--metrics", ",".join(metrics)]


def source_argv(exe: str, report: Path, kernel_regex: str | None) -> list[str]:
    return _common(exe, report, kernel_regex, 1) + ["--section", "SourceCounters", "--section", "WarpStateStats",
                                                    "--section", "LaunchStats", "--import-source", "yes",
                                                    "--metrics", "gpu__time_duration.sum"]


def raw_export_argv(exe: str, report: Path) -> list[str]:
    return [exe, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base"]


def source_export_argv(exe: str, report: Path, view: str = "sass") -> list[str]:
    """view 'sass' (one row per instruction) or 'cuda,sass' (source lines, each followed by its SASS)."""
    return [exe, "--import", str(report), "--csv", "--page", "source", "--print-source", view]


