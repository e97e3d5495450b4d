"""MCP adapter: list_tasks, get_task (plain functions in evokernel_mcp/tasks.py)."""

from mcp.server.mcpserver import MCPServer

from evokernel_mcp.tasks import get_task, list_tasks


def register(mcp: MCPServer) -> None:
    mcp.add_tool(list_tasks, name="list_tasks")
    mcp.add_tool(get_task, name="get_task")
