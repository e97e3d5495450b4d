"""Every number on every docs page cites its source in place: [S<n>] defined in the page's Sources
section, [measured: ...], a derivation that cites its inputs, or (unsourced). Runs the lint on the real
resources/ pages, found on disk so that a new page cannot slip past, plus the forms the lint accepts.
"""

from __future__ import annotations

import pytest

from evokernel_mcp import paths
from evokernel_mcp.docs import lint
from evokernel_mcp.docs.index import get_index
from evokernel_mcp.paths import REPO_DIR

RESOURCES = REPO_DIR / "resources"
PAGES = sorted(p.relative_to(RESOURCES).as_posix()
               for root in ("gpu_arch", "reference_kernels") for p in (RESOURCES / root).rglob("*.md"))


def test_the_docs_pages_are_found():
    assert "gpu_arch/index.md" in PAGES and "gpu_arch/lds.md" in PAGES, PAGES


@pytest.mark.parametrize("path", PAGES)
def test_every_number_on_the_page_has_a_source(path, monkeypatch):
    monkeypatch.setattr(paths, "RESOURCES_DIR", RESOURCES)
    page = get_index().pages.get(path)
    assert page is not None and page.kind == "markdown", f"{path} is not indexed as a markdown page"
    problems = lint.uncited_numbers(page)
    assert not problems, f"{len(problems)} uncited numbers:\n" + "\n".join(str(p) for p in problems)


def test_citation_forms_accepted_and_refused(docs_tree):
    text = (docs_tree / "gpu_arch/lds.md").read_text()
    lines = ("Derived: 512/160 = 3 waves (derived: floor(512 / 160) = 3 [S1]).\n"
             "Guide: 2-4 waves may be best (unsourced guidance).\n"
             "Policy: waves go to 4 SIMDs (unsourced: placement policy).\n"
             "Bare: 4 workgroups fit (derived).\n"
             "Word: 16 banks, unsourced here.\n\n")
    (docs_tree / "gpu_arch/lds.md").write_text(text.replace("## Sources", lines + "## Sources"))
    page = get_index().pages["gpu_arch/lds.md"]
    flagged = {p.text.split(":")[0] for p in lint.uncited_numbers(page)}
    assert flagged == {"Bare", "Word"}
