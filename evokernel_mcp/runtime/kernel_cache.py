"""Triton's compile cache, kept per candidate SOURCE across that source's jobs.

Every job runs its candidate in a fresh process with a fresh scratch dir, so a Triton candidate paid
its whole JIT compile (the kernel, and the launcher module Triton builds with the C compiler) on every
verify and benchmark: ~0.5 s of a ~1 s warm verify on the H200. This module lets the NEXT job of the
SAME source start with what the last one compiled:

- restore(): before the source loads, the runner copies the entries saved for sha256(source) into the
  child's TRITON_CACHE_DIR (scratch/.triton), pointing Triton's group files (which list absolute paths)
  at the new place. Entries the spare made before any agent code ran (Triton's driver module) are left
  as they are.
- save(): when the child is discarded (every process of the job is dead by then, so nothing changes
  under us), the runner copies the entries the job added back under sha256(source).

The trust argument: the files are written by agent code, so they are only ever given back to jobs of
byte-identical source, that is to the same code. A source can therefore only affect its own later jobs,
which it could already do by behaving differently in them; it can never reach another source's job
(a different source has a different key). The copy reads agent-written files defensively: regular
files only (no symlinks, no hard links), plain names, at most MAX_FILES files and MAX_BYTES per source;
anything else is skipped. At most MAX_SOURCES sources are kept (least recently used go first).
Spares also start with the Triton driver module the first spare built (restore_driver / save_driver):
those files are saved before any agent code reached that process, so they are our code's output alone.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import shutil
import stat
from pathlib import Path

from evokernel_mcp.paths import sub_state_dir

log = logging.getLogger(__name__)

MAX_FILES = 256
MAX_BYTES = 64 << 20
MAX_SOURCES = 256
NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")
SUBDIR = ".triton"
DRIVER = "_driver"


def key(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()


def _root() -> Path:
    return sub_state_dir("kernel-cache")


def _entries(cache: Path) -> set[str]:
    try:
        return {e.name for e in os.scandir(cache) if e.is_dir(follow_symlinks=False)}
    except OSError:
        return set()


@contextlib.contextmanager
def _locked(exclusive: bool):
    """Saves (and prunes) one at a time, restores never beside one: a retired child's save runs in the
    background (spares.retire) while the next job of the same source, here or in another runner, restores."""
    import fcntl

    with open(_root() / ".lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield


def restore(source: str, scratch: Path, owner: int | None = None) -> set[str]:
    """Copy the saved entries of this source into scratch/.triton (chowned to `owner` when given); returns
    the entry names present before the job (what save() must not copy back)."""
    before = _entries(scratch / SUBDIR)
    src = _root() / key(source)
    if src.is_dir():
        with _locked(False):
            _copy_in(src, scratch / SUBDIR, owner)
        with contextlib.suppress(OSError):
            os.utime(src)  # recently used
    return before


def save(source: str, scratch: Path, before: set[str]) -> int:
    """Copy the entries the job added to scratch/.triton under this source's key; returns files copied.
    Call only after every process of the job is dead."""
    new = sorted(_entries(scratch / SUBDIR) - before)
    if not new:
        return 0
    with _locked(True):
        files = _copy_out(scratch / SUBDIR, new, _root() / key(source))
        _prune()
    return files


def restore_driver(scratch: Path, owner: int | None = None) -> None:
    """Before a spare starts: the Triton driver module an earlier spare built (see save_driver), so that
    each spare does not run the C compiler again (seconds on a busy host)."""
    if (_root() / DRIVER).is_dir():
        _copy_in(_root() / DRIVER, scratch / SUBDIR, owner)


def save_driver(scratch: Path) -> None:
    """Right after a spare reported ready, before any agent code reached it: what it has in its Triton
    cache was made by our code alone (the driver module), so every later spare may start with it. Saved
    once (the first spare's), into a temporary dir renamed into place."""
    dest = _root() / DRIVER
    if dest.is_dir():
        return
    tmp = _root() / f".{DRIVER}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        if _copy_out(scratch / SUBDIR, sorted(_entries(scratch / SUBDIR)), tmp):
            os.rename(tmp, dest)
    except OSError as e:  # another spare got there first, or a disk problem: no harm
        log.debug("kernel cache: driver not saved: %s", e)
    shutil.rmtree(tmp, ignore_errors=True)


def _copy_in(src: Path, cache: Path, owner: int | None) -> None:
    """Each saved entry of src that the cache does not have yet, copied in, its group files relocated, owned
    by `owner` when given. A cache problem costs a compile, never a job."""
    try:
        cache.mkdir(exist_ok=True)
        if owner is not None:
            os.chown(cache, owner, owner)
        for entry in os.scandir(src):
            dst = cache / entry.name
            if not entry.is_dir(follow_symlinks=False) or dst.exists():
                continue
            shutil.copytree(entry.path, dst, symlinks=True)
            _relocate_groups(dst)
            if owner is not None:
                for p in [dst, *dst.iterdir()]:
                    os.chown(p, owner, owner, follow_symlinks=False)
    except OSError as e:
        log.warning("kernel cache: restore failed: %s", e)


def _copy_out(cache: Path, names: list[str], dest: Path) -> int:
    """The regular, plainly named files of cache/<name> for each name, copied to dest/<name>/ (each file
    written aside and renamed into place) within MAX_FILES and MAX_BYTES; returns files copied."""
    files = total = 0
    try:
        for name in names:
            if not NAME.match(name):
                continue
            for f in os.scandir(cache / name):
                st = _regular(f.path)
                if st is None or not NAME.match(f.name):
                    continue
                if files + 1 > MAX_FILES or total + st.st_size > MAX_BYTES:
                    log.warning("kernel cache: %s over its limits; the rest not kept", dest.name[:12])
                    return files
                (dest / name).mkdir(parents=True, exist_ok=True)
                tmp = dest / name / f".{f.name}.tmp{os.getpid()}"
                fd = os.open(f.path, os.O_RDONLY | os.O_NOFOLLOW)
                with os.fdopen(fd, "rb") as r, open(tmp, "wb") as w:
                    shutil.copyfileobj(r, w, 1 << 20)
                os.replace(tmp, dest / name / f.name)
                files, total = files + 1, total + st.st_size
    except OSError as e:
        log.warning("kernel cache: save failed: %s", e)
    return files


def _relocate_groups(entry: Path) -> None:
    """Triton's group files (__grp__<name>.json) list their members by ABSOLUTE path, which named the old
    job's scratch dir: point them at this entry (a file that does not parse is dropped: a recompile)."""
    import json

    for grp in entry.glob("__grp__*.json"):
        try:
            paths = json.loads(grp.read_text())["child_paths"]
            moved = {str(k): str(entry / Path(str(v)).name) for k, v in paths.items()
                     if NAME.match(Path(str(v)).name)}
            grp.write_text(json.dumps({"child_paths": moved}))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            grp.unlink(missing_ok=True)


def _regular(path: str) -> os.stat_result | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st if stat.S_ISREG(st.st_mode) and st.st_nlink == 1 else None


def _prune() -> None:
    try:
        dirs = sorted((p for p in _root().iterdir() if not p.name.startswith(("_", "."))),
                      key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return
    for old in dirs[MAX_SOURCES:]:
        shutil.rmtree(old, ignore_errors=True)
