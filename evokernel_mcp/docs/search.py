"""BM25 over doc sections (no network model), with heading words boosted and a query-term snippet.

Tokens: lowercase runs of letters/digits joined by '_' or '.', kept whole (gfx950, s_waitcnt,
sched_group_barrier, ds_read_b128) and also split on '_'/'.' for partial matches; '160 KB' and
'160KiB' also yield '160kb'; simple plural folding (banks -> bank) for words longer than 4 letters.
A section's document is its own text (heading to the next heading) + its heading x TITLE_BOOST +
the page title once. Kernel source files are not searched (their README.md pages are).
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass

from evokernel_mcp.docs.index import DocIndex, Page, estimate_tokens
from evokernel_mcp.docs.models import SearchHit

K1, B = 1.2, 0.75
TITLE_BOOST = 3
HEADING_BONUS = 0.5  # score x (1 + HEADING_BONUS * share of the query words found in the section heading)
PART_WEIGHT = 0.3  # weight of a query token's '_' parts next to the whole token
SNIPPET_CHARS = 300
MAP_WEIGHT = 0.5      # score factor of map pages (index.md): they point to the answer, content pages hold it
SOURCES_WEIGHT = 0.3  # score factor of 'Sources'/'References' sections (lists of documents)
_LINK_URL = re.compile(r"\]\([^)\s]*\)")
_SOURCES_HEAD = re.compile(r"^(sources|references|citations)\b", re.I)

_WORD = re.compile(r"[a-z0-9]+(?:[_.][a-z0-9]+)*")
_NUM_UNIT = re.compile(r"^(\d+(?:\.\d+)?)(kib|kb|mib|mb|gib|gb|tb|b|bytes|ns|us|ms|cycles|ghz|mhz)$")
_UNITS = {"kib": "kb", "mib": "mb", "gib": "gb", "bytes": "b"}
_UNIT_WORDS = {"kib", "kb", "mib", "mb", "gib", "gb", "tb", "b", "bytes", "ns", "us", "ms", "cycles", "ghz", "mhz"}
STOPWORDS = frozenset(
    "a an and are as at be by can do does for from how i in is it its of on or per than that the this "
    "to vs was what when where which with why".split())


def _fold(tok: str) -> str:
    if len(tok) > 4 and tok.isalpha() and tok.endswith("s") and not tok.endswith("ss"):
        return tok[:-1]
    return tok


def _expand(tok: str) -> list[str]:
    """Whole token, its number+unit form, and its '_'/'.' parts."""
    m = _NUM_UNIT.match(tok)
    if m:
        return [m.group(1) + _UNITS.get(m.group(2), m.group(2)), m.group(1), _UNITS.get(m.group(2), m.group(2))]
    out = [_fold(tok)]
    if "_" in tok or "." in tok:
        out += [_fold(p) for p in re.split(r"[_.]", tok) if p and p not in STOPWORDS]
    return out


def words(text: str) -> list[str]:
    """Base tokens in order (lowercased, stopwords dropped), before expansion."""
    return [w for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


def tokenize(text: str) -> list[str]:
    """Document tokens: every base token expanded, plus 'NUMunit' for '160 KB'."""
    ws = words(text)
    out: list[str] = []
    for i, w in enumerate(ws):
        out += _expand(w)
        if w.replace(".", "", 1).isdigit() and i + 1 < len(ws) and ws[i + 1] in _UNIT_WORDS:
            out.append(w + _UNITS.get(ws[i + 1], ws[i + 1]))
    return out


def query_terms(query: str) -> list[tuple[str, dict[str, float]]]:
    """One entry per query word: (word, {term: weight}); the whole token weighs 1, its parts less."""
    ws = words(query)
    groups = []
    for i, w in enumerate(ws):
        exp = _expand(w)
        terms = {exp[0]: 1.0}
        for p in exp[1:]:
            terms.setdefault(p, PART_WEIGHT)
        if w.isdigit() and i + 1 < len(ws) and ws[i + 1] in _UNIT_WORDS:
            terms[w + _UNITS.get(ws[i + 1], ws[i + 1])] = 1.0
        groups.append((w, terms))
    return groups


@dataclass(frozen=True)
class Unit:
    path: str
    anchor: str | None
    title: str
    start: int    # first line of the unit's own text (the heading line)
    own_end: int
    read_tokens: int
    weight: float = 1.0


class Bm25:
    def __init__(self, idx: DocIndex):
        self.units: list[Unit] = []
        self.tfs: list[Counter] = []
        self.lens: list[int] = []
        self.heads: list[set[str]] = []
        self.postings: dict[str, list[int]] = defaultdict(list)
        for page in idx.pages.values():
            if page.kind == "markdown":
                self._add_page(page)
        self.avgdl = (sum(self.lens) / len(self.lens)) if self.lens else 1.0
        n = len(self.units)
        self.idf = {t: math.log(1 + (n - len(p) + 0.5) / (len(p) + 0.5)) for t, p in self.postings.items()}

    def _add_unit(self, unit: Unit, page: Page, heading: str) -> None:
        toks = tokenize(_LINK_URL.sub("]", page.span_text(unit.start, unit.own_end)))
        toks += tokenize(heading) * (TITLE_BOOST - 1) + tokenize(page.title)
        tf = Counter(toks)
        for t in tf:
            self.postings[t].append(len(self.units))
        self.units.append(unit)
        self.heads.append(set(tokenize(heading)))
        self.tfs.append(tf)
        self.lens.append(len(toks))

    def _add_page(self, page: Page) -> None:
        first = page.sections[0].start if page.sections else len(page.lines)
        if page.span_text(0, first).strip():
            self._add_unit(Unit(page.path, None, page.title, 0, first,
                                estimate_tokens(page.text)), page, page.title)
        base = MAP_WEIGHT if page.path.endswith("/index.md") else 1.0
        for s in page.sections:
            read = estimate_tokens(page.span_text(s.start, s.end))
            w = base * (SOURCES_WEIGHT if _SOURCES_HEAD.match(s.title) else 1.0)
            self._add_unit(Unit(page.path, s.anchor, s.title, s.start, s.own_end, read, w), page, s.title)

    def score(self, query: str) -> list[tuple[float, int]]:
        groups = query_terms(query)
        if not groups:
            return []
        acc: dict[int, float] = defaultdict(float)
        cover: dict[int, float] = defaultdict(float)
        for _, terms in groups:
            best: dict[int, float] = defaultdict(float)
            for term, weight in terms.items():
                for u in self.postings.get(term, ()):
                    tf = self.tfs[u][term]
                    norm = tf * (K1 + 1) / (tf + K1 * (1 - B + B * self.lens[u] / self.avgdl))
                    acc[u] += weight * self.idf[term] * norm
                    best[u] = max(best[u], weight)
            for u, w in best.items():
                cover[u] += w
        ranked = []
        for u, s in acc.items():
            in_head = sum(1 for _, terms in groups if self.heads[u] & terms.keys()) / len(groups)
            factor = self.units[u].weight * (1 + cover[u] / len(groups)) / 2 * (1 + HEADING_BONUS * in_head)
            ranked.append((s * factor, u))
        return sorted(ranked, key=lambda x: (-x[0], x[1]))


def _snippet(page: Page, unit: Unit, terms: dict[str, float]) -> str:
    """The line of the unit (after its heading) matching most query terms, and the next if short."""
    lo = unit.start + 1 if unit.anchor else unit.start
    best, best_i = -1.0, None
    in_code = False
    for i in range(lo, unit.own_end):
        line = page.lines[i]
        if line.lstrip().startswith(("```", "~~~")):
            in_code = not in_code
        val = sum(terms.get(t, 0.0) for t in set(tokenize(line))) - (0.1 if in_code else 0.0)
        if val > best and line.strip() and not set(line.strip()) <= set("|-: `~"):
            best, best_i = val, i
    if best_i is None:
        return ""
    text = " ".join(page.lines[best_i].split())
    if len(text) < SNIPPET_CHARS // 2 and best_i + 1 < unit.own_end:
        text += " " + " ".join(page.lines[best_i + 1].split())
    return text if len(text) <= SNIPPET_CHARS else text[:SNIPPET_CHARS].rsplit(" ", 1)[0] + " ..."


def search(idx: DocIndex, query: str, top_k: int) -> list[SearchHit]:
    bm = idx.cache.get("bm25")
    if bm is None:
        bm = idx.cache["bm25"] = Bm25(idx)
    terms = {t: w * bm.idf.get(t, 0.0) for _, g in query_terms(query) for t, w in g.items()}
    hits = []
    for score, u in bm.score(query)[:top_k]:
        unit = bm.units[u]
        page = idx.pages[unit.path]
        hits.append(SearchHit(path=unit.path, anchor=unit.anchor, title=unit.title, page_title=page.title,
                              snippet=_snippet(page, unit, terms), score=round(score, 4),
                              tokens=unit.read_tokens))
    return hits
