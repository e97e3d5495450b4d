"""MCP prompts for the main workflows: optimize a kernel for a task; port a KernelBench problem."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import MCPServer
from pydantic import Field

LOOP = """\
Work in this loop, one change at a time, and keep a short log of what each change did to the numbers:
1. query_rocminfo() for the device's real limits (CUs, LDS per workgroup, wave size, peaks).
2. get_task(task="{task}") for the reference, the shape sets and the tolerances.
3. Write a {language} candidate; compile_kernel(source, language="{language}", kernel=..., target="{target}")
   and read registers, LDS, spills, occupancy and the instruction mix. Fix diagnostics first.
4. verify_vs_pytorch(task="{task}", candidate=..., shapes=["{first_shape}"]) on the small shape set first,
   then on all of them. Never benchmark a candidate that fails verify.
5. benchmark(task="{task}", candidate=...) and read speedup, speedup_ci, noise and fraction_of_roofline;
   a result with noise=true shows no difference.
6. When it is slow for a reason you cannot see: profile_pmc(task="{task}", candidate=..., preset="overview"),
   then thread_trace on the kernel it names.
7. search_docs / read_doc for the one hardware fact you need (cite the path).
Long calls return a job handle after wait_s: finish them with job_result(job_id); list_jobs() shows them.
Stop when the candidate is within ~10% of the roofline or three changes in a row gained nothing."""


def optimize_kernel(
    task: Annotated[str, Field(description="Shipped task name (list_tasks), e.g. 'vector_add'.")],
    target: Annotated[str, Field(description="gfx942, gfx950, gfx90a or sm_90; 'live' for the device.")] = "live",
    language: Annotated[str, Field(description="triton, hip or cuda.")] = "triton",
) -> str:
    """Optimize a GPU kernel for a shipped task: compile, verify, benchmark, profile, repeat."""
    from evokernel_mcp.tasks import load_task

    try:
        shapes = load_task(task).shape_names()
    except Exception:  # noqa: BLE001 - the prompt still helps; get_task will name the problem
        shapes = ["small"]
    tgt = "the live device" if target == "live" else target
    head = (f"Goal: the fastest correct {language} kernel for the task '{task}' on {tgt}, measured against "
            f"PyTorch. Shape sets: {', '.join(shapes)}.\n\n")
    return head + LOOP.format(task=task, language=language, target=target if target != "live" else "<omit for "
                              "the live device>", first_shape=shapes[0] if shapes else "small")


def port_kernelbench(
    problem: Annotated[str, Field(description="Path of a KernelBench problem file on the server host, e.g. "
                                  "'KernelBench/level1/23_Softmax.py'.")],
    target: Annotated[str, Field(description="gfx942, gfx950, gfx90a or sm_90; 'live' for the device.")] = "live",
    language: Annotated[str, Field(description="triton, hip or cuda.")] = "triton",
) -> str:
    """Port a KernelBench problem (class Model + get_inputs) to a custom kernel and prove it correct and fast."""
    tgt = "the live device" if target == "live" else target
    return (
        f"Port the KernelBench problem {problem} to a {language} kernel for {tgt}.\n"
        "The harness reads the file itself: pass task=<that path> to verify_vs_pytorch, benchmark and profile_pmc "
        "(or pass its source as reference=...).\n"
        "1. Read the problem: its Model.forward is the reference, get_inputs() the inputs, get_init_inputs() the "
        "constructor arguments.\n"
        "2. Write the candidate as Python source defining class ModelNew(nn.Module) (same constructor "
        "arguments as Model) or run(*inputs); its forward launches your kernel.\n"
        f"3. compile_kernel(language=\"{language}\", ...) until it compiles cleanly with no spills.\n"
        f"4. verify_vs_pytorch(task=\"{problem}\", candidate=...) must pass on every seed before any timing.\n"
        f"5. benchmark(task=\"{problem}\", candidate=...): report the speedup with its interval and the fraction "
        "of the roofline.\n"
        "6. If it is slower than PyTorch, profile_pmc and read_doc to find out why, change one thing, and repeat "
        "from 3.\nReport the final source, the verify verdict and the benchmark numbers with their provenance.")


def register(mcp: MCPServer) -> None:
    mcp.prompt(name="optimize_kernel", title="Optimize a kernel for a task")(optimize_kernel)
    mcp.prompt(name="port_kernelbench", title="Port a KernelBench problem")(port_kernelbench)
