"""MCP prompts for the main workflows: optimize a kernel for a task; port a KernelBench problem. Their
arguments are checked against what exists (the task loads, the target and language are ones compile_kernel
takes); a wrong one is a prompts/get error (invalid params) that names the valid values."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from pydantic import Field

from evokernel_mcp.errors import EvoError

LANGUAGES = ("triton", "hip", "cuda")

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


def _invalid(prompt: str, message: str) -> MCPError:
    """An error the SDK passes to the client as is (any other exception reaches it only as 'Error rendering
    prompt')."""
    return MCPError(INVALID_PARAMS, f"{prompt}: {message}")


def _check_target_language(prompt: str, target: str, language: str) -> None:
    from evokernel_mcp.compile.options import TARGETS

    if target != "live" and target not in TARGETS:
        raise _invalid(prompt, f"target {target!r} is not one this server compiles for; use 'live' (the device) "
                       f"or one of {', '.join(TARGETS)}")
    if language not in LANGUAGES:
        raise _invalid(prompt, f"language {language!r} is not one of {', '.join(LANGUAGES)}")


def _load(prompt: str, name: str):
    from evokernel_mcp.tasks import load_task

    try:
        return load_task(name)
    except EvoError as e:
        if prompt == "port_kernelbench":
            raise _invalid(prompt, f"no KernelBench problem at {name!r} ({e}){_problems_hint()}") from None
        raise _invalid(prompt, str(e)) from None


def _problems_hint() -> str:
    from evokernel_mcp.surface.completions import kernelbench_problems

    found = kernelbench_problems()
    if not found:
        return (". No KernelBench folder is configured: start the server with EVOKERNEL_TASK_ROOTS naming a "
                "KernelBench checkout, then pass a problem file's path")
    more = f" and {len(found) - 3} more (complete the argument to list them)" if len(found) > 3 else ""
    return f". KernelBench problems this server serves: {', '.join(found[:3])}{more}"


def optimize_kernel(
    task: Annotated[str, Field(description="Shipped task name (list_tasks), e.g. 'vector_add'.")],
    target: Annotated[str, Field(description="gfx942, gfx950, gfx90a or sm_90; 'live' for the device.")] = "live",
    language: Annotated[str, Field(description="triton, hip or cuda.")] = "triton",
) -> str:
    """Optimize a GPU kernel for a shipped task: compile, verify, benchmark, profile, repeat."""
    _check_target_language("optimize_kernel", target, language)
    shapes = _load("optimize_kernel", task).shape_names()
    tgt = "the live device" if target == "live" else target
    head = (f"Goal: the fastest correct {language} kernel for the task '{task}' on {tgt}, measured against "
            f"PyTorch. Shape sets: {', '.join(shapes)}.\n\n")
    return head + LOOP.format(task=task, language=language, target=target if target != "live" else "<omit for "
                              "the live device>", first_shape=shapes[0] if shapes else "small")


def port_kernelbench(
    problem: Annotated[str, Field(description="Path of a KernelBench problem file on the server host, under a "
                                  "folder it serves (EVOKERNEL_TASK_ROOTS), e.g. '/data/KernelBench/level1/"
                                  "23_Softmax.py'; completion lists them.")],
    target: Annotated[str, Field(description="gfx942, gfx950, gfx90a or sm_90; 'live' for the device.")] = "live",
    language: Annotated[str, Field(description="triton, hip or cuda.")] = "triton",
) -> str:
    """Port a KernelBench problem (class Model + get_inputs) to a custom kernel and prove it correct and fast."""
    _check_target_language("port_kernelbench", target, language)
    if _load("port_kernelbench", problem).kind != "kernelbench":
        raise _invalid("port_kernelbench", f"{problem!r} is a task (task.yaml), not a KernelBench problem file: "
                       "use the optimize_kernel prompt for it")
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
