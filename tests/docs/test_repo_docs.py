"""The README and docs/ as a reader meets them: the README stays a short front door, every repository path
they name exists, and no history (numbered work rounds, issue numbers) leaks into the README, the docs, the
code or the test names (history goes in CHANGELOG.md)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
RESULTS_MD = REPO / "bench" / "RESULTS.md"
PAGES = [README, *DOCS, RESULTS_MD]
SELF = str(Path(__file__).resolve().relative_to(REPO))

TOP = ("evokernel_mcp", "bench", "tests", "tools", "resources", "tasks", "docs", ".ci")
PACKAGE = ("runtime", "verify", "benchmark", "compile", "profile", "surface", "devices", "journal", "executors",
           "batch", "arch", "selftest", "mcp_tools")
ROOT_PATH = re.compile(r"(?<![\w./~$<{:-])((?:%s)/[\w.*/-]*)" % "|".join(re.escape(t) for t in TOP))
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
BARE_FILE = re.compile(r"^[\w.-]+\.(?:py|sh|md|json|txt|log|csv|png|tgz|yaml|toml)$")

ROUND = re.compile(r"\bsessions?[ -]?\d+", re.IGNORECASE)
ISSUE = re.compile(r"\bissue[ -]?#?\d+", re.IGNORECASE)
HASH_NUMBER = re.compile(r"(?<![\w&/])#\d+\b")


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=False)
    if out.returncode != 0:  # not a git checkout (a tarball): walk the tree instead
        return [str(p.relative_to(REPO)) for p in REPO.rglob("*") if p.is_file() and ".venv" not in p.parts]
    return out.stdout.splitlines()


def _exists(rel: str, base: Path = REPO) -> bool:
    rel = rel.rstrip(".,;")
    if "*" in rel:
        return any(base.glob(rel.rstrip("/")))
    return (base / rel).exists()


def _named_paths(page: Path) -> list[tuple[str, bool]]:
    """(path as written, whether it exists) for every repository path the page names."""
    text = page.read_text(encoding="utf-8")
    found: list[tuple[str, bool]] = []
    for m in ROOT_PATH.finditer(text):
        p = m.group(1).rstrip(".,;")
        if p.endswith("..."):
            continue
        found.append((p, _exists(p)))
    for m in LINK.finditer(text):
        target = m.group(1).split("#", 1)[0]
        if target and not re.match(r"^[a-z]+:", target):
            found.append((target, (page.parent / target).exists()))
    basenames = {Path(f).name for f in _tracked()}
    for m in CODE_SPAN.finditer(text):
        span = m.group(1).split(":", 1)[0] if ".py:" in m.group(1) else m.group(1)
        first = span.split("/", 1)[0]
        if "/" in span and first in PACKAGE and re.fullmatch(r"[\w./*-]+", span):
            found.append((span, _exists(span, REPO / "evokernel_mcp") or _exists(span)))
        elif "/" in span and first in ("gpu_arch", "reference_kernels") and re.fullmatch(r"[\w./*-]+", span):
            found.append((span, _exists(span, REPO / "resources")))
        elif BARE_FILE.match(span) and "..." not in span:
            if page == RESULTS_MD:
                found.append((span, _exists(span, REPO / "bench" / "results") or span in basenames))
            elif span.endswith((".py", ".sh")):
                found.append((span, span in basenames))
    return found


def test_readme_is_a_short_front_door():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= 220, f"README.md has {n} lines; move detail into docs/"


def test_the_docs_pages_exist_and_the_readme_links_them():
    names = {p.name for p in DOCS}
    assert {"architecture.md", "security.md", "configuration.md", "timing.md", "tools.md", "api.md"} <= names
    readme = README.read_text(encoding="utf-8")
    for name in names:
        assert f"docs/{name}" in readme, f"README.md does not link docs/{name}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_path_a_page_names_exists(page):
    named = _named_paths(page)
    assert named, f"{page.name}: found no paths at all (the extraction is broken)"
    missing = sorted({p for p, ok in named if not ok})
    assert not missing, f"{page.relative_to(REPO)} names paths that are not in the repository: {missing}"


def test_the_path_check_catches_a_missing_file(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("See `evokernel_mcp/runtime/worker.py`, `runtime/pool.py:runner_env_for` and [x](../nowhere.md).")
    named = dict(_named_paths(page))
    assert named["evokernel_mcp/runtime/worker.py"] is False and named["runtime/pool.py"] is True
    assert named["../nowhere.md"] is False


def _history_hits(text: str, hash_numbers: bool) -> list[str]:
    hits = [m.group(0) for rx in (ROUND, ISSUE) for m in rx.finditer(text)]
    if hash_numbers:
        hits += [m.group(0) for m in HASH_NUMBER.finditer(text)]
    return hits


def test_history_patterns_are_recognised():
    assert _history_hits("measured in session 7, see issue 13 and #12", True) == ["session 7", "issue 13", "#12"]
    assert _history_hits("sessions 12-13; Issue #4", False) == ["sessions 12", "Issue #4"]
    assert not _history_hits("an MCP session ends; the kernel issues 15 MMAs; `error #20`", False)


def test_no_history_numbers_in_readme_docs_code_or_tests():
    bad = {}
    for page in PAGES:
        hits = _history_hits(page.read_text(encoding="utf-8"), hash_numbers=True)
        if hits:
            bad[str(page.relative_to(REPO))] = hits
    for rel in _tracked():
        if not rel.endswith((".py", ".sh")) or rel.startswith(("tests/fixtures/", "bench/results/")):
            continue
        if not rel.startswith(("evokernel_mcp/", "bench/", "tools/", "tests/")) or rel == SELF:
            continue  # (this file spells the patterns out in its own examples)
        hits = _history_hits((REPO / rel).read_text(encoding="utf-8", errors="replace"), hash_numbers=False)
        if hits:
            bad[rel] = hits
    assert not bad, f"history belongs in CHANGELOG.md, not here: {bad}"


def test_test_names_say_what_they_check():
    named_after_history = re.compile(r"(review|issue|session)_?\d*(?=[_.]|$)", re.IGNORECASE)
    bad = [rel for rel in _tracked() if rel.startswith("tests/") and Path(rel).name.startswith("test_")
           and named_after_history.search(Path(rel).stem.removeprefix("test_"))]
    fn = re.compile(r"^\s*(?:async\s+)?def (test_\w*(?:review|issue|session\d)\w*)", re.MULTILINE)
    for rel in _tracked():
        if rel.startswith("tests/") and rel.endswith(".py") and not rel.startswith("tests/fixtures/"):
            bad += [f"{rel}::{m.group(1)}" for m in fn.finditer((REPO / rel).read_text(encoding="utf-8"))]
    assert not bad, f"tests named after review rounds or issues, not behaviour: {bad}"


def test_readme_tools_table_names_every_registered_tool_and_no_other():
    from evokernel_mcp.surface.registry import TOOLS

    text = README.read_text(encoding="utf-8")
    table = text.split("## Tools", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    named = {n for cell in rows for n in re.findall(r"`(\w+)`", cell)}
    assert named == set(TOOLS), f"README tools table vs surface/registry.py: {named ^ set(TOOLS)}"
    documented = {m.group(1) for m in re.finditer(r"^### (\w+)$", (REPO / "docs" / "tools.md").read_text(),
                                                   re.MULTILINE)}
    assert documented == set(TOOLS), f"docs/tools.md vs surface/registry.py: {documented ^ set(TOOLS)}"
