"""Where a bench script's result goes: bench/results/<name>, and a copy under $OUT when set (a device call)."""

from __future__ import annotations

import os
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def write_result(name: str, text: str) -> Path:
    out = RESULTS / name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], out.name).write_text(text)
    return out
