"""Result models of list_docs / search_docs / read_doc."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from evokernel_mcp.models import Model, Provenance

_INDEX = Provenance(field="docs", source="resources/gpu_arch, resources/reference_kernels",
                    detail="section index built from the markdown files (evokernel_mcp/docs/index.py)")


class DocSectionInfo(Model):
    anchor: str = Field(description="GitHub-style slug; pass to read_doc(path, anchor).")
    title: str | None = Field(default=None, description="The heading (list_docs brief: omitted, the anchor is "
                              "its slug).")
    level: int | None = Field(default=None, description="Heading level: 1 = page title, 2 = section, 3 = "
                              "subsection ...")
    tokens: int = Field(description="Estimated tokens (chars/4) of read_doc(path, anchor): this heading "
                        "up to the next heading of the same or higher level, subsections included.")


class DocInfo(Model):
    path: str = Field(description="Doc path for read_doc, e.g. 'gpu_arch/lds.md'.")
    title: str
    description: str | None = Field(default=None, description="First paragraph of the page, shortened "
                                    "(detail='full').")
    kind: Literal["markdown", "source"] = Field(description="'source': a kernel source file, read whole.")
    uri: str | None = Field(default=None, description="MCP resource URI of the page (detail='full'); always "
                            "evokernel://docs/<path>.")
    size_bytes: int | None = Field(default=None, description="File size (detail='full').")
    tokens: int = Field(description="Estimated tokens of the whole page (chars/4).")
    sections: list[DocSectionInfo] | None = Field(default=None, description="The page's sections (list_docs "
                                                  "detail='brief': level-2 anchors; 'full' or path=...: every "
                                                  "heading); null at detail='pages'.")


class DocList(Model):
    docs: list[DocInfo] = Field(description="Every page under the roots asked for, in index order.")
    detail: Literal["pages", "brief", "full"] = Field(default="full", description="What each entry holds "
                                                      "(the list_docs argument).")
    provenance: list[Provenance] = Field(default_factory=lambda: [_INDEX])


class SearchHit(Model):
    path: str
    anchor: str | None = Field(description="Section anchor; pass with path to read_doc. Null: the page top.")
    title: str = Field(description="Section heading (page title for the page top).")
    page_title: str
    snippet: str = Field(description="The lines of the section that best match the query, shortened.")
    score: float = Field(description="BM25 score (higher is better; comparable within one query only).")
    tokens: int = Field(description="Estimated tokens of read_doc(path, anchor).")


class SearchResults(Model):
    query: str
    results: list[SearchHit] = Field(description="Best first.")
    provenance: list[Provenance] = Field(default_factory=lambda: [_INDEX, Provenance(
        field="results.score", source="BM25 over doc sections", detail="evokernel_mcp/docs/search.py")])


class Citation(Model):
    id: str = Field(description="Citation key as used in the text, e.g. 'S1'.")
    text: str = Field(description="The source as listed at the end of the page.")


class DocText(Model):
    path: str
    anchor: str | None
    title: str
    text: str
    source: str = Field(description="File the text came from (resources/...); the documents it cites are "
                        "in citations.")
    citations: list[Citation] = Field(default_factory=list, description="Sources cited ([S<n>]) in this text.")
    tokens: int = Field(description="Estimated tokens of text.")
    truncated: bool = Field(default=False, description="True when the page was too large to return whole: "
                            "text is the page's top part; read one of sections by anchor.")
    sections: list[DocSectionInfo] = Field(default_factory=list, description="Sections inside the returned "
                                           "text (or, when truncated, all sections of the page).")
    provenance: list[Provenance] = Field(default_factory=list, description="The file, and each source it cites.")

    @model_validator(mode="after")
    def _cite(self) -> "DocText":
        if not self.provenance:
            self.provenance = [Provenance(field="text", source=self.source, detail=self.anchor)] + [
                Provenance(field="text", source=f"[{c.id}]", detail=c.text) for c in self.citations]
        return self
