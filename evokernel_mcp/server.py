"""Builds the MCPServer: registers tools and resources from evokernel_mcp/mcp_tools/*; no logic here."""

from __future__ import annotations

import importlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from mcp.server.mcpserver import MCPServer

from evokernel_mcp import __version__
from evokernel_mcp.app import close_app

log = logging.getLogger(__name__)

# One adapter module per area; each exposes register(mcp). Order = order of tools/list.
TOOL_MODULES = [
    "devices",     # query_rocminfo
    "compile",     # compile_kernel
    "tasks",       # list_tasks, get_task
    "verify",      # verify_vs_pytorch
    "benchmark",   # benchmark, measure_ceilings
    "profile",     # profile_pmc, thread_trace
    "jobs",        # job_status, job_result, cancel_job
    "docs",        # list_docs, search_docs, read_doc + evokernel://docs/...
    "artifacts",   # read_artifact + evokernel://artifacts/...
]

INSTRUCTIONS = """\
evokernel-mcp gives you ground truth for GPU-kernel optimization. Typical loop:
1. query_rocminfo: the device's real limits (CUs, LDS per workgroup, wave size, peaks).
2. search_docs / read_doc: the one hardware fact you need, with its source.
3. compile_kernel: registers, LDS, spills, occupancy and instruction mix of your kernel.
4. verify_vs_pytorch: correctness against the PyTorch reference on fresh random inputs.
5. benchmark: trustworthy timings vs PyTorch and vs the roofline.
6. profile_pmc / thread_trace: hardware counters and per-instruction cycles: why it is slow.
Long calls return a job_id after wait_s; finish them with job_result. Big outputs are artifacts:
page them with read_artifact. Every number carries provenance: trust 'measured' over 'arch table'.
"""


@asynccontextmanager
async def lifespan(_server: MCPServer) -> AsyncIterator[dict]:
    try:
        yield {}
    finally:
        await close_app()


def build_server() -> MCPServer:
    mcp = MCPServer(
        name="evokernel-mcp", version=__version__, instructions=INSTRUCTIONS, lifespan=lifespan,
        warn_on_duplicate_tools=True,
    )
    for name in TOOL_MODULES:
        module = importlib.import_module(f"evokernel_mcp.mcp_tools.{name}")
        module.register(mcp)
    return mcp
