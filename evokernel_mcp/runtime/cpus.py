"""Which CPUs a runner and a benchmark's timed arms run on.

The cpu_split setting (settings.py; no variable), one share of the host's CPUs per GPU, for everything that GPU's
runner starts (its spares and its jobs' processes): whole cores, in CPU order, split evenly. Two GPUs' streams of
candidates then never wait for each other's processes on a CPU (on the 2x H200 host, 16 small candidates on 2
GPUs: 22.0 s shared, 18.7 s split; the flagship's heavier candidates: the same either way).
- "auto" (default): the local pool splits when it has 2 GPUs or more and every share gets 8 CPUs or more; a Ray
  actor does not (it cannot know how many of its host's GPUs the executor uses).
- "even": split (the local pool over its GPUs; a Ray actor by its GPU's index over all of its host's GPUs).
- "off": every runner on every CPU.
The local pool passes each runner its share (_EVOKERNEL_RUNNER_CPUS, internal, applied by the runner before
anything else); a Ray actor puts it in its own environment for the runner it starts.

A host-timed (CPU backend) benchmark runs all of its timed arms on one CPU, the last free one of the runner's
CPUs, each CPU claimed by one job at a time host-wide (claim_arm_cpu()).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os

log = logging.getLogger(__name__)


def allowed() -> frozenset[int]:
    """The CPUs this process may run on."""
    return frozenset(os.sched_getaffinity(0))


def parse_list(text: str) -> frozenset[int]:
    """A Linux CPU list ("0-3,8,10-11") as a set; ValueError when malformed."""
    out: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        a, b = int(lo), int(hi or lo)
        if a < 0 or b < a:
            raise ValueError(f"bad CPU range {part!r}")
        out.update(range(a, b + 1))
    return frozenset(out)


def _core_of(cpu: int) -> frozenset[int]:
    try:
        with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as f:
            return parse_list(f.read().strip())
    except (OSError, ValueError):
        return frozenset({cpu})


def cores(cpus: frozenset[int]) -> list[frozenset[int]]:
    """The physical cores among cpus (each a set of its hyperthreads within cpus), in CPU order."""
    seen: dict[frozenset[int], None] = {}
    for c in sorted(cpus):
        seen.setdefault(_core_of(c) & cpus or frozenset({c}), None)
    return list(seen)


RUNNER_CPUS = "_EVOKERNEL_RUNNER_CPUS"  # internal: a runner's share, from the pool or a Ray actor


def release_tree(pid: int) -> bool:
    """Let every thread of pid and its descendants run on every CPU of this process again (after pin_tree).
    False where not allowed."""
    return _set_tree(pid, allowed())


def _set_tree(pid: int, target: frozenset[int] | set[int]) -> bool:
    """Every thread of pid and its descendants on `target` (threads started later inherit it); False where a
    thread could not be moved."""
    from evokernel_mcp.runtime.sandbox import tree_threads

    ok = True
    for tid in tree_threads(pid):
        try:
            os.sched_setaffinity(tid, target)
        except ProcessLookupError:  # a thread that ended meanwhile
            pass
        except OSError:
            ok = False
    return ok


def arm_cpus() -> list[int]:
    """The CPUs a host-timed (CPU backend) benchmark may run all of its timed arms on, in the order tried: this
    process's CPUs from the last, where there are 2 or more. Rounds interleave the arms, so drift in time
    cancels; what does not cancel is a difference between CPUs that lasts (a VM's vCPU losing time to its
    host, a busy sibling hyperthread, a slower clock) when the scheduler keeps one arm on one CPU and another
    arm on another (CI read identical code 3-10 % slower in one arm). On one CPU, every arm sees the same one."""
    every = allowed()
    return sorted(every, reverse=True) if len(every) >= 2 else []


@contextlib.contextmanager
def claim_arm_cpu():
    """The CPU for one benchmark's timed arms, claimed for as long as the context lasts: a lock per CPU in the
    state dir (hidden from children), shared by every runner that uses it (the local pool's, Ray actors' of
    the same user and home), so that two jobs timing at once get two CPUs. Yields None (arms not pinned) when
    pinning is off or every CPU it may use is claimed."""
    from evokernel_mcp.paths import sub_state_dir

    fd = None
    try:
        for cpu in arm_cpus():
            try:
                path = sub_state_dir("cpu-locks") / f"cpu{cpu}.lock"
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # claimed by another job (or no lock to be had here): the next one
                if fd is not None:
                    os.close(fd)
                fd = None
                continue
            yield cpu
            return
        yield None
    finally:
        if fd is not None:
            os.close(fd)  # the lock goes with the descriptor


def pin_tree(pid: int, cpu: int) -> bool:
    """Keep every thread of pid and its descendants on one CPU. False where not allowed."""
    return _set_tree(pid, {cpu})


MIN_SHARE_CPUS = 8  # "auto" splits only where every GPU's share gets at least this many CPUs


def split_setting() -> str:
    """off | even | auto (default): the cpu_split setting."""
    from evokernel_mcp import settings

    return settings.get().cpu_split


def device_share(index: int, count: int, cpus: frozenset[int] | None = None) -> frozenset[int]:
    """The index-th of `count` even shares of cpus (default: this process's), whole cores in CPU order; all of
    them when there are fewer cores than shares."""
    every = allowed() if cpus is None else cpus
    cs = cores(every)
    if count <= 1 or len(cs) < count or not 0 <= index < count:
        return every
    per = len(cs) / count
    return frozenset().union(*cs[round(index * per):round((index + 1) * per)])


def format_list(cpus: frozenset[int]) -> str:
    """A CPU set as a Linux CPU list ("0-3,8")."""
    out, run = [], []
    for c in sorted(cpus):
        if run and c != run[-1] + 1:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(c)
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def apply_runner_cpus() -> frozenset[int] | None:
    """In a runner: keep to RUNNER_CPUS (its GPU's share, from the pool) before starting anything; the spares
    and jobs it starts inherit it. None when unset or not allowed."""
    text = os.environ.get(RUNNER_CPUS, "").strip()
    if not text:
        return None
    try:
        share = parse_list(text) & allowed()
        if share:
            os.sched_setaffinity(0, share)
            return share
    except (ValueError, OSError) as e:
        log.warning("%s=%r not applied: %s", RUNNER_CPUS, text, e)
    return None
