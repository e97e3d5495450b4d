"""The docs tools: list_docs, search_docs, read_doc (plain functions; the MCP adapter registers them).

Large pages: read_doc(path) of a markdown page over MAX_PAGE_TOKENS returns only the page top (title
and intro) with truncated=true and the page's section list: read one section by anchor. Kernel source
files are returned whole up to MAX_SOURCE_CHARS (the MCP resource has the full file).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field

from evokernel_mcp.docs import search as bm25
from evokernel_mcp.docs.index import Page, Section, estimate_tokens, get_index
from evokernel_mcp.docs.models import Citation, DocInfo, DocList, DocSectionInfo, DocText, SearchResults
from evokernel_mcp.docs.safety import DOC_ROOTS, resolve_doc
from evokernel_mcp.errors import BadInput, NotFound

MAX_PAGE_TOKENS = 2500  # ~10k characters: a page and its section list stay under the 4k-token result budget
MAX_SOURCE_CHARS = 10_000
URI_PREFIX = "evokernel://docs/"
_CITE = re.compile(r"\[(S\d+(?:\s*[,;]\s*S\d+)*)\]")
_DEF = re.compile(r"^\s*(?:[-*+]\s+|\d+\.\s+)?\**\[?(S\d+)\]?\**\s*[:.)\-\u2014]?\s+(.+)$")
_SOURCES_HEAD = re.compile(r"^(sources|references|citations)\b", re.I)


def _section_info(page: Page, s: Section) -> DocSectionInfo:
    return DocSectionInfo(anchor=s.anchor, title=s.title, level=s.level,
                          tokens=estimate_tokens(page.span_text(s.start, s.end)))


Detail = Literal["pages", "brief", "full"]


def doc_info(page: Page, detail: Detail = "full") -> DocInfo:
    """pages: what picks a page (path, title, kind, size); brief: + its top-level section anchors and sizes;
    full: + description, uri, size in bytes, every heading with its title and level."""
    tokens = estimate_tokens(page.text)
    if detail == "pages":
        return DocInfo(path=page.path, title=page.title, kind=page.kind, tokens=tokens)
    if detail == "brief":
        secs = [DocSectionInfo(anchor=s.anchor, tokens=estimate_tokens(page.span_text(s.start, s.end)))
                for s in page.sections if s.level == 2]
        return DocInfo(path=page.path, title=page.title, kind=page.kind, tokens=tokens, sections=secs)
    return DocInfo(path=page.path, title=page.title, description=page.description, kind=page.kind,
                   uri=URI_PREFIX + page.path, size_bytes=page.size_bytes, tokens=tokens,
                   sections=[_section_info(page, s) for s in page.sections])


def source_definitions(page: Page) -> dict[str, str]:
    """Citation keys defined in the page's Sources/References section(s): {'S1': 'AMD CDNA4 ISA ...'}."""
    defs: dict[str, str] = {}
    for s in page.sections:
        if _SOURCES_HEAD.match(s.title):
            for line in page.lines[s.start + 1:s.end]:
                m = _DEF.match(line)
                if m:
                    defs.setdefault(m.group(1), m.group(2).strip())
    return defs


def cited_keys(text: str) -> list[str]:
    keys: list[str] = []
    for m in _CITE.finditer(text):
        keys += [k for k in re.split(r"\s*[,;]\s*", m.group(1)) if k not in keys]
    return keys


def _citations(page: Page, text: str) -> list[Citation]:
    defs = source_definitions(page)
    return [Citation(id=k, text=defs.get(k, "(not defined on this page)")) for k in cited_keys(text)]


def list_docs(
    root: Annotated[Literal["gpu_arch", "reference_kernels"] | None,
                    Field(description="Only this docs root; default: both.")] = None,
    detail: Annotated[Detail, Field(description="pages: path, title, kind, tokens of every page; brief: also "
                      "each page's section anchors (level 2) and sizes; full: descriptions, every heading with "
                      "its title and level.")] = "pages",
    path: Annotated[str | None, Field(description="Only this page, with every section (detail='full').")] = None,
) -> DocList:
    """List every hardware doc page and reference kernel: path, title, kind and size in tokens. Start at
    gpu_arch/index.md (the map) or use search_docs for one fact; list_docs(path=...) gives one page's
    section anchors for read_doc.

    detail='brief' adds each page's section anchors (use root=... to keep it short), detail='full' every
    heading with its title and level."""
    idx = get_index()
    if path is not None:
        return DocList(docs=[doc_info(_page(path), "full")], detail="full")
    pages = [p for p in idx.pages.values() if root is None or p.path.startswith(root + "/")]
    return DocList(docs=[doc_info(p, detail) for p in pages], detail=detail)


def search_docs(
    query: Annotated[str, Field(min_length=1, max_length=500, description="Keywords, e.g. 'LDS size gfx950' "
                                "or 's_waitcnt lgkmcnt'.")],
    top_k: Annotated[int, Field(ge=1, le=20, description="Number of sections to return.")] = 5,
) -> SearchResults:
    """Find the doc sections that answer a question (BM25 over sections), best first, each with a
    snippet; then read_doc(path, anchor) the best one. Cheaper than reading whole pages."""
    if not bm25.words(query):
        raise BadInput(f"query {query!r} has no searchable words: use keywords such as 'LDS banks gfx942'.")
    return SearchResults(query=query, results=bm25.search(get_index(), query, top_k))


def _page(path: str) -> Page:
    idx = get_index()
    rel, _ = resolve_doc(path, idx.base)
    page = idx.pages.get(rel)
    if page is None:
        raise NotFound(f"{rel!r} exists but is not a doc (only .md pages and kernel sources are served); "
                       "call list_docs for the available paths.")
    return page


def _read_section(page: Page, anchor: str) -> DocText:
    s = page.section(anchor)
    if s is None:
        known = ", ".join(x.anchor for x in page.sections[:40])
        raise NotFound(f"{page.path} has no section {anchor!r}; its anchors: {known or '(none)'}.")
    text = page.span_text(s.start, s.end)
    subs = [_section_info(page, x) for x in page.sections if s.start < x.start < s.end]
    return DocText(path=page.path, anchor=anchor, title=s.title, text=text, source=f"resources/{page.path}",
                   citations=_citations(page, text), tokens=estimate_tokens(text), sections=subs)


def _read_page(page: Page) -> DocText:
    text, truncated, sections = page.text, False, [_section_info(page, s) for s in page.sections]
    if page.kind == "source" and len(text) > MAX_SOURCE_CHARS:
        text = text[:MAX_SOURCE_CHARS] + f"\n... [truncated; full file: resource {URI_PREFIX}{page.path}]"
        truncated = True
    elif page.kind == "markdown" and estimate_tokens(text) > MAX_PAGE_TOKENS:
        text = (page.span_text(0, page.top_end) + f"\n\n[This page is ~{estimate_tokens(page.text)} tokens, too "
                "large to return whole. Read one section: read_doc(path, anchor) with an anchor from sections.]")
        truncated = True
    return DocText(path=page.path, anchor=None, title=page.title, text=text, source=f"resources/{page.path}",
                   citations=_citations(page, text) if page.kind == "markdown" else [],
                   tokens=estimate_tokens(text), truncated=truncated, sections=sections)


def read_doc(
    path: Annotated[str, Field(description="Doc path from list_docs or search_docs, e.g. 'gpu_arch/lds.md'.")],
    anchor: Annotated[str | None, Field(description="Section anchor (from list_docs/search_docs) to read only "
                                        "that section, subsections included; default: the whole page.")] = None,
) -> DocText:
    """Read one doc page, or exactly one section of it by anchor, with its source file and the documents
    it cites. Pages over ~6000 tokens return their top part and section list: then read by anchor."""
    page = _page(path)
    if anchor is not None and anchor.lstrip("#"):
        if page.kind != "markdown":
            raise BadInput(f"{page.path} is a source file without sections: call read_doc without anchor.")
        return _read_section(page, anchor.lstrip("#"))
    return _read_page(page)


def page_uris() -> list[tuple[str, DocInfo]]:
    """(uri, info) of every page, for the MCP resource list."""
    return [(URI_PREFIX + p.path, doc_info(p)) for p in get_index().pages.values()]


__all__ = ["DOC_ROOTS", "list_docs", "search_docs", "read_doc", "page_uris", "source_definitions", "cited_keys"]
