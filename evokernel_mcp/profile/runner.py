"""For bench scripts and `selftest --capture` only, on the harness's OWN shipped sources (never agent code: the
tools profile agent code through profile/runner_side.py, sandboxed, candidate alone): a process run UNDER a
profiler that loads a task/reference and a candidate, launches the candidate `warmup` times, then `iters`
times between cudaProfilerStart/Stop (ncu uses --profile-from-start off; rocprofv3 selects by
--kernel-iteration-range), and exits.

    python -m evokernel_mcp.profile.runner --spec spec.json

spec.json: {"task": name | null, "reference": source | null, "candidate": source, "warmup": 1,
"iters": 3, "seed": 0, "shape": name | null, "module_dir": dir | null}. Loading reuses the
verify/benchmark path (evokernel_mcp.candidate + tasks): same inputs, seeds and ModelNew construction.
Nothing is printed to stdout except one final JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class LocalLaunch:
    """A profiler run of shipped sources on this host (bench, selftest capture): spec, env, workdir, limit."""

    spec: dict
    env: dict[str, str]
    workdir: Path
    timeout_s: float

    def child(self) -> list[str]:
        path = self.workdir / "spec.json"
        path.write_text(json.dumps({"module_dir": str(self.workdir / "modules"), **self.spec}), encoding="utf-8")
        return [sys.executable, "-m", "evokernel_mcp.profile.runner", "--spec", str(path)]


def local_env(device: str | None) -> dict[str, str]:
    from evokernel_mcp.runtime.pool import runner_env_for

    if device and not device.startswith("cpu"):
        return runner_env_for(device)
    env = dict(os.environ)
    repo = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH", "")) if p)
    return env


def load(spec: dict[str, Any]):
    """(callable, inputs) through the verify/benchmark launch path (evokernel_mcp.candidate)."""
    import tempfile

    import torch

    from evokernel_mcp import candidate, tasks

    task = tasks.load_task(spec["task"]) if spec.get("task") else tasks.task_from_reference(spec["reference"])
    shape = spec.get("shape") or task.shape_names()[-1]  # shape sets are listed small -> full
    seed = int(spec.get("seed", 0))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    mod_dir = spec.get("module_dir") or tempfile.mkdtemp(prefix="evk_profile_")
    ref_mod = candidate.load_module(task.reference_source, "reference", mod_dir)
    cand_mod = candidate.load_candidate_module(spec["candidate"], mod_dir)
    ref_model = candidate.build_reference(task, ref_mod, seed, device)
    fn = candidate.build_candidate(cand_mod, task, ref_mod, ref_model, seed, device)
    return fn, candidate.make_inputs(task, shape, seed, device, ref_mod)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", required=True)
    args = ap.parse_args(argv)
    with open(args.spec, encoding="utf-8") as f:
        spec = json.load(f)
    import torch

    fn, inputs = load(spec)
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    with torch.no_grad():
        for _ in range(int(spec.get("warmup", 1))):
            fn(*inputs)
        sync()
        if torch.cuda.is_available():
            torch.cuda.profiler.start()
        for _ in range(int(spec.get("iters", 1))):
            fn(*inputs)
        sync()
        if torch.cuda.is_available():
            torch.cuda.profiler.stop()
    sys.stdout.write(json.dumps({"ok": True, "iters": int(spec.get("iters", 1))}) + "\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
