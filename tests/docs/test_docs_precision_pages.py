"""The pages on fp32 GEMM on tensor cores (TF32, split precision) and on accumulation precision are found by
search_docs, and the section found says what it is about."""

from __future__ import annotations

import pytest

from evokernel_mcp.docs import read
from evokernel_mcp.paths import REPO_DIR


@pytest.fixture(autouse=True)
def _real_docs(monkeypatch):
    monkeypatch.setenv("EVOKERNEL_RESOURCES", str(REPO_DIR / "resources"))


@pytest.mark.parametrize("query, page, words", [
    ("tf32", "gpu_arch/split_precision_gemm.md", ("TF32",)),
    ("TF32x3 split precision GEMM", "gpu_arch/split_precision_gemm.md", ("a_big", "a_small")),
    ("accumulation precision", "gpu_arch/accumulation_precision.md", ("accumulat",)),
    ("Kahan summation", "gpu_arch/accumulation_precision.md", ("Kahan",)),
])
def test_search_finds_the_precision_pages_first(query, page, words):
    top = read.search_docs(query).results[0]
    assert top.path == page, f"{query!r}: top hit {top.path}#{top.anchor}"
    text = read.read_doc(top.path, top.anchor).text
    assert all(w in text for w in words), (query, top.anchor)


def test_the_error_table_names_plain_tf32_failing_the_fp32_bar():
    text = read.read_doc("gpu_arch/split_precision_gemm.md", "what-error-to-expect-and-what-verify-says").text
    assert "Plain TF32 fails an fp32 task" in text and "margin" in text and "error_vs_pytorch" in text
