"""The process tree as /proc shows it now: who is whose child, and what is done to a whole tree (killed,
reniced, its zombies reaped). No import of the sandbox or the limits, which both walk it."""

from __future__ import annotations

import os
import signal
import time


def children_map(zombies: bool = False) -> dict[int, list[int]]:
    """Every process's children, from each one's parent in /proc (zombies too, when asked)."""
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] == "Z" and not zombies:  # already dead; its parent reaps it
                continue
            ppid = int(fields[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(name))
    return kids


def descendants(pid: int, zombies: bool = False) -> list[int]:
    """pid's descendants, and those of the live processes attached to it (attach())."""
    kids, out, todo = children_map(zombies), [], [pid]
    while todo:
        p = todo.pop()
        for c in kids.get(p, []) + attached(p):
            out.append(c)
            todo.append(c)
    return out


_ATTACHED: dict[int, list[tuple[int, int]]] = {}  # root -> [(pid, pidfd)]
_PIDFDS: dict[int, int] = {}  # an attached pid -> its pidfd


def attach(root: int, pid: int, pidfd: int) -> None:
    """Count pid (not a descendant of root: a process the zygote forked into root's sandbox, runtime/zygote.py)
    as root's child in every walk of root's tree here: killed, reniced, pinned and clocked with it, while its
    pidfd says it is alive (its number is another process's once it has ended and been reaped). Takes pidfd."""
    _ATTACHED.setdefault(root, []).append((pid, pidfd))
    _PIDFDS[pid] = pidfd


def attached(root: int) -> list[int]:
    """The attached processes of root that have not been reaped (a zombie keeps its number)."""
    out = []
    for pid, fd in _ATTACHED.get(root, []):
        try:
            signal.pidfd_send_signal(fd, 0)
            out.append(pid)
        except OSError:  # ended (ESRCH), or a closed descriptor
            pass
    return out


def kill_attached(root: int) -> None:
    """SIGKILL root's attached processes through their pidfds (root itself is gone: its tree is not walked)."""
    for pid in attached(root):
        try:
            signal.pidfd_send_signal(_PIDFDS[pid], signal.SIGKILL)
        except (OSError, KeyError):
            pass


def detach(root: int) -> None:
    for pid, fd in _ATTACHED.pop(root, []):
        _PIDFDS.pop(pid, None)
        try:
            os.close(fd)
        except OSError:
            pass


def running(pids: list[int]) -> list[int]:
    """Those of pids that still run: neither gone nor zombies (a zombie's device memory is already released)."""
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                state = f.read().decode(errors="replace").rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X"):
            out.append(pid)
    return out


def name_self(role: str) -> None:
    """Name this process after its role ('evk-runner', 'evk-spare', 'evk-reference', 'evk-candidate': what ps,
    top and a sweep's per-process device memory show). prctl(PR_SET_NAME), which a non-dumpable process may
    still do (its /proc/self/comm is root's then). Informational only: agent code in a child can rename it, so
    nothing decides anything by it."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, ctypes.c_char_p(f"evk-{role}"[:15].encode()), 0, 0, 0)  # 15: PR_SET_NAME
    except (OSError, AttributeError):  # not Linux
        pass


def kill_once(pid: int, include_self: bool = True) -> int:
    """SIGKILL pid and every descendant found now (one pass, no waiting: kill_tree repeats until none is left);
    how many were signalled."""
    victims = descendants(pid) + ([pid] if include_self else [])
    for v in victims:
        try:
            if v in _PIDFDS:  # through its pidfd: never a process that took the number later
                signal.pidfd_send_signal(_PIDFDS[v], signal.SIGKILL)
            else:
                os.kill(v, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, OSError):
            pass
    return len(victims)


def kill_tree(pid: int, include_self: bool = True) -> None:
    """SIGKILL pid and every descendant (found through /proc, not the process group: setsid children
    are included), repeated until none is left (a fork racing the kill)."""
    for _ in range(5):
        if not kill_once(pid, include_self):
            return
        if not descendants(pid):
            return
        time.sleep(0.05)


def renice_tree(pid: int, value: int = 0) -> bool:
    """Set the nice value of every thread of pid and its descendants (on Linux it is per thread: a process's
    CUDA and profiler threads keep the value they started with); False where not allowed (lowering it needs
    privilege)."""
    try:
        for tid in tree_threads(pid):
            try:
                os.setpriority(os.PRIO_PROCESS, tid, value)
            except ProcessLookupError:  # a thread that ended meanwhile
                pass
    except (PermissionError, OSError):
        return False
    return True


def tree_threads(pid: int) -> list[int]:
    """Every thread of pid and its descendants (what per-thread settings, nice value and CPU affinity, must
    reach); a process whose threads cannot be listed counts as its main thread."""
    out: list[int] = []
    for p in [pid, *descendants(pid)]:
        try:
            out += [int(t) for t in os.listdir(f"/proc/{p}/task") if t.isdigit()] or [p]
        except OSError:
            out.append(p)
    return out


def reap_zombies() -> int:
    """Collect exited children that nobody else waits for (orphans re-parented to us: we are a
    subreaper). Only zombies found in /proc whose parent is us and that are not tracked by a Popen
    object (`owned`) are reaped: a blind waitpid(-1) would steal Popen's exit statuses."""
    me, n = os.getpid(), 0
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in _OWNED:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                rest = f.read().decode(errors="replace").rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if rest[0] == "Z" and int(rest[1]) == me:
            try:
                os.waitpid(int(name), os.WNOHANG)
                n += 1
            except ChildProcessError:
                pass
    return n


_OWNED: set[int] = set()


def own(pid: int) -> None:
    """Mark a child as waited for by its Popen object (reap_zombies leaves it alone)."""
    _OWNED.add(pid)


def disown(pid: int) -> None:
    _OWNED.discard(pid)


def tree_cpu(pid: int) -> tuple[float, tuple[int, ...], int] | None:
    """The CPU time of pid's process tree now: (ns of its live processes, every thread: each one's own CPU clock,
    read by the kernel, never by the process; the tree's members, zombies included; the clock ticks its members
    have collected from children they reaped). None where a clock cannot be read. A process that left or joined
    the tree, or a reaped child (whose time shows only in ticks), changes the second or third part: a caller
    comparing two readings takes their difference as the tree's work only while both are unchanged."""
    members = _tree(pid)
    if members is None:
        return None
    ns, reaped = 0, 0
    for p in members:
        try:
            with open(f"/proc/{p}/stat", "rb") as f:
                fields = f.read().decode(errors="replace").rsplit(")", 1)[1].split()
            reaped += int(fields[13]) + int(fields[14])  # cutime, cstime (fields 16 and 17 of proc(5))
            if fields[0] != "Z":
                ns += time.clock_gettime_ns(((~p) << 3) | 2)  # the process's CPU clock (CPUCLOCK_SCHED)
        except (OSError, ValueError, IndexError):
            return None
    return float(ns), tuple(sorted(members)), reaped


def _tree(pid: int) -> list[int] | None:
    """pid and its descendants, zombies included: from each thread's `children` file (a few files for a small
    tree), or where the kernel has none (CONFIG_PROC_CHILDREN), from every process's parent in /proc. None where
    pid is gone."""
    members, todo = [], [pid]
    try:
        while todo:
            p = todo.pop()
            members.append(p)
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children", "rb") as f:
                    todo.extend(int(x) for x in f.read().split())
            todo.extend(attached(p))
        return members
    except FileNotFoundError:
        if not os.path.exists(f"/proc/{pid}"):
            return None
    except (OSError, ValueError):
        return None
    return [pid, *descendants(pid, zombies=True)]
