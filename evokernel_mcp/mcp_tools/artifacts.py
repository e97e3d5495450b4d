from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError

from evokernel_mcp import artifacts
from evokernel_mcp.errors import EvoError


def register(mcp: MCPServer) -> None:
    mcp.add_tool(artifacts.read_artifact, name="read_artifact")

    @mcp.resource("evokernel://artifacts/{artifact_id}/{name}", name="artifact_file",
                  description="One file of a stored artifact (assembly, raw profiler output, full tables).")
    def artifact_file(artifact_id: str, name: str) -> str:
        try:
            return artifacts.path_of(artifact_id, name).read_text(encoding="utf-8", errors="replace")
        except EvoError as e:
            raise ResourceError(str(e)) from e
