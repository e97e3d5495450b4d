"""What the kernel says of a process, for the zygote (runtime/zygote.py): the stub it may serve (facts(),
servable()), and the process it made, read back after the switch into the stub's sandbox (unlike())."""

from __future__ import annotations

import os

from evokernel_mcp.runtime.zygote_models import PER_CHILD_ENV, StubHello

NAMESPACES = ("mnt", "uts", "ipc", "net", "cgroup", "pid", "user")
STATUS_FIELDS = ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp")
MAX_FDS = 16


def status(pid: str) -> dict[str, str]:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in STATUS_FIELDS:
                out[k] = " ".join(v.split())
    return out


def namespaces(pid: str) -> dict[str, str]:
    return {n: os.readlink(f"/proc/{pid}/ns/{n}") for n in NAMESPACES}


def rlimits(pid: str) -> dict[int, tuple[int, int]]:
    """Every rlimit of pid, from /proc/<pid>/limits (prlimit() on another process needs CAP_SYS_RESOURCE, which
    a container's root may lack): its lines are in the order of the resources' numbers."""
    import resource

    out = {}
    with open(f"/proc/{pid}/limits") as f:
        rows = f.read().splitlines()[1:]
    for number, row in enumerate(rows):
        soft, hard = row[26:].split()[:2]
        out[number] = tuple(resource.RLIM_INFINITY if v == "unlimited" else int(v) for v in (soft, hard))
    return out


def facts(pid: int) -> dict:
    """What the kernel says of the stub (read before anything is changed here)."""
    return {"status": status(str(pid)), "ns": namespaces(str(pid)), "rlimits": rlimits(str(pid)),
            "cpus": sorted(os.sched_getaffinity(pid)), "nice": os.getpriority(os.PRIO_PROCESS, pid)}


def servable(facts: dict, hello: StubHello) -> str:
    """'' where this stub may be served, else why not."""
    st = facts["status"]
    uids, gids = st["Uid"].split(), st["Gid"].split()
    if len(set(uids)) != 1 or len(set(gids)) != 1 or uids[0] == "0":
        return f"uids {uids}, gids {gids}: not one unprivileged uid"
    if st["Groups"] or st["NoNewPrivs"] != "1" or st["Seccomp"] != "0":
        return f"groups {st['Groups']!r}, no_new_privs {st['NoNewPrivs']}, seccomp {st['Seccomp']}"
    if any(int(st[c], 16) for c in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")):
        return "the stub holds capabilities"
    if facts["ns"]["user"] != os.readlink("/proc/self/ns/user"):
        return "the sandbox has a user namespace of its own"
    mine = {k: v for k, v in os.environ.items() if k not in PER_CHILD_ENV}
    theirs = {k: v for k, v in hello.env.items() if k not in PER_CHILD_ENV}
    if mine != theirs:
        names = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
        return "its environment differs from the zygote's in " + ", ".join(names[:5])
    if not 0 < len(hello.fds) <= MAX_FDS or {0, 1, 2} - set(hello.fds):
        return f"descriptors {hello.fds}"
    return ""


def unlike(facts: dict, hello: StubHello, link: int) -> list[str]:
    """Where this process (after the switch) differs from the stub: the fields the kernel reports."""
    me = {"status": status("self"), "ns": namespaces("self"), "rlimits": rlimits("self"),
          "cpus": sorted(os.sched_getaffinity(0)), "nice": os.getpriority(os.PRIO_PROCESS, 0)}
    odd = [k for k in ("status", "ns", "rlimits", "cpus", "nice") if me[k] != facts[k]]
    if os.getcwd() != hello.cwd:
        odd.append("cwd")
    have = {int(fd) for fd in os.listdir("/proc/self/fd")}  # the listing's own descriptor among them
    if not set(hello.fds) <= have or len(have - set(hello.fds) - {link}) > 1:
        odd.append(f"descriptors {sorted(have)}")
    return odd
