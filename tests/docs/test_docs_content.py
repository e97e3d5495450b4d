"""The real docs under resources/ (written separately): links, reachability, citations, search ranking.

A failure here names the file and line of the content that breaks the rule.
"""

from __future__ import annotations

import pytest

from evokernel_mcp import paths
from evokernel_mcp.docs import lint, read
from evokernel_mcp.docs.index import DocIndex, get_index
from evokernel_mcp.paths import REPO_DIR

RESOURCES = REPO_DIR / "resources"


@pytest.fixture
def real(monkeypatch) -> DocIndex:
    monkeypatch.setattr(paths, "RESOURCES_DIR", RESOURCES)
    idx = get_index()
    if "gpu_arch/index.md" not in idx.pages:
        pytest.fail("resources/gpu_arch/index.md is missing")
    return idx


def _fmt(problems) -> str:
    return "\n".join(str(p) for p in problems)


def test_no_broken_links_or_anchors(real):
    problems = lint.broken_links(real)
    assert not problems, f"{len(problems)} broken links:\n{_fmt(problems)}"


def test_every_page_reachable_from_the_map(real):
    assert "reference_kernels/index.md" in real.pages, "resources/reference_kernels/index.md is missing"
    missing = lint.orphans(real, "gpu_arch/index.md")
    assert not missing, f"pages not reachable by links from gpu_arch/index.md: {missing}"


def test_every_number_in_quick_reference_has_a_source(real):
    page = real.pages["gpu_arch/quick_reference.md"]
    assert lint.source_definitions(page), "quick_reference.md lists no sources (- S1: ...) in a Sources section"
    problems = lint.uncited_numbers(page)
    assert not problems, f"{len(problems)} lines without a source:\n{_fmt(problems)}"


def test_search_lds_size_gfx950_finds_160_kb_first(real):
    top = read.search_docs("LDS size gfx950").results[0]
    text = read.read_doc(top.path, top.anchor).text
    assert "160 KB" in text or "160 KiB" in text, f"top hit {top.path}#{top.anchor} does not say 160 KB"
    assert top.path != "gpu_arch/index.md", "the map ranked above the pages it points to"


def test_search_sched_group_barrier_mask_finds_scheduling_page(real):
    top = read.search_docs("sched_group_barrier mask").results[0]
    assert top.path == "gpu_arch/scheduling.md", f"top hit is {top.path}#{top.anchor}"
    assert "mask" in read.read_doc(top.path, top.anchor).text.lower()


def test_each_section_reads_back_exactly(real):
    for page in real.pages.values():
        for i, s in enumerate(page.sections):
            d = read.read_doc(page.path, s.anchor)
            first = d.text.splitlines()[0]
            assert first.lstrip("#").strip().startswith(s.title.split("`")[0].strip()[:10]), (page.path, s.anchor)
            later = [x for x in page.sections[i + 1:] if x.level <= s.level]
            if later:
                assert page.lines[later[0].start] not in d.text.splitlines(), (page.path, s.anchor)
