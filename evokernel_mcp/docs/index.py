"""Section index of the docs: every page split by heading (markdown-it-py), cached, rebuilt on change.

Pages: every *.md under the docs roots, plus text sources inside reference_kernels/<kernel>/ folders
(readable whole, no sections). Anchors are GitHub-style slugs (lowercase; punctuation other than '-'
and '_' dropped; spaces -> '-'; repeats get -1, -2 ...). A section spans its heading up to the next
heading of the same or higher level (`end`); its own text stops at the next heading of any level.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from markdown_it import MarkdownIt
from markdown_it.token import Token

from evokernel_mcp.docs.safety import DOC_ROOTS, base_dir, inside

log = logging.getLogger(__name__)

SOURCE_EXTS = {".py", ".hip", ".cpp", ".cc", ".c", ".h", ".hpp", ".cu", ".cuh", ".s", ".ll", ".txt",
               ".json", ".yaml", ".yml", ".toml", ".csv", ".sh", ".cfg"}
MAX_SOURCE_BYTES = 512 * 1024
_MD = MarkdownIt("commonmark").enable("table")
_MD_BLOCKS = MarkdownIt("commonmark").enable("table").disable("inline")  # 2x faster: inline parsed on demand
_SLUG_DROP = re.compile(r"[^\w\- ]", re.UNICODE)


def estimate_tokens(text: str) -> int:
    return (len(text) + 3) // 4


def slugify(title: str) -> str:
    """GitHub-style anchor of a heading text (without the duplicate suffix)."""
    return _SLUG_DROP.sub("", title.strip().lower()).replace(" ", "-")


@dataclass(frozen=True)
class Section:
    anchor: str
    title: str
    level: int
    start: int    # 0-based line of the heading
    own_end: int  # exclusive: next heading of any level
    end: int      # exclusive: next heading of the same or higher level


@dataclass(frozen=True)
class Link:
    line: int  # 1-based
    href: str


@dataclass
class Page:
    path: str           # relative to the resources dir, e.g. gpu_arch/lds.md
    file: Path
    kind: str           # "markdown" | "source"
    title: str
    description: str
    lines: list[str]
    size_bytes: int
    sections: list[Section] = field(default_factory=list)
    _links: list[Link] | None = None

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    @property
    def links(self) -> list[Link]:
        """Links of a markdown page (full inline parse, done on first use: only the checks need them)."""
        if self._links is None:
            self._links = _links(_MD.parse(self.text)) if self.kind == "markdown" else []
        return self._links

    def section(self, anchor: str) -> Section | None:
        return next((s for s in self.sections if s.anchor == anchor), None)

    def span_text(self, start: int, end: int) -> str:
        return "\n".join(self.lines[start:end]).strip("\n")

    @property
    def top_end(self) -> int:
        """End of the page top (title and intro): the first heading after a leading H1, else the first."""
        heads = self.sections[1:] if self.sections and self.sections[0].level == 1 else self.sections
        return heads[0].start if heads else len(self.lines)


@dataclass
class DocIndex:
    base: Path
    pages: dict[str, Page]
    signature: tuple
    build_s: float
    cache: dict = field(default_factory=dict)  # derived structures (search index), keyed by name


def _inline_text(tok: Token) -> str:
    out = []
    children = tok.children or _MD.parseInline(tok.content)[0].children
    for c in children or []:
        if c.type in ("text", "code_inline"):
            out.append(c.content)
        elif c.type in ("softbreak", "hardbreak"):
            out.append(" ")
        elif c.type == "image":
            out.append(_inline_text(c))
    return "".join(out).strip()


def _links(tokens: list[Token]) -> list[Link]:
    links, line = [], 0
    for tok in tokens:
        if tok.map:
            line = tok.map[0]
        for c in tok.children or []:
            if c.type == "link_open" and c.attrs.get("href"):
                links.append(Link(line=line + 1, href=str(c.attrs["href"])))
    return links


def _sections(tokens: list[Token], n_lines: int) -> list[Section]:
    heads, seen = [], {}
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open" and tok.map:
            title = _inline_text(tokens[i + 1])
            slug = slugify(title)
            k = seen.get(slug, 0)
            seen[slug] = k + 1
            heads.append((int(tok.tag[1]), title, slug if k == 0 else f"{slug}-{k}", tok.map[0]))
    sections = []
    for j, (level, title, anchor, start) in enumerate(heads):
        own_end = heads[j + 1][3] if j + 1 < len(heads) else n_lines
        end = next((h[3] for h in heads[j + 1:] if h[0] <= level), n_lines)
        sections.append(Section(anchor, title, level, start, own_end, end))
    return sections


def _shorten(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " ..."


def parse_markdown(path: str, file: Path, text: str) -> Page:
    tokens = _MD_BLOCKS.parse(text)
    lines = text.splitlines()
    sections = _sections(tokens, len(lines))
    h1 = next((s.title for s in sections if s.level == 1), None)
    title = h1 or (sections[0].title if sections else Path(path).stem)
    desc = next((_inline_text(tokens[i + 1]) for i, t in enumerate(tokens)
                 if t.type == "paragraph_open" and t.level == 0), "")
    return Page(path=path, file=file, kind="markdown", title=title, description=_shorten(desc),
                lines=lines, size_bytes=len(text.encode()), sections=sections)


def _source_page(path: str, file: Path, text: str) -> Page:
    folder = Path(path).parent.name
    return Page(path=path, file=file, kind="source", title=f"{Path(path).name} ({folder})",
                description=f"Source file of the reference kernel '{folder}'; see its README.md.",
                lines=text.splitlines(), size_bytes=len(text.encode()))


def _scan(base: Path) -> list[tuple[str, Path, os.stat_result]]:
    """Every indexable file under the docs roots, with its stat; symlinks out of a root are skipped."""
    found = []
    for root_name in DOC_ROOTS:
        root = base / root_name
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__")))
            for name in sorted(filenames):
                f = Path(dirpath) / name
                rel = f.relative_to(base).as_posix()
                is_src = (root_name == "reference_kernels" and Path(dirpath) != root
                          and f.suffix.lower() in SOURCE_EXTS)
                if name.startswith(".") or not (f.suffix.lower() == ".md" or is_src):
                    continue
                if not inside(f, root):
                    log.warning("docs: skipping %s: symlink out of %s/", rel, root_name)
                    continue
                found.append((rel, f, f.stat()))
    return found


def _build(base: Path, files: list[tuple[str, Path, os.stat_result]], signature: tuple) -> DocIndex:
    t0 = time.perf_counter()
    pages = {}
    for rel, f, st in files:
        if not rel.endswith(".md") and st.st_size > MAX_SOURCE_BYTES:
            continue
        try:
            text = f.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError) as e:
            log.warning("docs: skipping %s: %s", rel, e)
            continue
        pages[rel] = parse_markdown(rel, f, text) if rel.endswith(".md") else _source_page(rel, f, text)
    return DocIndex(base=base, pages=pages, signature=signature, build_s=time.perf_counter() - t0)


_CACHE: dict[str, DocIndex] = {}
_LOCK = threading.Lock()


def get_index(base: Path | None = None) -> DocIndex:
    """The index of the docs under base (default: the resources dir); rebuilt when a file changed."""
    b = base_dir(base)
    files = _scan(b)
    sig = tuple((rel, st.st_mtime_ns, st.st_size) for rel, _, st in files)
    with _LOCK:
        idx = _CACHE.get(str(b))
        if idx is None or idx.signature != sig:
            idx = _build(b, files, sig)
            _CACHE[str(b)] = idx
            log.info("docs: indexed %d pages under %s in %.1f ms", len(idx.pages), b, idx.build_s * 1e3)
        return idx
