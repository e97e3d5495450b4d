"""Where the KernelBench level-1 files are (../shared/kernelbench/level1, MIT, read in place, never copied)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_CANDIDATES = (REPO.parent / "shared" / "kernelbench" / "level1", Path("/work/shared/kernelbench/level1"))


def kernelbench_level1() -> Path | None:
    return next((p for p in _CANDIDATES if p.is_dir() and any(p.glob("*.py"))), None)


def kb_files(path: Path) -> list[Path]:
    return sorted(path.glob("*.py"), key=lambda p: int(p.name.split("_")[0]))
