"""Journal tests: each test gets its own journal file (EVOKERNEL_JOURNAL)."""

from __future__ import annotations

import pytest


@pytest.fixture
def journal(tmp_path, monkeypatch):
    path = tmp_path / "journal.sqlite3"
    monkeypatch.setenv("EVOKERNEL_JOURNAL", str(path))
    return path
