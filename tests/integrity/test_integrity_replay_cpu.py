"""The integrity self-test on the CPU path: every exploit of the corpus that runs here, replayed against a
server with a planted secret; a broken defence fails this test (and so CI)."""

from __future__ import annotations

import anyio
import pytest

pytestmark = pytest.mark.slow


def test_every_cpu_exploit_is_held(_isolated_state):
    from evokernel_mcp.app import close_app
    from evokernel_mcp.integrity.cli import table
    from evokernel_mcp.integrity.replay import run_integrity

    anyio.run(close_app)  # a fresh runner that sees the planted secret
    try:
        report = anyio.run(lambda: run_integrity(inproc=True))
    finally:
        anyio.run(close_app)
    assert report.backend == "cpu" and len(report.rows) >= 60
    assert not report.broken, "\n" + table(report)
