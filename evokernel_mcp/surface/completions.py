"""completion/complete: task names, shape sets (of the task already chosen), targets, languages, presets,
doc paths and section anchors, for the prompts' arguments and the resource templates' variables."""

from __future__ import annotations

import logging
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp_types import Completion

log = logging.getLogger(__name__)
MAX_VALUES = 100


def _tasks() -> list[str]:
    from evokernel_mcp.tasks import task_names

    return task_names()


def _shapes(task: str | None) -> list[str]:
    if not task:
        return []
    from evokernel_mcp.tasks import load_task

    try:
        return load_task(task).shape_names()
    except Exception:  # noqa: BLE001 - an unknown task has no shape sets to offer
        return []


def _targets() -> list[str]:
    from evokernel_mcp.compile.options import TARGETS

    return ["live", *TARGETS]


def _doc_paths() -> list[str]:
    from evokernel_mcp.docs.index import get_index

    return sorted(get_index().pages)


def _anchors(path: str | None) -> list[str]:
    if not path:
        return []
    from evokernel_mcp.docs.index import get_index

    page = get_index().pages.get(path)
    return [s.anchor for s in page.sections] if page else []


def candidates(argument: str, context_args: dict[str, str]) -> list[str]:
    """All values for an argument name (the same name means the same thing in every prompt/template)."""
    if argument in ("task", "problem"):
        return _tasks()
    if argument in ("shape", "shapes"):
        return _shapes(context_args.get("task"))
    if argument == "target":
        return _targets()
    if argument == "language":
        return ["triton", "hip", "cuda"]
    if argument == "preset":
        return ["overview", "memory", "compute", "lds", "occupancy"]
    if argument == "path":
        return _doc_paths()
    if argument == "anchor":
        return _anchors(context_args.get("path"))
    return []


def complete(argument: str, value: str, context_args: dict[str, str] | None = None) -> Completion:
    values = [v for v in candidates(argument, context_args or {}) if v.startswith(value or "")]
    return Completion(values=values[:MAX_VALUES], total=len(values), has_more=len(values) > MAX_VALUES)


def register(mcp: MCPServer) -> None:
    @mcp.completion()
    async def handle(ref: Any, argument: Any, context: Any) -> Completion:
        ctx_args = dict(getattr(context, "arguments", None) or {})
        return complete(argument.name, argument.value, ctx_args)
