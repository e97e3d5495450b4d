"""Op "verify" in the runner (harness code only; never imports agent code).

Per job: the reference child for this reference source (cached; spares.py) makes each case's inputs
and outputs; a fresh candidate child (a spare, used for this job only, then killed with its tree and
its scratch dir removed) runs the candidate twice on its own copies; the runner compares (case.py).
A failure of the inputs or the reference is reported as kind "harness", never as the candidate's.
"""

from __future__ import annotations

import platform
import time
from typing import Any

from evokernel_mcp.runtime.spares import ChildFailed, wall_deadline
from evokernel_mcp.tasks import Task

LOAD_TIMEOUT_S = 120.0
OUTPUT_SLACK = 8  # a candidate may send up to 8x the reference's output bytes (dtype mix-ups), not more


def _nbytes(obj: Any) -> int:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(o) for o in obj)
    if isinstance(obj, dict):
        return sum(_nbytes(o) for o in obj.values())
    return 0


def load_candidate(ctx, child, source: str, task: Task, deadline: float) -> None:
    child.request({"op": "load", "role": "candidate", "source": source, "task": task.model_dump()},
                  timeout_s=min(LOAD_TIMEOUT_S, wall_deadline(deadline)), max_bytes=0)


def runner_verify(payload: dict[str, Any], progress) -> dict[str, Any]:
    """Returns {cases, error?, reference_precision, isolation, stdout, stderr}."""
    from evokernel_mcp.runtime.runner import context

    ctx = context()
    task = Task(**payload["task"])
    deadline = time.monotonic() + float(payload.get("budget_s", 280))
    out: dict[str, Any] = {"cases": [], "platform": platform.machine(),
                           "reference_precision": "float64 (inputs upcast), in the reference's own process"}
    try:
        ref = ctx.spares.reference(task, timeout_s=min(LOAD_TIMEOUT_S, wall_deadline(deadline)))
    except ChildFailed as e:
        out["error"] = e.info()
        out["isolation"] = ctx.spares.isolation()
        return out
    cand = ctx.spares.take()
    out["isolation"] = ctx.spares.isolation()
    try:
        load_candidate(ctx, cand, payload["candidate"], task, deadline)
        _cases(ctx, ref, cand, task, payload, deadline, progress, out)
    except ChildFailed as e:
        out["error"] = e.info()
    finally:
        out["stdout"], out["stderr"] = cand.output()
        cand.discard()
    return out


def _cases(ctx, ref, cand, task: Task, payload: dict, deadline: float, progress, out: dict) -> None:
    from evokernel_mcp.verify.case import judge

    total = len(payload["shapes"]) * len(payload["seeds"])
    for shape in payload["shapes"]:
        for seed in payload["seeds"]:
            progress(len(out["cases"]), total, f"verify {task.name} {shape} seed {seed}")
            try:
                case = ref.request({"op": "case", "shape": shape, "seed": seed, "hi": True},
                                   timeout_s=wall_deadline(deadline), max_bytes=1 << 42)
            except ChildFailed as e:
                if e.kind in ("timeout", "crash", "oom", "gpu_fault"):
                    ctx.spares.drop_reference(ref)
                raise ChildFailed("harness" if e.kind in ("exception", "bad_candidate") else e.kind,
                                  f"reference side, shape set {shape!r} seed {seed}: {e.message}", e.detail) from e
            limit = OUTPUT_SLACK * _nbytes(case["native"]) + (16 << 20)
            runs = []
            for poison in ("nan", "sentinel"):
                req = {"op": "run", "inputs": case["inputs"], "init_inputs": case["init_inputs"],
                       "state": case["state"], "seed": seed, "poison": poison}
                try:
                    runs.append(cand.request(req, timeout_s=wall_deadline(deadline), max_bytes=limit))
                except ChildFailed as e:
                    if e.kind == "exception":
                        e.message = f"candidate raised {e.message} (shape set {shape!r}, seed {seed})"
                    raise
            out["cases"].append(judge(task, shape, seed, case["native"], case["hi"], runs[0], runs[1],
                                      payload.get("tolerance")))
            if payload.get("stop_on_first_failure") and not out["cases"][-1]["passed"]:
                return
    progress(total, total, "verify done")
