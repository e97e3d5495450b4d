"""Builds the server: registers tools and resources from evokernel_mcp/mcp_tools/*, the prompts and the
completions; no logic here (the surface every tool gets is evokernel_mcp/surface/)."""

from __future__ import annotations

import importlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from evokernel_mcp import __version__
from evokernel_mcp.app import close_app
from evokernel_mcp.surface import completions, prompts
from evokernel_mcp.surface.schema import GLOSSARY
from evokernel_mcp.surface.server import EvoServer

log = logging.getLogger(__name__)

# One adapter module per area; each exposes register(mcp). Order = order of tools/list.
TOOL_MODULES = [
    "devices",     # query_rocminfo
    "compile",     # compile_kernel
    "tasks",       # list_tasks, get_task
    "verify",      # verify_vs_pytorch
    "benchmark",   # benchmark, measure_ceilings
    "profile",     # profile_pmc, thread_trace
    "batch",       # evaluate_batch
    "jobs",        # job_status, job_result, cancel_job, list_jobs
    "docs",        # list_docs, search_docs, read_doc + evokernel://docs/...
    "artifacts",   # read_artifact + evokernel://artifacts/...
    "journal",     # record_note, list_experiments, compare_experiments, best_so_far, distill, export_trajectory
]

INSTRUCTIONS = """\
evokernel-mcp gives you ground truth for GPU-kernel optimization. Typical loop:
1. query_rocminfo: the device's real limits. 2. search_docs / read_doc: one hardware fact, with its source.
3. compile_kernel: registers, LDS, spills, occupancy, instruction mix. 4. verify_vs_pytorch: correctness.
5. benchmark: timings vs PyTorch and the roofline. 6. profile_pmc / thread_trace: why it is slow.
Long calls return a job handle after wait_s (<= 50 s): finish with job_result(job_id); list_jobs shows
yours; they are cancelled when your session ends unless started with detach=true. Big outputs are
artifacts (read_artifact). Errors carry {kind, message, next_call}. Numbers carry provenance.
Resource evokernel://tools/{name} has a tool's full input schema (its advanced arguments too).
""" + GLOSSARY + "\n"


@asynccontextmanager
async def lifespan(_server: Any) -> AsyncIterator[dict]:
    from evokernel_mcp.app import get_app

    get_app().jobs.warm_soon()  # the first device's runner and spares start now, in the background
    try:
        yield {}
    finally:
        await close_app()


def build_server(**kwargs: Any) -> EvoServer:
    """The server; kwargs go to MCPServer (the HTTP entry passes token_verifier and auth; tests that keep
    jobs across client sessions pass lifespan=None, as the HTTP transport's one lifespan does)."""
    kwargs.setdefault("lifespan", lifespan)
    mcp = EvoServer(
        name="evokernel-mcp", version=__version__, instructions=INSTRUCTIONS, warn_on_duplicate_tools=True,
        **kwargs,
    )
    for name in TOOL_MODULES:
        module = importlib.import_module(f"evokernel_mcp.mcp_tools.{name}")
        module.register(mcp)
    _register_tool_schemas(mcp)
    prompts.register(mcp)
    completions.register(mcp)
    return mcp


def _register_tool_schemas(mcp: EvoServer) -> None:
    @mcp.resource("evokernel://tools/{name}", name="tool_schema", mime_type="application/json",
                  description="A tool's full input schema, advanced arguments included.")
    def tool_schema(name: str) -> str:
        return mcp.tool_schema_text(name)
