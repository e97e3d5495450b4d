"""MCP adapter of the experiment journal (logic in evokernel_mcp/journal/): the tools record_note,
list_experiments, compare_experiments, best_so_far, distill, export_trajectory, and the resources
evokernel://journal/{task} (the whole journal of a task) and evokernel://journal/{task}/distilled."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError

from evokernel_mcp.errors import EvoError
from evokernel_mcp.journal import api


def _text(fn, task: str) -> str:
    try:
        return fn(task)
    except EvoError as e:
        raise ResourceError(str(e)) from e


def register(mcp: MCPServer) -> None:
    for fn in (api.record_note, api.list_experiments, api.compare_experiments, api.best_so_far, api.distill,
               api.export_trajectory):
        mcp.add_tool(fn, name=fn.__name__)

    @mcp.resource("evokernel://journal/{task}/distilled", name="journal_distilled", mime_type="text/markdown",
                  description="The task's journal compressed: winners, each failure class once with its lesson, "
                  "open unverified claims. Read it first when resuming a task.")
    def journal_distilled(task: str) -> str:
        return _text(api.distilled_markdown, task)

    @mcp.resource("evokernel://journal/{task}", name="journal", mime_type="text/markdown",
                  description="The task's experiment journal: every variant tried (verdict, time, speedup, failure, "
                  "result ids) and every note with its evidence.")
    def journal(task: str) -> str:
        return _text(api.journal_markdown, task)
