"""The docs engine on a tmp tree: index, anchors, read by anchor, large pages, search, cache."""

from __future__ import annotations

import os

import pytest

from evokernel_mcp.docs import read, search
from evokernel_mcp.docs.index import get_index, slugify
from evokernel_mcp.errors import BadInput, NotFound


def test_slugs_are_github_style():
    assert slugify("Bank conflicts: `ds_read_b128` & friends!") == "bank-conflicts-ds_read_b128--friends"
    assert slugify("LDS size (gfx950: 160 KB)") == "lds-size-gfx950-160-kb"
    assert slugify("s_waitcnt counters") == "s_waitcnt-counters"


def test_index_pages_sections_and_duplicate_anchors(docs_tree):
    idx = get_index()
    assert set(idx.pages) == {"gpu_arch/index.md", "gpu_arch/lds.md", "gpu_arch/sched.md",
                              "reference_kernels/index.md", "reference_kernels/vadd/README.md",
                              "reference_kernels/vadd/kernel.py"}
    lds = idx.pages["gpu_arch/lds.md"]
    assert lds.title == "LDS: local data share"
    assert lds.description == "Local data share per CU, banks and widths."
    anchors = [s.anchor for s in lds.sections]
    assert anchors == ["lds-local-data-share", "lds-size-per-arch", "allocation-granule",
                       "bank-conflicts-ds_read_b128--friends", "notes", "notes-1", "sources"]
    assert idx.pages["reference_kernels/vadd/kernel.py"].kind == "source"


def test_read_by_anchor_returns_exactly_that_section(docs_tree):
    d = read.read_doc("gpu_arch/lds.md", "lds-size-per-arch")
    assert d.text.splitlines()[0] == "## LDS size per arch"
    assert "160 KB" in d.text and "### Allocation granule" in d.text and "1280 bytes" in d.text
    assert "Bank conflicts" not in d.text and "# LDS: local" not in d.text
    assert [s.anchor for s in d.sections] == ["allocation-granule"]
    assert d.source == "resources/gpu_arch/lds.md"
    assert [(c.id, c.text) for c in d.citations] == [("S1", "ROCm GPU hardware specifications table")]
    sub = read.read_doc("gpu_arch/lds.md", "#allocation-granule")
    assert sub.text.splitlines() == ["### Allocation granule", "",
                                     "The granule is 512 bytes on gfx942 [S1] (and 1280 bytes on gfx950)."]
    second = read.read_doc("gpu_arch/lds.md", "notes-1")
    assert "Second notes." in second.text and "First notes." not in second.text


def test_read_whole_page_and_source(docs_tree):
    d = read.read_doc("gpu_arch/sched.md")
    assert d.anchor is None and not d.truncated and d.text.startswith("# Scheduling")
    assert d.text.rstrip().endswith("0x100 is DS read.")
    src = read.read_doc("reference_kernels/vadd/kernel.py")
    assert "return x + y" in src.text and src.sections == []
    with pytest.raises(BadInput, match="without anchor"):
        read.read_doc("reference_kernels/vadd/kernel.py", "x")


def test_unknown_anchor_lists_anchors(docs_tree):
    with pytest.raises(NotFound, match="lds-size-per-arch"):
        read.read_doc("gpu_arch/lds.md", "no-such-section")


def test_large_page_returns_top_and_section_list(docs_tree):
    body = "\n".join(f"## Part {i}\n\n" + ("word " * 600) for i in range(12))
    (docs_tree / "gpu_arch/big.md").write_text(f"# Big page\n\nIntro line.\n\n{body}\n")
    d = read.read_doc("gpu_arch/big.md")
    assert d.truncated and "Intro line." in d.text and "## Part 0" not in d.text
    assert len(d.sections) == 13 and d.tokens < read.MAX_PAGE_TOKENS
    assert "Part 3" in read.read_doc("gpu_arch/big.md", "part-3").text


def test_list_docs_tree_and_filter(docs_tree):
    docs = read.list_docs(detail="full").docs
    by_path = {d.path: d for d in docs}
    lds = by_path["gpu_arch/lds.md"]
    assert lds.uri == "evokernel://docs/gpu_arch/lds.md" and lds.kind == "markdown"
    size = next(s for s in lds.sections if s.anchor == "lds-size-per-arch")
    assert size.level == 2 and 0 < size.tokens < lds.tokens
    pages = {d.path: d for d in read.list_docs().docs}  # the default: every page, no sections
    assert set(pages) == set(by_path) and pages["gpu_arch/lds.md"].title == lds.title
    assert all(d.sections is None and d.uri is None for d in pages.values())
    brief = {d.path: d for d in read.list_docs(detail="brief").docs}["gpu_arch/lds.md"]
    assert brief.uri is None and brief.description is None and brief.tokens == lds.tokens
    assert [s.anchor for s in brief.sections] == [s.anchor for s in lds.sections if s.level == 2]
    assert read.list_docs(path="gpu_arch/lds.md").docs[0].sections == lds.sections
    only = read.list_docs("reference_kernels").docs
    assert only and all(d.path.startswith("reference_kernels/") for d in only)


def test_tokenizer_keeps_identifiers_and_parts():
    toks = search.tokenize("Use sched_group_barrier and s_waitcnt; gfx950 has 160 KB, ds_read_b128 reads 16 bytes.")
    for t in ("sched_group_barrier", "sched", "group", "barrier", "s_waitcnt", "waitcnt", "gfx950", "160kb",
              "ds_read_b128", "b128"):
        assert t in toks, t
    assert "160kb" in search.tokenize("160KiB") and "bank" in search.tokenize("banks")


def test_search_ranks_sections(docs_tree):
    res = read.search_docs("LDS size gfx950").results
    assert (res[0].path, res[0].anchor) == ("gpu_arch/lds.md", "lds-size-per-arch")
    assert "160 KB" in res[0].snippet
    res = read.search_docs("sched_group_barrier mask", top_k=2).results
    assert (res[0].path, res[0].anchor) == ("gpu_arch/sched.md", "sched_group_barrier-mask-bits")
    assert len(res) <= 2 and res[0].score >= res[-1].score
    res = read.search_docs("lgkmcnt").results
    assert res[0].anchor == "s_waitcnt-counters"
    with pytest.raises(BadInput):
        read.search_docs("the of and")


def test_index_is_cached_and_rebuilt_on_change(docs_tree):
    a = get_index()
    assert get_index() is a
    p = docs_tree / "gpu_arch/sched.md"
    p.write_text(p.read_text() + "\n## New section\n\nfresh text zyxwv\n")
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    b = get_index()
    assert b is not a and b.pages["gpu_arch/sched.md"].section("new-section") is not None
    assert read.search_docs("zyxwv").results[0].anchor == "new-section"
