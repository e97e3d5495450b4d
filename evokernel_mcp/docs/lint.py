"""Checks of the docs content: broken links/anchors, pages unreachable from the map, numbers without a
source. Pure functions over a DocIndex; the tests (tests/docs/) run them on the real resources/."""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from evokernel_mcp.docs.index import _MD, DocIndex, Page
from evokernel_mcp.docs.read import cited_keys, source_definitions
from evokernel_mcp.docs.safety import DOC_ROOTS

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_NUMBER = re.compile(r"(?<![A-Za-z_\d.])\d+(?:[.,]\d+)*")
_LIST_MARK = re.compile(r"^\s*(?:\d+[.)]|[-*+])\s+")
_INLINE_CODE = re.compile(r"`[^`]*`")
_LINK_URL = re.compile(r"\]\([^)]*\)")
# "(unsourced)" may carry a qualifier: "(unsourced guidance)", "(unsourced: not re-read)".
_MARKERS = re.compile(r"\[S\d+[^\]]*\]|\[measured:[^\]]*\]|\(unsourced\b[^)]*\)", re.I)
_SOURCES_HEAD = re.compile(r"^(sources|references|citations)\b", re.I)


@dataclass(frozen=True)
class Problem:
    path: str
    line: int  # 1-based
    text: str
    why: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.why}: {self.text.strip()[:160]}"


def _target(page: Page, href: str) -> tuple[str, str]:
    """(doc path relative to resources, anchor) of a relative link; '' path = same page."""
    target, _, anchor = href.partition("#")
    if not target:
        return page.path, anchor
    return posixpath.normpath(posixpath.join(posixpath.dirname(page.path), target)), anchor


def broken_links(idx: DocIndex) -> list[Problem]:
    """Relative links whose file does not exist (inside the docs roots) or whose #anchor is unknown."""
    problems = []
    for page in idx.pages.values():
        for link in page.links:
            if _SCHEME.match(link.href):
                continue
            path, anchor = _target(page, link.href)
            root = path.split("/", 1)[0]
            file = idx.base / path
            if root not in DOC_ROOTS or not file.is_file():
                problems.append(Problem(page.path, link.line, link.href, f"link target {path} does not exist"))
                continue
            tp = idx.pages.get(path)
            if anchor and tp is not None and tp.kind == "markdown" and tp.section(anchor) is None:
                problems.append(Problem(page.path, link.line, link.href, f"no anchor #{anchor} in {path}"))
    return problems


def orphans(idx: DocIndex, start: str = "gpu_arch/index.md") -> list[str]:
    """Markdown pages not reachable from start by following relative links."""
    seen, todo = {start}, [start]
    while todo:
        page = idx.pages.get(todo.pop())
        for link in page.links if page else ():
            if not _SCHEME.match(link.href):
                path, _ = _target(page, link.href)
                if path in idx.pages and path not in seen:
                    seen.add(path)
                    todo.append(path)
    return sorted(p for p, pg in idx.pages.items() if pg.kind == "markdown" and p not in seen)


def _skipped_lines(page: Page) -> set[int]:
    """0-based lines that are headings, code, or in a Sources section."""
    skip = {s.start for s in page.sections}
    for s in page.sections:
        if _SOURCES_HEAD.match(s.title):
            skip.update(range(s.start, s.end))
    for tok in _MD.parse("\n".join(page.lines)):
        if tok.type in ("fence", "code_block", "html_block") and tok.map:
            skip.update(range(tok.map[0], tok.map[1]))
    return skip


def uncited_numbers(page: Page) -> list[Problem]:
    """Lines stating a number without [S<n>] (defined on the page), [measured: ...] or (unsourced)."""
    defs, skip, problems = source_definitions(page), _skipped_lines(page), []
    for i, line in enumerate(page.lines):
        if i in skip:
            continue
        bare = _MARKERS.sub(" ", _LINK_URL.sub("]", _INLINE_CODE.sub(" ", _LIST_MARK.sub("", line))))
        if not _NUMBER.search(bare):
            continue
        undefined = [k for k in cited_keys(line) if k not in defs]
        if undefined:
            problems.append(Problem(page.path, i + 1, line, f"cites {', '.join(undefined)} not listed in Sources"))
        elif not _MARKERS.search(line):
            problems.append(Problem(page.path, i + 1, line, "number without [S<n>], [measured: ...] or (unsourced)"))
    return problems
