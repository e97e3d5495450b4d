"""Triton's driver module, built once per install and given to every later spare; nothing else is kept.

A spare's Triton builds its driver module (cuda_utils / hip_utils, with the C compiler: seconds on a busy host)
before any agent code reaches the process. save_driver() keeps the first spare's copy, taken right after it said
ready, so that is our code's output alone; restore_driver() puts it into each later spare's TRITON_CACHE_DIR
(scratch/.triton) before that spare starts. The copy reads the scratch dir from descriptors (no link followed,
regular files only, plain names, at most MAX_FILES files and MAX_BYTES).

What a job compiles is NOT kept, not even for the same source's later jobs. Every file in a Triton cache dir
that a process running agent code could write is agent-chosen bytes: a Triton cache kept per source would be a
channel from one job to the next (a verify job storing its outputs for the benchmark job that follows, under
a name that looks like a cubin), and a directory walk through a link it planted would copy other agents'
files, the journal or root-only host files into it. A harness cannot tell a cubin Triton wrote from one the
candidate wrote without compiling again, which is the cost the cache would save. So a candidate's kernels
compile in every job (about half a second per Triton verify on an H200).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path

from evokernel_mcp.paths import sub_state_dir
from evokernel_mcp.runtime import safefs

log = logging.getLogger(__name__)

MAX_FILES = 256
MAX_BYTES = 64 << 20
NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")
SUBDIR = ".triton"
DRIVER = "_driver"


def _root() -> Path:
    return sub_state_dir("kernel-cache")


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
        if _copy_out(scratch, tmp):
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


def _copy_out(scratch: Path, dest: Path) -> int:
    """The regular, plainly named, singly linked files of scratch/.triton/<entry>/, copied to dest/<entry>/
    within MAX_FILES and MAX_BYTES; returns files copied. Walked from descriptors (safefs.py): a link where
    a directory or a file should be is skipped, never followed."""
    files = total = 0
    try:
        root = safefs.open_dir(scratch)
        try:
            cache = safefs.open_dir(SUBDIR, root)
        finally:
            os.close(root)
    except safefs.UnsafeFile:
        return 0
    try:
        for name in filter(NAME.match, safefs.list_dir(cache)):
            try:
                entry = safefs.open_dir(name, cache)
            except safefs.UnsafeFile:
                continue
            try:
                for fname in filter(NAME.match, safefs.list_dir(entry)):
                    try:
                        fd = safefs.open_regular(fname, entry)
                    except safefs.UnsafeFile:
                        continue
                    try:
                        st = os.fstat(fd)
                        if st.st_nlink != 1:
                            continue
                        if files + 1 > MAX_FILES or total + st.st_size > MAX_BYTES:
                            log.warning("kernel cache: over its limits; the rest not kept")
                            return files
                        data = safefs.read_fd(fd, MAX_BYTES - total)
                    except safefs.UnsafeFile:
                        continue
                    finally:
                        os.close(fd)
                    (dest / name).mkdir(parents=True, exist_ok=True)
                    (dest / name / fname).write_bytes(data)
                    files, total = files + 1, total + len(data)
            finally:
                os.close(entry)
    except OSError as e:
        log.warning("kernel cache: save failed: %s", e)
    finally:
        os.close(cache)
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
