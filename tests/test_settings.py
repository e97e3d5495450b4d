"""The settings: one table in docs/configuration.md, one module that reads them, flags over environment over
defaults, and the resolved settings handed to the runners."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from evokernel_mcp import cli, settings
from evokernel_mcp.paths import PACKAGE_DIR, REPO_DIR

DOC = REPO_DIR / "docs" / "configuration.md"
USER_VAR = re.compile(r"(?<![A-Za-z0-9_])EVOKERNEL_[A-Z0-9_]+")
INTERNAL_VAR = re.compile(r"(?<![A-Za-z0-9])_EVOKERNEL_[A-Z0-9_]+")


def _sources() -> dict[Path, str]:
    return {p: p.read_text(encoding="utf-8") for p in PACKAGE_DIR.rglob("*.py")}


def _documented() -> tuple[set[str], set[str]]:
    """(user-facing, internal) variables named in the doc's tables."""
    rows = [re.split(r"(?<!\\)\|", line) for line in DOC.read_text(encoding="utf-8").splitlines()
            if line.startswith("|")]
    user = {m for cells in rows for m in USER_VAR.findall(cells[2])}
    internal = {m for cells in rows for m in INTERNAL_VAR.findall(cells[1])}
    return user, internal


def test_the_variables_the_package_names_are_the_documented_ones():
    user, internal = _documented()
    named = {m for text in _sources().values() for m in USER_VAR.findall(text)}
    named_internal = {m for text in _sources().values() for m in INTERNAL_VAR.findall(text)}
    assert named == user, f"named in the code only: {named - user}; in the doc only: {user - named}"
    assert named_internal == internal
    assert set(settings.ENV.values()) == user  # and settings.py reads every one of them
    assert len(user) <= 15


def test_the_readme_and_docs_name_only_documented_variables():
    """A variable the prose tells a user to set, but nothing reads, is a setting that silently does nothing."""
    user, internal = _documented()
    pages = [REPO_DIR / "README.md", *sorted((REPO_DIR / "docs").rglob("*.md"))]
    named = {(p.relative_to(REPO_DIR).as_posix(), m) for p in pages
             for m in USER_VAR.findall(p.read_text(encoding="utf-8"))}
    named_internal = {m for p in pages for m in INTERNAL_VAR.findall(p.read_text(encoding="utf-8"))}
    assert {(page, m) for page, m in named if m not in user and f"_{m}" not in internal} == set()
    assert named_internal <= internal


def test_only_settings_py_reads_evokernel_variables():
    reads = re.compile(r"(environ(\.get|\.pop)?\s*[\[(]|getenv\()\s*[\"']EVOKERNEL_")
    readers = {p.relative_to(PACKAGE_DIR).as_posix() for p, text in _sources().items() if reads.search(text)}
    assert readers <= {"settings.py"}, readers


def test_flags_over_environment_over_defaults(tmp_path):
    env = {"EVOKERNEL_HOME": str(tmp_path / "env"), "EVOKERNEL_DEVICES": "cuda:0, cuda:1",
           "EVOKERNEL_TASK_ROOTS": f"{tmp_path / 'a'}:{tmp_path / 'b'}", "EVOKERNEL_START_TIMEOUT_S": "30",
           "EVOKERNEL_CHILD_MEMORY": "8G"}
    s = settings.load(env)
    assert s.home == tmp_path / "env" and s.devices == ("cuda:0", "cuda:1") and s.start_timeout_s == 30
    assert s.task_roots == (tmp_path / "a", tmp_path / "b") and s.child_memory == "8G"
    flagged = settings.load(env, home=str(tmp_path / "flag"), devices="cpu", executor=None)
    assert flagged.home == tmp_path / "flag" and flagged.devices == ("cpu",) and flagged.executor == "local"
    d = settings.load({"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert d.home == tmp_path / "xdg" / "evokernel-mcp" and d.devices is None and d.sandbox == "auto"


def test_a_bad_value_names_its_variable():
    with pytest.raises(ValueError, match="EVOKERNEL_RAY_SLOTS"):
        settings.load({"EVOKERNEL_RAY_SLOTS": "0"})
    with pytest.raises(ValueError, match="EVOKERNEL_SANDBOX"):
        settings.load({"EVOKERNEL_SANDBOX": "none"})
    with pytest.raises(ValueError):
        settings.Settings.model_validate({"no_such_setting": 1})


def test_a_runner_gets_the_servers_settings_without_the_token(tmp_path):
    serve = settings.load({"EVOKERNEL_HTTP_TOKEN": "t" * 20}, home=str(tmp_path), journal=str(tmp_path / "j.db"))
    env = {settings.INTERNAL: serve.model_dump_json(exclude={"http_token"}), "EVOKERNEL_HOME": "/elsewhere"}
    runner = settings.load(env)
    assert runner.home == tmp_path and runner.journal == tmp_path / "j.db" and runner.http_token is None
    assert "t" * 20 not in env[settings.INTERNAL]


def test_serve_flags_reach_the_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("EVOKERNEL_JOURNAL", str(tmp_path / "env.db"))
    ns = cli.build_parser().parse_args(["serve", "--home", str(tmp_path), "--journal", str(tmp_path / "f.db"),
                                        "--task-root", "/a", "--task-root", "/b", "--sandbox", "process"])
    assert cli._configure(ns) is None
    s = settings.get()
    assert s.home == tmp_path and s.journal == tmp_path / "f.db" and s.task_roots == (Path("/a"), Path("/b"))
    assert s.sandbox == "process"
    from evokernel_mcp.journal.store import journal_path
    from evokernel_mcp.runtime.pool import runner_env_for

    assert journal_path() == tmp_path / "f.db"
    assert settings.load(runner_env_for("cpu")).home == tmp_path  # the runner's view


def test_doctor_reports_the_clang_compile_kernel_runs(tmp_path, use_settings):
    from evokernel_mcp import doctor, executables
    from evokernel_mcp.compile import hip_offline

    fake = tmp_path / "my-clang"
    fake.write_text("#!/bin/sh\necho 'clang version 19.1.7'\n")
    fake.chmod(0o755)
    use_settings(clang=str(fake))
    row = next(t for t in doctor.check_toolchains() if t.name == "clang")
    assert row.path == str(fake) == hip_offline.resolve_clang19() == executables.find("clang")
    use_settings(clang=str(tmp_path / "missing"))
    assert executables.find("clang") is None  # told: that one or nothing
    assert not next(t for t in doctor.check_toolchains() if t.name == "clang").found
