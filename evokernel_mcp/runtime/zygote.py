"""The zygote: one trusted process per runner that has imported what a CPU child imports (torch, the harness
sides) and forks a child's process into each new sandbox, so a child's start costs a fork, not 2-3 s of
`import torch` (on a 2-core VM the test suite started 500 children, most of its CPU time).

`python -m evokernel_mcp.runtime.zygote --ctl FD`, started by the runner (zygote_link.py) with the
environment a CPU child gets. It never runs agent code, reads no file a job could have written, and holds no
secret: its environment is a child's (the allow-list), its descriptors are its control socket only.

Each sandbox is still made by bubblewrap, for that child alone (sandbox.py): bwrap runs the stub
(zygote_stub.py) where it would run the child. The stub hands its descriptors, arguments, environment and
working directory over a socket the runner made for this sandbox; the kernel adds its pid (SCM_CREDENTIALS).
For each such request the zygote forks a trusted helper (here "the fork") that, from the stub's pid:
- reads what the kernel says of the stub: uid, gid, groups, capabilities, no_new_privs, seccomp,
  namespaces, rlimits, CPU affinity and nice value; it serves only a stub with no capabilities, a uid other
  than root, no_new_privs set and no seccomp filter, and an environment equal to the zygote's except the
  per-child names (zygote_models.PER_CHILD_ENV);
- enters the stub's pid namespace (for its child) and forks the process that will serve the sandbox. That
  process joins the job's cgroups, enters the stub's mount, uts, ipc, net and cgroup namespaces (pidfd
  setns), takes the stub's descriptors at their numbers (and no other), environment, directory, session,
  rlimits, affinity, nice value, groups, gid and uid (all capabilities gone: bounding set, ambient,
  permitted), sets no_new_privs, then checks from /proc that it now matches the stub in every field above;
  only then does it run runtime/child.py's main with the stub's arguments.
- tells the stub "forked" once that process has passed its checks, and waits for the stub's "ok" (from then
  on the stub will not start a child of its own); or "exec" with the reason (the stub then execs the child
  itself: the start without a zygote). After the "ok" it reports the serving process's host pid and a pidfd
  of it to the runner (kill, renice, CPU pinning and clocks walk it with the sandbox's tree through that
  pidfd: proctree.attach), tells the process "go" (one that gets no "go" ends: one process serves a sandbox),
  waits for it and sends the stub its wait status, which the stub ends with (bwrap's exit status is the
  child's, as before).

Killing the sandbox (bwrap) ends its pid namespace and so the forked process, as before; stopping the zygote
does not (each fork serves its sandbox to the end). Pages the zygote imported are charged to the runner's
memory cgroup, not the job's (the job's RLIMIT_DATA counts them).
"""

from __future__ import annotations

import array
import ctypes
import os
import resource
import signal
import socket
import sys
import time

from evokernel_mcp.runtime import zygote_facts
from evokernel_mcp.runtime.zygote_models import (
    EXEC,
    EXIT,
    FORKED,
    OK,
    ForkReport,
    ForkRequest,
    StubHello,
    ZygoteReady,
)

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWNET, CLONE_NEWPID = (
    0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x40000000, 0x20000000)
JOIN = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWNET
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 1, 24, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
HELLO_TIMEOUT_S = 60.0
MAX_FDS = zygote_facts.MAX_FDS
_libc = ctypes.CDLL(None, use_errno=True)


class Refused(Exception):
    """The stub gets "exec": it starts the child itself."""


def _prctl(option: int, arg: int = 0) -> None:
    if _libc.prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}, {arg})")


def _setns(fd: int, flags: int) -> None:
    if _libc.setns(fd, flags) != 0:
        raise OSError(ctypes.get_errno(), "setns")


def _recv_hello(sock: socket.socket) -> tuple[StubHello, list[int], int]:
    sock.settimeout(HELLO_TIMEOUT_S)
    fds = array.array("i")
    data, anc, _flags, _addr = sock.recvmsg(1 << 20, socket.CMSG_SPACE(MAX_FDS * fds.itemsize)
                                            + socket.CMSG_SPACE(12))
    got, pid = [], None
    for level, kind, payload in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            a = array.array("i")
            a.frombytes(payload[:len(payload) - len(payload) % a.itemsize])
            got += list(a)
        elif level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            pid = int.from_bytes(payload[:4], sys.byteorder, signed=True)
    try:
        hello = StubHello.model_validate_json(data)
    except ValueError as e:
        _close(got)
        raise Refused(f"a hello that does not check out: {str(e)[:200]}") from e
    if pid is None or pid <= 0 or len(got) != len(hello.fds):
        _close(got)
        raise Refused(f"no credentials ({pid}) or {len(got)} descriptors for {len(hello.fds)}")
    return hello, got, pid


def _close(fds) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _say(sock: socket.socket, line: str) -> bool:
    try:
        sock.sendall((line + "\n").encode())
        return True
    except OSError:
        return False


def _report(sock: socket.socket, report: ForkReport, pidfd: int | None = None) -> None:
    """The report to the runner, with a pidfd of the served process (the runner signals it through that: the
    number may be another process's once it has ended)."""
    try:
        socket.send_fds(sock, [report.model_dump_json().encode() + b"\n"], [pidfd] if pidfd is not None else [])
        sock.close()
    except OSError:
        pass


def _fork_for(stub: socket.socket, runner: socket.socket, req: ForkRequest) -> int:
    """The fork's life (see the module doc); its exit code."""
    hello, fds, pid = _recv_hello(stub)
    pidfd = os.pidfd_open(pid)  # the process from here on, whatever its number comes to mean
    with open(f"/proc/{pid}/stat", "rb") as f:
        if int(f.read().rsplit(b")", 1)[1].split()[19]) != hello.start:
            raise Refused(f"pid {pid} is no longer the stub")
    facts = zygote_facts.facts(pid)
    signal.pidfd_send_signal(pidfd, 0)  # still alive, so still the pid's owner: the facts above are the stub's
    why = zygote_facts.servable(facts, hello)
    if why:
        _close(fds)
        raise Refused(why)
    for r, lim in facts["rlimits"].items():  # ours now: the serving process inherits them
        resource.setrlimit(r, lim)
    os.sched_setaffinity(0, facts["cpus"])
    os.setpriority(os.PRIO_PROCESS, 0, facts["nice"])
    procs = [os.open(p, os.O_WRONLY) for p in req.cgroup_procs]
    _setns(pidfd, CLONE_NEWPID)  # for the process forked next
    link, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)  # "armed" from it, "go" to it
    child = os.fork()
    if child == 0:
        link.close()
        box = [theirs.detach()]
        try:
            _become(hello, fds, facts, pidfd, procs, box)  # runs the child; never returns
        except BaseException as e:  # noqa: BLE001 - before agent code: say why, end
            try:
                os.write(box[0], f"not served: {type(e).__name__}: {e}"[:500].encode())
            except OSError:
                pass
        os._exit(70)
    theirs.close()
    _close(fds + procs + [pidfd])
    link.settimeout(HELLO_TIMEOUT_S)
    try:
        said = link.recv(512).decode(errors="replace")
    except OSError as e:
        said = f"no word from the forked process: {e}"
    if said != "armed":
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        raise Refused(said or "the forked process ended before it was ready")
    served = os.pidfd_open(child)  # (ours to reap: the number stays its own until we wait)
    # the stub says "ok" to "forked" before the process may serve: a stub that did not will exec its own child
    # (its fork gone, or no answer), and then this one never gets "go" and ends
    if not _say(stub, FORKED) or _read_line(stub) != OK:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        return 1
    _report(runner, ForkReport(pid=child), served)  # before it serves: the runner walks it from its first op
    try:
        link.send(b"go")
    finally:
        link.close()
    _, status = os.waitpid(child, 0)
    _say(stub, f"{EXIT} {status}")
    return 0


def _read_line(sock: socket.socket, timeout_s: float = HELLO_TIMEOUT_S) -> str:
    sock.settimeout(timeout_s)
    buf = b""
    try:
        while not buf.endswith(b"\n") and len(buf) < 512:
            chunk = sock.recv(512)
            if not chunk:
                break
            buf += chunk
    except OSError:
        return ""
    return buf.decode(errors="replace").strip()


def _become(hello: StubHello, fds: list[int], facts: dict, pidfd: int, procs: list[int], box: list[int]) -> None:
    """The serving process: into the stub's sandbox, as the stub is, then runtime/child.py's main. box[0]: its
    link to the fork (moved here; an error is written there)."""
    for fd in procs:  # the job's cgroups, from the runner's own cgroup (outside the sandbox's cgroup namespace)
        os.write(fd, b"0")
    _setns(pidfd, JOIN)
    os.setsid()
    import fcntl

    low = max(hello.fds) + 1  # copies above every number a descriptor must take: no dup2 below lands on one
    keep = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, low) for fd in [*fds, box[0]]]
    box[0] = link = keep.pop()
    for fd in os.listdir("/proc/self/fd"):
        if int(fd) not in keep and int(fd) != link:
            _close([int(fd)])
    for src, dst in zip(keep, hello.fds):
        os.dup2(src, dst)
    _close(keep)
    os.chdir(hello.cwd)
    os.environ.clear()
    os.environ.update(hello.env)
    import tempfile

    tempfile.tempdir = None
    uid, gid = int(facts["status"]["Uid"].split()[0]), int(facts["status"]["Gid"].split()[0])
    last_cap = int(open("/proc/sys/kernel/cap_last_cap").read())
    for cap in range(last_cap + 1):
        _prctl(PR_CAPBSET_DROP, cap)
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)  # permitted and effective capabilities go with root
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # (after the uid switch, which clears it): ends with its fork
    odd = zygote_facts.unlike(facts, hello, link)
    if odd:
        raise RuntimeError(f"after the switch this process differs from the stub in {odd}")
    os.write(link, b"armed")
    if os.read(link, 16) != b"go":  # the stub answered "ok": it will not start a child of its own
        os._exit(70)
    os.close(link)
    sys.argv = [sys.modules["evokernel_mcp.runtime.child"].__file__, *hello.argv]
    sys.path[:] = [hello.cwd if p == _HOME else p for p in sys.path]  # `python -m` puts its directory first
    from evokernel_mcp.runtime import child

    code = 0
    try:
        child.main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 - as the interpreter would: the traceback, then status 1
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        _exit_as_interpreter(code)


def _exit_as_interpreter(code: int) -> None:
    import atexit

    try:
        atexit._run_exitfuncs()
        for f in (sys.stdout, sys.stderr):
            f.flush()
    finally:
        os._exit(code)


def _serve(ctl: socket.socket) -> None:
    while True:
        try:
            data, fds, _f, _a = socket.recv_fds(ctl, 1 << 16, 2)
        except InterruptedError:
            continue
        except OSError:  # the runner is gone
            return
        if not data:
            return
        if len(fds) != 2:
            _close(fds)
            continue
        if os.fork() == 0:
            _fork_main(ctl, fds, data)
        _close(fds)


def _fork_main(ctl: socket.socket, fds: list[int], data: bytes) -> None:
    """A fork's life; it outlives the zygote (a stopped zygote ends no running child)."""
    ctl.close()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    stub, runner = socket.socket(fileno=fds[0]), socket.socket(fileno=fds[1])
    code = 0
    try:
        code = _fork_for(stub, runner, ForkRequest.model_validate_json(data))
    except BaseException as e:  # noqa: BLE001 - anything: the stub starts the child itself
        import traceback

        where = traceback.extract_tb(e.__traceback__)[-1]
        why = f"{type(e).__name__}: {e} (zygote.py:{where.lineno} {where.line})"[:500].replace("\n", " ")
        _say(stub, f"{EXEC} {why}")
        _report(runner, ForkReport(reason=why))
        code = 1
    os._exit(code)


_HOME = os.getcwd()  # the zygote's directory, which `python -m` put on sys.path: a child's is its scratch dir


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--ctl", type=int, required=True)
    args = ap.parse_args()
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    ctl = socket.socket(fileno=args.ctl)
    t0 = time.perf_counter()
    reason = ""
    try:
        import torch  # noqa: F401 - what a CPU child imports at its start (child.py _info)

        import evokernel_mcp.benchmark.sides  # noqa: F401
        import evokernel_mcp.runtime.child  # noqa: F401
        import evokernel_mcp.verify.cand_side  # noqa: F401
        import evokernel_mcp.verify.sides  # noqa: F401
    except Exception as e:  # noqa: BLE001 - the runner starts children as before
        reason = f"imports failed: {e!r}"
    threads = len(os.listdir("/proc/self/task"))
    if not reason and threads != 1:  # a fork keeps only the forking thread: locks others hold stay held
        reason = f"{threads} threads after the imports"
    ready = ZygoteReady(ok=not reason, pid=os.getpid(), import_s=round(time.perf_counter() - t0, 2), reason=reason)
    ctl.sendall(ready.model_dump_json().encode() + b"\n")
    if reason:
        return
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the forks are reaped by the kernel
    _serve(ctl)


if __name__ == "__main__":
    main()
