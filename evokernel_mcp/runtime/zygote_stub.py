"""The stub bwrap runs in a new sandbox where the zygote serves it (runtime/zygote.py):
`python -m evokernel_mcp.runtime.zygote_stub --zygote-fd N -- <runtime/child.py's arguments>`.

It runs before any agent code in this sandbox and imports only the standard library's small modules (it
starts in every sandbox). It sends its descriptors, arguments, environment and directory to the zygote's fork
(the kernel adds its pid), then:
- "forked": a process forked from the zygote is ready to serve this sandbox with those descriptors; the stub
  answers "ok" (from then on it will not start a child of its own; the process serves only after that), closes
  its own copies (so the runner's pipes see the end when that process ends) and waits for its wait status,
  then ends the same way (exit code, or the same signal), so bwrap reports what the child did;
- "exec ..." (or no answer: the fork is gone, so no process was told to serve): it becomes the child itself, as
  a sandbox without a zygote starts.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys

CHILD_MODULE = "evokernel_mcp.runtime.child"


def _own_fds(skip: int) -> list[int]:
    out = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd == skip:
            continue
        try:
            os.fstat(fd)
        except OSError:  # the listing's own descriptor, closed by now
            continue
        out.append(fd)
    return sorted(out)


def _exec_child(argv: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, "-m", CHILD_MODULE, *argv])


def _lines(sock: socket.socket):
    buf = b""
    while True:
        try:
            chunk = sock.recv(4096)
        except OSError:
            chunk = b""
        if not chunk:
            return
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            yield line.decode(errors="replace")


def _not_dumpable() -> None:
    import ctypes

    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: no ptrace, no pidfd_getfd by the same uid


def _end_like(status: int) -> None:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL and SIGSTOP keep their default
            pass
        os.kill(os.getpid(), sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def main() -> None:
    args = sys.argv[1:]
    if len(args) < 3 or args[0] != "--zygote-fd" or args[2] != "--":
        sys.exit("usage: zygote_stub --zygote-fd N -- CHILD ARGS")
    zfd, argv = int(args[1]), args[3:]
    fds = _own_fds(zfd)
    sock = socket.socket(fileno=zfd)
    with open("/proc/self/stat", "rb") as f:
        start = int(f.read().rsplit(b")", 1)[1].split()[19])
    hello = json.dumps({"argv": argv, "env": dict(os.environ), "cwd": os.getcwd(), "fds": fds,
                        "start": start}).encode()
    try:
        socket.send_fds(sock, [hello], fds)
    except OSError:
        sock.close()
        _exec_child(argv)
    lines = _lines(sock)
    first = next(lines, "")
    if first != "forked":  # "exec ...", or the fork is gone: no process serves this sandbox but the one we become
        sock.close()
        _exec_child(argv)
    try:
        sock.sendall(b"ok\n")  # we will not start a child of our own: the served process may go on
    except OSError:  # the fork is gone before it could tell it so: the process it made ends unserved
        _end_like(signal.SIGKILL)
    _not_dumpable()  # what agent code in this sandbox (the same uid) could do with our socket: nothing we allow
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in fds:
        if fd > 2:
            os.close(fd)
        else:
            os.dup2(devnull, fd)
    os.close(devnull)
    for line in lines:
        kind, _, value = line.partition(" ")
        if kind == "exit":
            _end_like(int(value))
    _end_like(signal.SIGKILL)  # the fork ended without a status: it was killed with the sandbox's processes


if __name__ == "__main__":
    main()
