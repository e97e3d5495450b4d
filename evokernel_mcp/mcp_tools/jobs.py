"""MCP adapter: job_status, job_result, cancel_job (plain functions in runtime/submit.py)."""

from mcp.server.mcpserver import MCPServer

from evokernel_mcp.runtime.submit import cancel_job, job_result, job_status


def register(mcp: MCPServer) -> None:
    mcp.add_tool(job_status, name="job_status")
    mcp.add_tool(job_result, name="job_result")
    mcp.add_tool(cancel_job, name="cancel_job")
