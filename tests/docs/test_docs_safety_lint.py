"""Path safety of read_doc and the content checks (links, orphans, citations) on a tmp tree."""

from __future__ import annotations

import os

import pytest

from evokernel_mcp.docs import lint, read
from evokernel_mcp.docs.index import get_index
from evokernel_mcp.errors import BadInput, NotFound


@pytest.mark.parametrize("path", [
    "../etc/passwd", "gpu_arch/../../secret.md", "gpu_arch/../reference_kernels/../../x.md",
    "/etc/passwd", "gpu_arch/lds.md\0.txt", "", "C:\\docs\\x.md", "gpu_arch\\lds.md",
])
def test_bad_paths_are_refused(docs_tree, path):
    with pytest.raises(BadInput):
        read.read_doc(path)


def test_paths_outside_roots_or_missing_are_not_found(docs_tree):
    (docs_tree / "secret.md").write_text("# secret\n")
    with pytest.raises(NotFound, match="not under a docs root"):
        read.read_doc("secret.md")
    with pytest.raises(NotFound, match="list_docs"):
        read.read_doc("gpu_arch/missing.md")
    (docs_tree / "gpu_arch/data.bin").write_bytes(b"\0\1")
    with pytest.raises(NotFound, match="not a doc"):
        read.read_doc("gpu_arch/data.bin")


def test_symlinks_out_of_the_root_are_refused_and_not_indexed(docs_tree, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "leak.md").write_text("# Leak\n\nsecret zqxj\n")
    os.symlink(outside / "leak.md", docs_tree / "gpu_arch/leak.md")
    os.symlink(outside, docs_tree / "gpu_arch/linkdir")
    with pytest.raises(BadInput, match="symlink"):
        read.read_doc("gpu_arch/leak.md")
    with pytest.raises(BadInput, match="symlink"):
        read.read_doc("gpu_arch/linkdir/leak.md")
    assert not any("leak" in p for p in get_index().pages)
    assert read.search_docs("zqxj").results == []
    # a symlink that stays inside the root is fine
    os.symlink(docs_tree / "gpu_arch/lds.md", docs_tree / "gpu_arch/lds_alias.md")
    assert read.read_doc("gpu_arch/lds_alias.md").title == "LDS: local data share"


def test_clean_tree_has_no_link_problems(docs_tree):
    idx = get_index()
    assert lint.broken_links(idx) == []
    assert lint.orphans(idx) == []


def test_broken_links_and_orphans_are_found(docs_tree):
    p = docs_tree / "gpu_arch/sched.md"
    p.write_text(p.read_text() + "\nSee [x](lds.md#nope), [y](gone.md), [z](#s_waitcnt-counters), "
                 "[w](../../etc/passwd), [web](https://rocm.docs.amd.com).\n")
    (docs_tree / "gpu_arch/orphan.md").write_text("# Orphan\n")
    idx = get_index()
    problems = lint.broken_links(idx)
    assert sorted(x.text for x in problems) == ["../../etc/passwd", "gone.md", "lds.md#nope"]
    assert all(x.path == "gpu_arch/sched.md" for x in problems)
    assert lint.orphans(idx) == ["gpu_arch/orphan.md"]


def test_uncited_numbers_are_found(docs_tree):
    text = (docs_tree / "gpu_arch/lds.md").read_text()
    text = text.replace("## Sources", "Waves: 8 per SIMD (unsourced). Peak: 5.3 TB/s [measured: MI300X].\n"
                        "Bad: 42 widgets.\nUndefined: 7 things [S9].\n1. `s_waitcnt lgkmcnt(0)` on gfx950\n\n"
                        "## Sources")
    (docs_tree / "gpu_arch/lds.md").write_text(text)
    page = get_index().pages["gpu_arch/lds.md"]
    found = {(p.text.split(":")[0], p.why.split(" ")[0]) for p in lint.uncited_numbers(page)}
    # the granule line cites S1 once for two numbers: a line with a citation passes
    assert found == {("Bad", "number"), ("Undefined", "cites")}
