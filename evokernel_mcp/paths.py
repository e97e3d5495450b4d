"""Where things live (settings.py says where the state dir is); creates directories on first use."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_DIR = PACKAGE_DIR.parent
RESOURCES_DIR = REPO_DIR / "resources"  # the docs pages and the arch table (tests point it at a small tree)
TASKS_DIR = REPO_DIR / "tasks"


def resources_dir() -> Path:
    return RESOURCES_DIR


def tasks_dir() -> Path:
    return TASKS_DIR


def state_dir() -> Path:
    """Caches, artifacts, job scratch: the home setting (EVOKERNEL_HOME, else ~/.cache/evokernel-mcp)."""
    from evokernel_mcp import settings

    p = settings.get().home.expanduser()
    p.mkdir(parents=True, exist_ok=True)
    return p


def sub_state_dir(name: str) -> Path:
    p = state_dir() / name
    p.mkdir(parents=True, exist_ok=True)
    return p


def prune_old_dirs(parent: Path, keep: int = 64) -> int:
    """Remove all but the `keep` most recently modified subdirectories of parent (job and runner scratch:
    candidate sources, captured output). Best effort; returns how many were removed."""
    import shutil

    try:
        dirs = sorted((d for d in parent.iterdir() if d.is_dir() and not d.is_symlink()),
                      key=lambda d: d.stat().st_mtime, reverse=True)
    except OSError:
        return 0
    removed = 0
    for d in dirs[keep:]:
        shutil.rmtree(d, ignore_errors=True)
        removed += 1
    return removed
