"""evokernel-mcp: an MCP tool server for the GPU-kernel optimization loop."""

__version__ = "0.1.0"
