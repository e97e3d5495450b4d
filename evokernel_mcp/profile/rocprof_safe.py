"""Guarded rocprofv3 runs: the lessons AMD-AGI/GEAK paid for on MI300X/MI350X (kernel_workflow
scripts/kernel_tools/rocprofv3_safe.sh and parse_pmc.collect_pmc_group), as plain functions.

1. A run that hangs is killed at a time limit and reported as DEGRADED with the reason, never as zero
   counters. A run that aborts (rc 134 / a signal) is degraded too.
2. A counter group the hardware cannot schedule in one pass (rocprofv3: "error code 38: Request exceeds
   the capabilities of the hardware to collect"; older releases SIGABRT or hang instead) is BISECTED:
   halves are retried, and only a counter that fails alone is dropped (and named, with the reason).
3. rocprofv3 aborts when HIP_VISIBLE_DEVICES and ROCR_VISIBLE_DEVICES are both set (HIP is then an
   index into the ROCR list): the profiled child gets HIP_VISIBLE_DEVICES only (a sandboxed child's environment
   is an allow-list without ROCR_VISIBLE_DEVICES: runtime/child_proc.py).
4. A kernel-name filter is always passed when one can be known (one GEAK run went from >7 min to ~80 s):
   the agent's kernel_filter, else the kernel names defined in the candidate source.
5. An ATT run whose traced CU caught no waves is retried with a wider CU/SE selection (collect.py).
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

from evokernel_mcp.errors import ToolFailed
from evokernel_mcp.subproc import tail

TOOL = "rocprofv3"
Kind = Literal["ok", "timeout", "abort", "unschedulable", "failed"]

# Genuine rocprofv3 text for a group that does not fit (tests/fixtures/rocm_replay_faults/SOURCES.md).
_UNSCHEDULABLE_RE = re.compile(r"exceeds the capabilities of the hardware|EXCEEDS_HW_LIMIT|error code 38\b", re.I)
# The application itself faulted: splitting counters cannot help.
_APP_FAULT_RE = re.compile(r"Memory access fault by GPU", re.I)
MAX_FAILURES_BEFORE_A_SUCCESS = 4
DEFAULT_PASS_TIMEOUT_S = 150.0  # GEAK's PMC_TIMEOUT default


@dataclass
class RunOutcome:
    kind: Kind
    returncode: int | None
    stderr: str
    reason: str

    @property
    def ok(self) -> bool:
        return self.kind == "ok"


def classify(returncode: int, stderr: str) -> RunOutcome:
    """What a finished rocprofv3 run means (a timeout never gets here: rocm_pipeline._session)."""
    if returncode == 0:
        return RunOutcome("ok", 0, stderr, "")
    t = tail(stderr, 600).strip()
    if _APP_FAULT_RE.search(stderr):
        return RunOutcome("failed", returncode, stderr, f"the profiled application faulted (rc {returncode}): {t}")
    if _UNSCHEDULABLE_RE.search(stderr):
        return RunOutcome("unschedulable", returncode, stderr, f"rocprofv3 could not schedule the counter group "
                          f"in one pass (rc {returncode}: 'exceeds the capabilities of the hardware')")
    if returncode == 134 or returncode < 0 or returncode > 128:
        sig = -returncode if returncode < 0 else returncode - 128
        return RunOutcome("abort", returncode, stderr, f"rocprofv3 aborted (rc {returncode}, signal {sig}; on "
                          "ROCm this is how an over-budget counter group fails on several releases)")
    return RunOutcome("failed", returncode, stderr, f"rocprofv3 failed with exit code {returncode}: {t}")


def raise_failed(out: RunOutcome) -> None:
    raise ToolFailed(TOOL, out.returncode if out.returncode is not None else -1, tail(out.stderr))


# ---------------------------------------------------------------- one visibility variable per process

def single_visibility_env(env: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """Leave exactly one of ROCR_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES (HIP reads the
    CUDA name too) selecting the SAME device. With ROCR set, a HIP/CUDA single index into it is folded into
    ROCR; with HIP and CUDA set, HIP wins (it does in HIP). Returns (env, notes)."""
    out, notes = dict(env), []
    rocr = out.get("ROCR_VISIBLE_DEVICES", "").strip()
    for name in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        val = out.get(name)
        if val is None:
            continue
        if rocr:
            ids = [x.strip() for x in rocr.split(",") if x.strip()]
            if val.strip().isdigit() and int(val) < len(ids):
                rocr = ids[int(val)]
                out["ROCR_VISIBLE_DEVICES"] = rocr
                notes.append(f"{name}={val} inside ROCR_VISIBLE_DEVICES={','.join(ids)}: rocprofv3 aborts on that "
                             f"pair; profiled with ROCR_VISIBLE_DEVICES={rocr} only (the same device).")
            else:
                notes.append(f"{name}={val!r} dropped beside ROCR_VISIBLE_DEVICES={rocr} (one visibility variable "
                             "per profiled process: rocprofv3 aborts on the pair; only the bench and selftest capture "
                             "runs of shipped sources set it, a sandboxed child never gets ROCR_VISIBLE_DEVICES).")
            del out[name]
        elif name == "CUDA_VISIBLE_DEVICES" and out.get("HIP_VISIBLE_DEVICES") is not None:
            del out[name]
            notes.append("CUDA_VISIBLE_DEVICES dropped beside HIP_VISIBLE_DEVICES (one visibility variable).")
    return out, notes


# ---------------------------------------------------------------- kernel filter

_TRITON_DEF_RE = re.compile(r"@triton\.jit[^\n]*\n(?:\s*@[^\n]*\n)*\s*def\s+([A-Za-z_]\w*)\s*\(")
_GLOBAL_RE = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(?:static\s+)?(?:inline\s+)?void\s+"
                        r"(?:__launch_bounds__\s*\([^)]*\)\s*)?([A-Za-z_]\w*)\s*\(")


def kernel_names_in(source: str) -> list[str]:
    """Kernel names a candidate defines: @triton.jit functions and __global__ functions (HIP/CUDA strings)."""
    names = _TRITON_DEF_RE.findall(source) + _GLOBAL_RE.findall(source)
    return list(dict.fromkeys(names))


def effective_filter(kernel_filter: str | None, candidate: str) -> tuple[str | None, str]:
    """(regex, how it was chosen). The agent's filter wins; else the candidate's kernel names."""
    if kernel_filter:
        return kernel_filter, "kernel_filter"
    names = kernel_names_in(candidate or "")
    if names:
        return "|".join(re.escape(n) for n in names), "derived from the kernels defined in the candidate"
    return None, "none: the candidate defines no @triton.jit or __global__ kernel (pass kernel_filter)"


# ---------------------------------------------------------------- bisection of counter groups

@dataclass
class Budget:
    deadline: float
    pass_timeout_s: float

    @classmethod
    def start(cls, total_s: float, pass_timeout_s: float | None) -> Budget:
        return cls(time.monotonic() + total_s, pass_timeout_s or min(DEFAULT_PASS_TIMEOUT_S, max(30.0, total_s / 4)))

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def for_run(self, n_passes: int = 1) -> float:
        return max(0.0, min(self.left(), self.pass_timeout_s * n_passes))


@dataclass
class GroupRuns:
    collected: list[tuple[list[str], object]] = field(default_factory=list)  # (counters, run handle)
    dropped: dict[str, str] = field(default_factory=dict)  # counter -> why it was not collected
    notes: list[str] = field(default_factory=list)


async def collect_groups(groups: list[list[str]], run_one: Callable[[list[str], float], Awaitable[tuple[RunOutcome, object]]],
                         budget: Budget) -> GroupRuns:
    """Run each group in its own pass; a group that times out, aborts or cannot be scheduled is split in
    halves and retried; a single counter that still fails is dropped with the reason. A run that fails
    otherwise (the application's own error) raises ToolFailed. Stops early when rocprofv3 keeps failing
    without one success (the problem is then not the counters) or when the time budget runs out."""
    out, queue = GroupRuns(), deque(list(g) for g in groups if g)
    failures, any_success, last = 0, False, ""
    while queue:
        group = queue.popleft()
        t = budget.for_run()
        if t < 1.0:
            for c in [*group, *(c for g in queue for c in g)]:
                out.dropped[c] = "not collected: the profiling time budget ran out" + (f" after: {last}" if last else "")
            break
        res, handle = await run_one(group, t)
        if res.ok:
            any_success = True
            out.collected.append((group, handle))
            continue
        if res.kind == "failed":
            raise_failed(res)
        failures, last = failures + 1, res.reason
        if not any_success and failures >= MAX_FAILURES_BEFORE_A_SUCCESS:
            why = (f"rocprofv3 failed {failures} times without one successful pass (last: {res.reason}); "
                   "splitting the counters does not help here")
            for c in [*group, *(c for g in queue for c in g)]:
                out.dropped[c] = why
            break
        if len(group) == 1:
            out.dropped[group[0]] = f"fails alone: {res.reason}"
            continue
        half = (len(group) + 1) // 2
        queue.appendleft(group[half:])
        queue.appendleft(group[:half])
        out.notes.append(f"pass {group} failed ({res.kind}); split into {group[:half]} and {group[half:]}")
    return out
