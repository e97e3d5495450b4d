"""The runner's side of the zygote (runtime/zygote.py): start it once, ask it for each CPU child's sandbox, learn
the host pid of the process that serves it.

Used where the zygote can serve (`wanted`): the zygote setting is on ("auto"), the child runs on the CPU at the
"bwrap+uid" level (the server is root: the zygote's fork enters bwrap's namespaces and drops to the sandbox's
uid), and no profiler wraps it. Anything else, or a zygote that failed, starts children as before: the stub
then execs the child itself, so a request never waits on a zygote that is gone.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading

from evokernel_mcp import settings
from evokernel_mcp.paths import sub_state_dir
from evokernel_mcp.runtime import proctree
from evokernel_mcp.runtime.zygote_models import ForkReport, ForkRequest

log = logging.getLogger(__name__)
STUB_MODULE = "evokernel_mcp.runtime.zygote_stub"
REPORT_TIMEOUT_S = 30.0


def wanted(device: str, level: str, wrapped: bool) -> bool:
    return settings.get().zygote == "auto" and device == "cpu" and level == "bwrap+uid" and not wrapped


class Zygote:
    """One zygote process of this runner (started with the environment of a CPU child, `env`)."""

    def __init__(self, env: dict[str, str]):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.env = dict(env)
        self.dir = sub_state_dir("sandbox") / f"zygote-{os.getpid()}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.env.update({"HOME": str(self.dir), "TMPDIR": str(self.dir), "TRITON_CACHE_DIR": str(self.dir)})
        self.env.pop("_EVOKERNEL_SPAWNED_AT", None)
        from evokernel_mcp.runtime import sandbox

        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "evokernel_mcp.runtime.zygote", "--ctl",
                                          str(theirs.fileno())], env=self.env, cwd=str(self.dir),
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         pass_fds=(theirs.fileno(),), start_new_session=True)
        finally:
            theirs.close()
        sandbox.own(self.proc.pid)
        self.ctl = ours
        self.lock = threading.Lock()
        self.dead = False

    def fork(self, cgroup_procs: list[str]) -> tuple[socket.socket, socket.socket] | None:
        """(the stub's end of its socket, inheritable; our end of the report socket), or None: start as before."""
        if self.proc.poll() is not None:
            self.dead = True
            return None
        stub_ours, stub_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        rep_ours, rep_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            stub_ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)  # the kernel adds the stub's pid
            with self.lock:
                if self.dead:
                    raise OSError("the zygote is gone")
                socket.send_fds(self.ctl, [ForkRequest(cgroup_procs=cgroup_procs).model_dump_json().encode()],
                                [stub_ours.fileno(), rep_theirs.fileno()])
        except OSError as e:
            self.dead = True
            log.warning("the zygote does not take requests (%s); children start as before", e)
            for s in (stub_theirs, rep_ours):
                s.close()
            return None
        finally:
            stub_ours.close()
            rep_theirs.close()
        stub_theirs.set_inheritable(True)
        return stub_theirs, rep_ours

    def stop(self) -> None:
        """The zygote alone: its forks serve their sandboxes to the end (killing the sandbox ends them)."""
        self.dead = True
        self.ctl.close()
        try:
            os.kill(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        proctree.disown(self.proc.pid)
        shutil.rmtree(self.dir, ignore_errors=True)


_ZYGOTE: Zygote | None = None
_LOCK = threading.Lock()
MAX_STARTS = 3  # a zygote that keeps failing (its imports, its start) is not started again for every child
_STARTS = [0]


def zygote(env: dict[str, str]) -> Zygote | None:
    """This runner's zygote, started on first use (and again if it went, a few times at most); None: none."""
    global _ZYGOTE
    with _LOCK:
        if _ZYGOTE is None or _ZYGOTE.dead:
            if _ZYGOTE is not None:
                _ZYGOTE.stop()
                _ZYGOTE = None
            if _STARTS[0] >= MAX_STARTS:
                return None
            _STARTS[0] += 1
            _ZYGOTE = Zygote(env)
        return _ZYGOTE


def stop() -> None:
    global _ZYGOTE
    with _LOCK:
        if _ZYGOTE is not None:
            _ZYGOTE.stop()
            _ZYGOTE = None
        _STARTS[0] = 0


def fork_for(device: str, level: str, wrapped: bool, env: dict[str, str], cgroup_procs: list[str]):
    """fork()'s answer from this runner's zygote where it is wanted here, else None (the child starts itself).
    env: the child's environment (the zygote starts with the first one's, its per-child names its own)."""
    if not wanted(device, level, wrapped):
        return None
    try:
        z = zygote(env)
        return z.fork(cgroup_procs) if z is not None else None
    except Exception as e:  # noqa: BLE001 - a zygote that cannot start (its directory, its process): as before
        log.warning("no zygote (%r); the child starts its own interpreter", e)
        return None


def read_report(sock: socket.socket, timeout_s: float = REPORT_TIMEOUT_S) -> tuple[ForkReport, int | None]:
    """The fork's report and, where a process serves the sandbox, a pidfd of it; or why the stub started the
    child itself (reason); a report with neither (`ForkReport()`) means the fork said nothing."""
    sock.settimeout(timeout_s)
    buf, pidfd = b"", None
    try:
        while not buf.endswith(b"\n") and len(buf) < 1 << 16:
            chunk, fds, _flags, _addr = socket.recv_fds(sock, 1 << 16, 1)
            for fd in fds:
                if pidfd is None:
                    pidfd = fd
                else:
                    os.close(fd)
            if not chunk:
                break
            buf += chunk
    except OSError:
        pass
    finally:
        sock.close()
    try:
        report = ForkReport.model_validate_json(buf)
    except ValueError:
        report = ForkReport()
    if report.pid is None and pidfd is not None:
        os.close(pidfd)
        pidfd = None
    return report, pidfd
