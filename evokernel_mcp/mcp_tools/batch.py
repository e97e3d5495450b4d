"""MCP adapter: evaluate_batch (plain function in evokernel_mcp/batch/api.py)."""

from mcp.server.mcpserver import MCPServer

from evokernel_mcp.batch import evaluate_batch


def register(mcp: MCPServer) -> None:
    mcp.add_tool(evaluate_batch, name="evaluate_batch")
