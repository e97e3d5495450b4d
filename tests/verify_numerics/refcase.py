"""Run one verify case in-process on the CPU, as the runner does it (reference child op, candidate child op,
case judge), without processes: for fast tests of what the reference side computes and how it is judged."""

from __future__ import annotations

from pathlib import Path

from evokernel_mcp import candidate as cand
from evokernel_mcp.kb_candidates import perturbed, same_code
from evokernel_mcp.runtime.child import Loaded
from evokernel_mcp.tasks import task_from_reference
from evokernel_mcp.verify import cand_side, sides
from evokernel_mcp.verify.case import judge

# a perturbation of about 1% of an output of scale 1: outputs x1.01 + 1e-2
PERTURB_1PCT = perturbed("").replace("1e-3", "1e-2")


def run_case(reference: str, candidate: str, tmp: Path, seed: int = 0, tag: str = "m") -> dict:
    """The case record (VerifyCase fields) of `candidate` against the KernelBench-form `reference`."""
    task = task_from_reference(reference)
    shape = task.shape_names()[0]
    ref = Loaded("reference", cand.load_module(task.reference_source, f"ref_{tag}", tmp), task, "cpu")
    case = sides.ref_case(ref, {"shape": shape, "seed": seed, "hi": True})
    got = Loaded("candidate", cand.load_module(candidate, f"cand_{tag}", tmp), task, "cpu")
    base = {"init_inputs": case["init_inputs"], "state": case["state"], "seed": seed}
    run_a = cand_side.cand_run(got, {**base, "inputs": case["inputs"], "poison": "nan", "keep": True})
    run_b = cand_side.cand_run(got, {**base, "poison": "sentinel", "same_inputs": True})
    return judge(task, shape, seed, case, run_a, run_b, None)


def same_and_perturbed(reference: str, tmp: Path, tag: str) -> tuple[dict, dict]:
    """(same-code case, 1%-perturbed case)."""
    return (run_case(reference, same_code(reference), tmp, tag=f"{tag}_same"),
            run_case(reference, reference + PERTURB_1PCT, tmp, tag=f"{tag}_pert"))
