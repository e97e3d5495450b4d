from __future__ import annotations

import pytest
from vclock import Clock

from evokernel_mcp.benchmark import interleave


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(interleave.time, "monotonic", c)
    return c
