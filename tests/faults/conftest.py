"""The fault suite's shared server: one in-memory MCP server (real client, real runner, real sandbox) for
the module, a planted secret in its environment, and the checks every fault test makes afterwards."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import anyio
import pytest
from faultkit import SECRET


@pytest.fixture(scope="session")
def leak_dir(tmp_path_factory) -> Path:
    """A world-writable dir outside every scratch: nothing a candidate writes may land here."""
    d = tmp_path_factory.mktemp("leak")
    d.chmod(0o777 | stat.S_ISVTX)
    return d


@pytest.fixture(scope="module")
def server(_isolated_state):
    """(portal-less) helper: call tools on one in-memory server for the whole module."""
    os.environ["EVOKERNEL_FAULT_SECRET"] = SECRET
    from evokernel_mcp.app import close_app
    from evokernel_mcp.server import build_server

    anyio.run(close_app)  # a fresh runner that sees the environment above
    # lifespan=None: one runner and its spares for the whole module, as under HTTP (many sessions, one
    # lifespan): every fault then meets the runner the earlier faults met, and each call does not pay a
    # runner start and two spare starts
    srv = build_server(lifespan=None)
    yield srv
    anyio.run(close_app)
    os.environ.pop("EVOKERNEL_FAULT_SECRET", None)
