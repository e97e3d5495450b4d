"""Artifact store: full outputs (assembly, raw profiler files, full tables) kept on disk and paged
by id, so one tool call never floods the agent's context.

Layout: <state>/artifacts/<artifact_id>/<name>  plus  meta.json {kind, files[], created, detail}.
An artifact id is 16 hex chars; names are plain file names (no directories, no '..').
"""

from __future__ import annotations

import json
import re
import secrets
import time
from pathlib import Path
from typing import Annotated

from pydantic import Field

from evokernel_mcp.errors import BadInput, NotFound
from evokernel_mcp.models import Model, Provenance
from evokernel_mcp.paths import sub_state_dir

_ID_RE = re.compile(r"^[0-9a-f]{16}$")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class ArtifactFile(Model):
    name: str
    bytes: int
    lines: int | None = None


class ArtifactInfo(Model):
    artifact_id: str
    kind: str
    files: list[ArtifactFile]
    detail: str | None = None
    uri: str


class ArtifactPage(Model):
    artifact_id: str
    name: str = Field(description="File inside the artifact that was read.")
    text: str
    offset: int = Field(description="First line returned (0-based).")
    next_offset: int | None = Field(description="Pass as offset to read on; null at the end.")
    total: int = Field(description="Total lines in the file.")
    files: list[str] = Field(default_factory=list, description="All files in this artifact.")
    provenance: list[Provenance] = Field(default_factory=list)


def _root() -> Path:
    return sub_state_dir("artifacts")


def _check_id(artifact_id: str) -> Path:
    if not _ID_RE.match(artifact_id or ""):
        raise BadInput(f"artifact_id {artifact_id!r} is malformed: expected 16 hex characters as returned by a tool.")
    d = _root() / artifact_id
    if not d.is_dir():
        raise NotFound(f"no artifact {artifact_id!r}: it may have been produced by another server instance.")
    return d


def put(kind: str, files: dict[str, str | bytes], detail: str | None = None, artifact_id: str | None = None) -> str:
    """Store files under a new (or given, content-derived) id and return the id."""
    aid = artifact_id or secrets.token_hex(8)
    if not _ID_RE.match(aid):
        raise ValueError(f"bad artifact id {aid!r}")
    d = _root() / aid
    d.mkdir(parents=True, exist_ok=True)
    names = []
    for name, data in files.items():
        if not _NAME_RE.match(name) or name == "meta.json":
            raise ValueError(f"bad artifact file name {name!r}")
        p = d / name
        if isinstance(data, bytes):
            p.write_bytes(data)
        else:
            p.write_text(data, encoding="utf-8")
        names.append(name)
    meta = {"kind": kind, "files": names, "created": time.time(), "detail": detail}
    (d / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    return aid


def info(artifact_id: str) -> ArtifactInfo:
    d = _check_id(artifact_id)
    meta = json.loads((d / "meta.json").read_text())
    files = []
    for n in meta["files"]:
        p = d / n
        data = p.read_bytes()
        lines = None
        try:
            lines = len(data.decode("utf-8").splitlines())
        except UnicodeDecodeError:
            pass
        files.append(ArtifactFile(name=n, bytes=len(data), lines=lines))
    return ArtifactInfo(artifact_id=artifact_id, kind=meta["kind"], files=files, detail=meta.get("detail"),
                        uri=f"evokernel://artifacts/{artifact_id}")


def path_of(artifact_id: str, name: str) -> Path:
    d = _check_id(artifact_id)
    meta = json.loads((d / "meta.json").read_text())
    if name not in meta["files"]:
        raise NotFound(f"artifact {artifact_id} has no file {name!r}; it has: {', '.join(meta['files'])}")
    return d / name


def read_artifact(
    artifact_id: Annotated[str, Field(description="Id returned by a tool (compile_kernel, profile_pmc, ...).")],
    offset: Annotated[int, Field(ge=0, description="First line to return (0-based).")] = 0,
    limit: Annotated[int, Field(ge=1, le=2000, description="Number of lines to return.")] = 200,
    name: Annotated[str | None, Field(description="File inside the artifact; default: its first file.")] = None,
) -> ArtifactPage:
    """Page through a stored artifact (full assembly, raw profiler output, full tables) by lines."""
    d = _check_id(artifact_id)
    meta = json.loads((d / "meta.json").read_text())
    fname = name or meta["files"][0]
    p = path_of(artifact_id, fname)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise BadInput(f"{fname} in artifact {artifact_id} is binary; read a text file of: {meta['files']}") from None
    end = min(len(lines), offset + limit)
    return ArtifactPage(
        artifact_id=artifact_id, name=fname, text="\n".join(lines[offset:end]), offset=offset,
        next_offset=end if end < len(lines) else None, total=len(lines), files=meta["files"],
        provenance=[Provenance(field="text", source=f"artifact {artifact_id} ({meta['kind']})",
                               detail=meta.get("detail"))],
    )
