"""Reading what a sandboxed process left in its scratch dir without following anything it chose: every path is
walked from a directory descriptor (O_DIRECTORY|O_NOFOLLOW, component by component, relative opens), every
file opened O_NOFOLLOW|O_NONBLOCK and read only when it is a regular file, up to a size cap. A link, a FIFO,
a device node or a file over its cap is refused (named), never read."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

TEXT_SUFFIXES = (".csv", ".json", ".txt", ".log")
BINARY_SUFFIXES = (".ncu-rep",)
TEXT_MAX_BYTES = 8 << 20
BINARY_MAX_BYTES = 64 << 20
TOTAL_MAX_BYTES = 160 << 20
MAX_FILES = 4000
MAX_DEPTH = 8
_NAME = re.compile(r"[A-Za-z0-9._+-]{1,200}")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def plain_parts(rel: str) -> list[str]:
    """'rocprof/run_01' -> ['rocprof', 'run_01']; ValueError for an absolute path, '..', '.' or odd names."""
    parts = rel.split("/")
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") or not _NAME.fullmatch(p) for p in parts):
        raise ValueError(f"not a plain relative path: {rel!r}")
    return parts


def _read_fd(fd: int, cap: int, tail: bool) -> bytes | None:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        return None
    if st.st_size > cap and not tail:
        return None
    if tail and st.st_size > cap:
        os.lseek(fd, st.st_size - cap, os.SEEK_SET)
    chunks, left = [], cap
    while left > 0:
        b = os.read(fd, min(left, 1 << 20))
        if not b:
            break
        chunks.append(b)
        left -= len(b)
    return b"".join(chunks)


def _open_at(root: Path, parts: list[str], directory: bool) -> int:
    fd = os.open(str(root), _DIR_FLAGS)
    try:
        for i, p in enumerate(parts):
            last = i == len(parts) - 1
            nfd = os.open(p, (_DIR_FLAGS if directory or not last else _FILE_FLAGS), dir_fd=fd)
            os.close(fd)
            fd = nfd
        return fd
    except OSError:
        os.close(fd)
        raise


def read_capped(root: Path, rel: str, cap: int, tail: bool = False) -> str:
    """A text file's content (its last `cap` bytes with tail), '' when missing or not a regular file."""
    try:
        fd = _open_at(root, plain_parts(rel), directory=False)
    except (OSError, ValueError):
        return ""
    try:
        data = _read_fd(fd, cap, tail)
    finally:
        os.close(fd)
    return (data or b"").decode("utf-8", errors="replace")


def read_tree(root: Path, names: list[str]) -> tuple[dict[str, str], dict[str, bytes], list[str]]:
    """The regular files under each named relative file or dir: (texts, binaries, refused), keyed by relative
    path. Only TEXT_SUFFIXES / BINARY_SUFFIXES are read; links, FIFOs, devices and files over the caps are
    refused and named."""
    texts: dict[str, str] = {}
    blobs: dict[str, bytes] = {}
    refused: list[str] = []
    budget = [TOTAL_MAX_BYTES, MAX_FILES]

    def take(fd: int, rel: str) -> None:
        binary = rel.endswith(BINARY_SUFFIXES)
        if not binary and not rel.endswith(TEXT_SUFFIXES):
            return
        cap = min(BINARY_MAX_BYTES if binary else TEXT_MAX_BYTES, budget[0])
        data = _read_fd(fd, cap, False)
        if data is None:
            refused.append(f"{rel} (not a regular file, or over {cap} bytes)")
            return
        budget[0] -= len(data)
        if binary:
            blobs[rel] = data
        else:
            texts[rel] = data.decode("utf-8", errors="replace")

    def walk(dfd: int, rel: str, depth: int) -> None:
        for entry in sorted(os.scandir(dfd), key=lambda e: e.name):
            sub = f"{rel}/{entry.name}"
            if budget[1] <= 0:
                refused.append(f"{sub} (more than {MAX_FILES} files)")
                return
            budget[1] -= 1
            if not _NAME.fullmatch(entry.name):
                refused.append(f"{rel}/<odd name>")
                continue
            try:
                fd = os.open(entry.name, _FILE_FLAGS, dir_fd=dfd)
            except OSError:
                refused.append(f"{sub} (a link or unreadable)")
                continue
            try:
                if stat.S_ISDIR(os.fstat(fd).st_mode):
                    if depth < MAX_DEPTH:
                        walk(fd, sub, depth + 1)
                else:
                    take(fd, sub)
            finally:
                os.close(fd)

    for name in names:
        try:
            parts = plain_parts(name)
            fd = _open_at(root, parts[:-1], directory=True) if parts[:-1] else os.open(str(root), _DIR_FLAGS)
        except (OSError, ValueError):
            continue
        try:
            try:
                nfd = os.open(parts[-1], _FILE_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                continue
            except OSError:
                refused.append(f"{name} (a link or unreadable)")
                continue
            try:
                if stat.S_ISDIR(os.fstat(nfd).st_mode):
                    walk(nfd, name, 1)
                else:
                    take(nfd, name)
            finally:
                os.close(nfd)
        finally:
            os.close(fd)
    return texts, blobs, refused


def materialize(root: Path, texts: dict[str, str], blobs: dict[str, bytes]) -> None:
    """Write what came back under root (a harness-only dir), each name checked as a plain relative path."""
    for rel, data in [*texts.items(), *blobs.items()]:
        try:
            parts = plain_parts(rel)
        except ValueError:
            continue
        p = root.joinpath(*parts)
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, str):
            p.write_text(data, encoding="utf-8")
        else:
            p.write_bytes(data)
