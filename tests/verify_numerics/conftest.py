"""The `kb_dir` fixture: the KernelBench level-1 files, or a clean skip when they are absent."""

from __future__ import annotations

from pathlib import Path

import pytest
from numerics_kb import kernelbench_level1


@pytest.fixture
def kb_dir() -> Path:
    path = kernelbench_level1()
    if path is None:
        pytest.skip("KernelBench level-1 files not found (../shared/kernelbench/level1)")
    return path
