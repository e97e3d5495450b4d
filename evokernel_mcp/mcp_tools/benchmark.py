"""MCP adapter: benchmark, measure_ceilings (plain functions in evokernel_mcp/benchmark/api.py)."""

from mcp.server.mcpserver import MCPServer

from evokernel_mcp.benchmark.api import benchmark, measure_ceilings


def register(mcp: MCPServer) -> None:
    mcp.add_tool(benchmark, name="benchmark")
    mcp.add_tool(measure_ceilings, name="measure_ceilings")
