"""Title and annotations of every tool (MCP ToolAnnotations), in one table.

A tool that is not in TOOLS still gets a title and the *safe* default annotations (not read-only, may be
destructive, not idempotent), and tests/surface/test_registry.py fails until it is added here: the
default exists so a new tool never goes out without hints, the test so nobody relies on it.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from mcp_types import ToolAnnotations


@dataclass(frozen=True)
class ToolMeta:
    title: str
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False
    open_world: bool = False

    def annotations(self) -> ToolAnnotations:
        # no title here: the tool's own title (Tool.title) carries it, once
        return ToolAnnotations(read_only_hint=self.read_only, destructive_hint=self.destructive,
                               idempotent_hint=self.idempotent, open_world_hint=self.open_world)


def _ro(title: str) -> ToolMeta:
    return ToolMeta(title, read_only=True, idempotent=True)


# Tools that run the agent's code get destructiveHint=true: a client should ask (or sandbox-trust) before
# running them. compile_kernel counts: Triton executes the module text it compiles.
TOOLS: dict[str, ToolMeta] = {
    "query_rocminfo": _ro("Device limits and peaks"),
    "compile_kernel": ToolMeta("Compile a kernel (resources, occupancy, ISA mix)", destructive=True, idempotent=True),
    "list_tasks": _ro("List shipped tasks"),
    "get_task": _ro("Read a task"),
    "verify_vs_pytorch": ToolMeta("Verify a candidate against PyTorch (runs your code)", destructive=True),
    "benchmark": ToolMeta("Benchmark a candidate vs PyTorch (runs your code)", destructive=True),
    "measure_ceilings": ToolMeta("Measure device ceilings (copy, matmul, launch cost)", idempotent=True),
    "profile_pmc": ToolMeta("Hardware counters of a candidate (runs your code)", destructive=True),
    "thread_trace": ToolMeta("Instruction-level trace of a candidate (runs your code)", destructive=True),
    "evaluate_batch": ToolMeta("Verify and rank many candidates (runs your code)", destructive=True),
    "sweep": ToolMeta("Verify and rank a kernel's configurations (runs your code)", destructive=True),
    "job_status": _ro("Look at a job"),
    "job_result": _ro("Wait for a job's result"),
    "cancel_job": ToolMeta("Cancel a job", destructive=True, idempotent=True),
    "list_jobs": _ro("List your jobs"),
    "list_docs": _ro("List the hardware docs"),
    "search_docs": _ro("Search the hardware docs"),
    "read_doc": _ro("Read a doc page or section"),
    "read_artifact": _ro("Page through an artifact"),
    # the experiment journal (evokernel_mcp/mcp_tools/journal.py)
    "record_note": ToolMeta("Record a note in the journal"),
    "list_experiments": _ro("List journal experiments"),
    "compare_experiments": _ro("Compare journal experiments"),
    "best_so_far": _ro("Best candidate so far"),
    "distill": _ro("Distill lessons from the journal"),
    "export_trajectory": _ro("Export the journal trajectory"),
}


def meta_for(name: str) -> ToolMeta:
    """The table entry, or the safe default (a title from the name, every hint on the cautious side)."""
    if name in TOOLS:
        return TOOLS[name]
    return ToolMeta(name.replace("_", " ").capitalize(), read_only=False, destructive=True, idempotent=False,
                    open_world=False)


def is_long(fn) -> bool:
    """A long tool is one that may hand back a job: it takes `wait_s`. (job_result waits on one, it does
    not start one, so it is not long.)"""
    params = inspect.signature(fn).parameters
    return "wait_s" in params and fn.__name__ != "job_result"
