"""Journal tests: each test gets its own journal file (the journal setting)."""

from __future__ import annotations

import pytest


@pytest.fixture
def journal(tmp_path, use_settings):
    path = tmp_path / "journal.sqlite3"
    use_settings(journal=path)
    return path
