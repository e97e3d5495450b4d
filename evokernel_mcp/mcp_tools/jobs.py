"""MCP adapter: job_status, job_result, cancel_job, list_jobs (plain functions in runtime/submit.py)."""

from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

from evokernel_mcp.runtime.submit import JobList, cancel_job, job_result, job_status, list_jobs_for


async def list_jobs(
    all_callers: Annotated[bool, Field(description="Also jobs started by other sessions (e.g. detached ones "
                                       "from before a reconnect).")] = False,
    include_finished: Annotated[bool, Field(description="Also done/failed/cancelled jobs.")] = True,
    ctx: Context | None = None,
) -> JobList:
    """List your jobs, newest first: job_id, tool, state, age and what each is. Use it to find a job whose
    id you lost; then job_result(job_id) or cancel_job(job_id)."""
    from evokernel_mcp.surface.server import caller_id

    return list_jobs_for(caller_id(ctx) if ctx is not None else None, all_callers or ctx is None, include_finished)


def register(mcp: MCPServer) -> None:
    mcp.add_tool(job_status, name="job_status")
    mcp.add_tool(job_result, name="job_result")
    mcp.add_tool(cancel_job, name="cancel_job")
    mcp.add_tool(list_jobs, name="list_jobs")
