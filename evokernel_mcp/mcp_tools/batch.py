"""MCP adapters: evaluate_batch (evokernel_mcp/batch/api.py) and sweep (evokernel_mcp/batch/sweep.py)."""

from mcp.server.mcpserver import MCPServer

from evokernel_mcp.batch import evaluate_batch
from evokernel_mcp.batch.sweep import sweep


def register(mcp: MCPServer) -> None:
    mcp.add_tool(evaluate_batch, name="evaluate_batch")
    mcp.add_tool(sweep, name="sweep")
