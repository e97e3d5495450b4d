"""The process tree as /proc shows it now: who is whose child (no import of the sandbox or the limits, which
both walk it)."""

from __future__ import annotations

import os


def children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] == "Z":  # already dead; its parent reaps it
                continue
            ppid = int(fields[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(name))
    return kids


def descendants(pid: int) -> list[int]:
    kids, out, todo = children_map(), [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
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
