"""Reading files that agent code could have touched, from trusted code (the trust model in ARCHITECTURE.md).

A sandboxed process owns its scratch dir: it can replace any file there by a symbolic link (to
/proc/self/environ, to a root-only file), a FIFO (a reader blocks forever), a device node (/dev/zero: a
reader never ends) or a huge file, and it can write any name into a result file. So trusted code:
- takes names from agent-written data only when they are plain names (`plain_name`: no '/', no '..');
- opens them relative to a directory descriptor, never following a link (O_NOFOLLOW), never blocking
  (O_NONBLOCK), and refuses anything that is not a regular file (`open_regular`);
- reads at most a cap (`read_capped`), or only the end of the file (`tail_fd`);
- walks a directory from a descriptor opened O_DIRECTORY|O_NOFOLLOW (`open_dir`, `list_dir`).
"""

from __future__ import annotations

import io
import os
import stat

OUTPUT_TAIL_CHARS = 8000
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafeFile(Exception):
    """The file is not a plain regular file within its cap (a link, a FIFO, a device, too big, a bad name)."""


class Missing(UnsafeFile):
    """There is no file of that name."""


def plain_name(name: object) -> str:
    """`name` if it names an entry of one directory (no '/', not '.' or '..', no NUL), else UnsafeFile."""
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\0" in name \
            or len(name) > 255:
        raise UnsafeFile(f"not a plain file name: {str(name)[:80]!r}")
    return name


def open_dir(path: str | os.PathLike, dir_fd: int | None = None) -> int:
    """A descriptor of the directory `path` (relative to dir_fd when given); the last component must not be a
    link (O_NOFOLLOW). UnsafeFile when it is not a directory."""
    try:
        return os.open(path, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as e:
        raise UnsafeFile(f"{os.fspath(path)[-120:]}: not a directory we may walk ({e.strerror})") from e


def open_regular(name: str, dir_fd: int | None = None) -> int:
    """A read descriptor of the regular file `name` (a plain name when dir_fd is given); never follows a link,
    never blocks on a FIFO. UnsafeFile for anything else."""
    if dir_fd is not None:
        plain_name(name)
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError as e:
        raise Missing(f"{str(name)[-120:]}: no such file") from e
    except OSError as e:
        raise UnsafeFile(f"{str(name)[-120:]}: cannot be opened as a plain file ({e.strerror})") from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile(f"{str(name)[-120:]}: not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_fd(fd: int, cap: int) -> bytes:
    """All of a regular file's bytes from its start, UnsafeFile when it holds more than cap bytes."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeFile("not a regular file")
    if st.st_size > cap:
        raise UnsafeFile(f"{st.st_size} bytes, more than the {cap} allowed")
    data = os.pread(fd, cap + 1, 0)
    if len(data) > cap:
        raise UnsafeFile(f"more than the {cap} bytes allowed")
    return data


def read_capped(name: str, cap: int, dir_fd: int | None = None) -> bytes:
    """The bytes of the regular file `name` (under dir_fd when given), at most cap; UnsafeFile otherwise."""
    fd = open_regular(name, dir_fd)
    try:
        return read_fd(fd, cap)
    finally:
        os.close(fd)


def read_under(directory: str | os.PathLike, name: object, cap: int) -> bytes:
    """The regular file with the plain name `name` directly in `directory` (itself opened without following a
    link at its last component), at most cap bytes; UnsafeFile otherwise."""
    dfd = open_dir(directory)
    try:
        return read_capped(plain_name(name), cap, dfd)
    finally:
        os.close(dfd)


def list_dir(dir_fd: int) -> list[str]:
    """The names in the directory of dir_fd (read through a duplicate: the descriptor stays usable)."""
    dup = os.dup(dir_fd)
    try:
        return sorted(os.listdir(dup))
    finally:
        os.close(dup)


def tail_fd(fd: int, n: int = OUTPUT_TAIL_CHARS) -> str:
    """The last n characters of the regular file behind fd (read with pread from its end: a candidate that
    printed gigabytes costs the reader nothing); '' when fd is not a regular file or unreadable."""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return ""
        size = st.st_size
        start = max(0, size - 4 * n)  # up to 4 bytes per UTF-8 character
        text = os.pread(fd, size - start, start).decode("utf-8", errors="replace")
    except OSError:
        return ""
    if len(text) <= n and not start:
        return text
    return f"...[{start + max(0, len(text) - n)} bytes cut]...\n" + text[-n:]


def tail_file(path: str | os.PathLike, n: int = OUTPUT_TAIL_CHARS) -> str:
    """tail_fd of the regular file at path, opened without following a link or blocking; '' for anything else."""
    try:
        fd = open_regular(os.fspath(path))
    except UnsafeFile:
        return ""
    try:
        return tail_fd(fd, n)
    finally:
        os.close(fd)


def create_new(directory: str | os.PathLike, names: tuple[str, ...], owner: int | None) -> list[io.FileIO]:
    """Files created new in `directory` (never following a link, never an existing file), read-write, owned by
    `owner` when given (a sandbox's uid: its tools may reopen /proc/self/fd/1). The runner makes a child's capture
    files so, before any agent code runs, and reads them through these descriptors only."""
    dfd = open_dir(directory)
    out: list[io.FileIO] = []
    try:
        for name in names:
            fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
            out.append(io.FileIO(fd, "r+", closefd=True))
            if owner is not None:
                os.fchown(fd, owner, owner)
    except BaseException:
        for f in out:
            f.close()
        raise
    finally:
        os.close(dfd)
    return out
