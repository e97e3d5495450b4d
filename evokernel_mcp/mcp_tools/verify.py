"""MCP adapter: verify_vs_pytorch (plain function in evokernel_mcp/verify/api.py)."""

from mcp.server.mcpserver import MCPServer

from evokernel_mcp.verify import verify_vs_pytorch


def register(mcp: MCPServer) -> None:
    mcp.add_tool(verify_vs_pytorch, name="verify_vs_pytorch")
