"""verify's server side: a huge seed count is refused before it is expanded."""

from __future__ import annotations

import pytest

from evokernel_mcp.errors import BadInput
from evokernel_mcp.tasks import load_task
from evokernel_mcp.verify import build_payload


def test_huge_seed_count_is_refused_in_the_server():
    t = load_task("vector_add")
    with pytest.raises(BadInput, match="seeds"):
        build_payload(t, "def run(x, y): return x + y", ["small"], 200_000, None, False)
    with pytest.raises(BadInput, match="seeds"):
        build_payload(t, "def run(x, y): return x + y", ["small"], list(range(1001)), None, False)
    with pytest.raises(BadInput, match="seeds"):
        build_payload(t, "def run(x, y): return x + y", ["small"], 0, None, False)
    assert build_payload(t, "def run(x, y): return x + y", ["small"], 3, None, False)["seeds"] == [0, 1, 2]
