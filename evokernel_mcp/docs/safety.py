"""Where the docs live and how a requested path is resolved: only inside the docs roots, never out.

A doc path is relative to the resources directory and starts with a docs root name, e.g.
`gpu_arch/lds.md` or `reference_kernels/stencil_lds/README.md`. Refused: empty paths, NUL, absolute
paths, backslashes, `..` components, paths outside the roots, and symlinks whose target leaves the root.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from evokernel_mcp.errors import BadInput, NotFound
from evokernel_mcp.paths import resources_dir

DOC_ROOTS = ("gpu_arch", "reference_kernels")


def base_dir(base: Path | None = None) -> Path:
    """The resources directory (argument > paths.RESOURCES_DIR, the repo's resources/)."""
    return Path(base) if base is not None else resources_dir()


def check_rel(path: str) -> PurePosixPath:
    """Validate the shape of a doc path (no file system access); return it normalized."""
    if not isinstance(path, str) or not path.strip():
        raise BadInput("doc path is empty: pass a path from list_docs, e.g. 'gpu_arch/index.md'.")
    if "\0" in path:
        raise BadInput("doc path contains a NUL byte: pass a path from list_docs, e.g. 'gpu_arch/index.md'.")
    if "\\" in path or path.startswith("/") or (len(path) > 1 and path[1] == ":"):
        raise BadInput(f"doc path {path!r} is absolute or uses backslashes: pass a relative path from "
                       "list_docs, e.g. 'gpu_arch/index.md'.")
    rel = PurePosixPath(path)
    if any(part == ".." for part in rel.parts):
        raise BadInput(f"doc path {path!r} contains '..': doc paths stay inside the docs roots "
                       f"({', '.join(DOC_ROOTS)}).")
    parts = [p for p in rel.parts if p != "."]
    if not parts or parts[0] not in DOC_ROOTS:
        raise NotFound(f"doc path {path!r} is not under a docs root: paths start with one of "
                       f"{', '.join(r + '/' for r in DOC_ROOTS)} (see list_docs).")
    return PurePosixPath(*parts)


def inside(target: Path, root: Path) -> bool:
    """True if target (after resolving symlinks) lies inside root (resolved)."""
    try:
        target.resolve().relative_to(root.resolve())
        return True
    except (ValueError, OSError):
        return False


def resolve_doc(path: str, base: Path | None = None) -> tuple[str, Path]:
    """Return (normalized relative path, real file) for a doc path, or raise BadInput/NotFound."""
    rel = check_rel(path)
    root = base_dir(base) / rel.parts[0]
    target = root.joinpath(*rel.parts[1:])
    if not inside(target, root):
        linked = any(q.is_symlink() for q in [target, *target.parents] if str(q).startswith(str(root)))
        how = "is a symlink pointing" if linked else "resolves"
        raise BadInput(f"doc path {path!r} {how} outside the docs root {rel.parts[0]}/; refused.")
    if not target.is_file():
        raise NotFound(f"no doc {str(rel)!r}: call list_docs for the available paths, or search_docs.")
    return str(rel), target
