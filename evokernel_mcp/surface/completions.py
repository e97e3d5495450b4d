"""completion/complete: task names, KernelBench problem files, shape sets (of the task already chosen),
targets, languages, presets, doc paths and section anchors, for the prompts' arguments and the resource
templates' variables. Every value offered is one the server accepts."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp_types import Completion

log = logging.getLogger(__name__)
MAX_VALUES = 100


def _tasks() -> list[str]:
    from evokernel_mcp.tasks import task_names

    return task_names()


# A KernelBench problem file defines class Model and get_inputs at top level (tasks.check_reference_source).
_KB_FORM = (re.compile(r"^class Model\b", re.M), re.compile(r"^def get_inputs\b", re.M))
SCAN_DEPTH = 3          # KernelBench/level1/23_Softmax.py under a root is depth 2
SCAN_FILES = 2000       # .py files looked at per call, over all roots
SKIP_DIRS = {"__pycache__", "node_modules", "site-packages"}


def _natural(p: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p)]


def _is_problem(p: Path) -> bool:
    try:
        with p.open(encoding="utf-8", errors="replace") as f:
            head = f.read(200_000)
    except OSError:
        return False
    return all(rx.search(head) for rx in _KB_FORM)


def kernelbench_problems() -> list[str]:
    """KernelBench-form .py files the server can load by path: those under the EVOKERNEL_TASK_ROOTS folders
    (not the shipped tasks, nor a task folder's own reference), up to SCAN_DEPTH levels down. Empty when no
    such folder is configured: a shipped task is not a KernelBench problem."""
    from evokernel_mcp.tasks import task_roots, tasks_dir

    shipped = tasks_dir().expanduser().resolve()
    found: list[str] = []
    budget = SCAN_FILES
    for root in task_roots():
        if root == shipped or not root.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            depth = len(Path(dirpath).relative_to(root).parts)
            dirnames[:] = [] if depth >= SCAN_DEPTH else [
                d for d in dirnames if not d.startswith(".") and d not in SKIP_DIRS]
            if "task.yaml" in filenames:
                dirnames[:] = []
                continue
            for name in filenames:
                if not name.endswith(".py") or budget <= 0:
                    continue
                budget -= 1
                p = Path(dirpath) / name
                if _is_problem(p):
                    found.append(str(p))
    return sorted(set(found), key=_natural)


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
    if argument == "task":
        return _tasks()
    if argument == "problem":
        return kernelbench_problems()
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


def _matches(argument: str, candidate: str, value: str) -> bool:
    """A prefix of the value; a problem path also matches on its file name ('23_' -> .../23_Softmax.py)."""
    return candidate.startswith(value) or (argument == "problem" and Path(candidate).name.startswith(value))


def complete(argument: str, value: str, context_args: dict[str, str] | None = None) -> Completion:
    values = [v for v in candidates(argument, context_args or {}) if _matches(argument, v, value or "")]
    return Completion(values=values[:MAX_VALUES], total=len(values), has_more=len(values) > MAX_VALUES)


def register(mcp: MCPServer) -> None:
    @mcp.completion()
    async def handle(ref: Any, argument: Any, context: Any) -> Completion:
        ctx_args = dict(getattr(context, "arguments", None) or {})
        return complete(argument.name, argument.value, ctx_args)
