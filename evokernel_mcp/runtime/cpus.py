"""Which CPUs a spare boots on. A spare's start (torch import, device context, profiler) is off every job's
clock but not off the host: on a GPU host running a batch, dozens of them boot while jobs verify and time.
Niceness orders them behind the jobs on a shared CPU, but not on the sibling hyperthread of the CPU a job runs
on, nor in the caches they share. With EVOKERNEL_SPARE_CPUS a share of the host's cores (whole cores, both
hyperthreads) is kept free of spare starts, and a job's processes may use every CPU once taken.

EVOKERNEL_SPARE_CPUS:
- "all" (default): spares boot on every CPU this process may use.
- "auto": keep a quarter of the cores (at least one, whole cores) for jobs, on hosts of 8 CPUs or more.
- a CPU list ("0-23,32-55"): spares boot on those CPUs only.

EVOKERNEL_JOB_CPUS, where a taken spare (a job's process) may run: every CPU (default), "rest" (those spares
do not boot on), or a CPU list. Where the host hides its hyperthreads (a VM reporting one thread per core; see
bench/ht_probe.py), give both lists, siblings together.

EVOKERNEL_ARM_CPU: a host-timed (CPU backend) benchmark runs all of its timed arms on one CPU, the last of the
job's CPUs unless told ("off", or a CPU number), each CPU claimed by one job at a time host-wide; see
claim_arm_cpu().

EVOKERNEL_CPU_SPLIT, one share of the host's CPUs per GPU, for everything that GPU's runner starts (its spares
and its jobs' processes): whole cores, in CPU order, split evenly. Two GPUs' streams of candidates then never
wait for each other's processes on a CPU (on the 2x H200 host, 16 small candidates on 2 GPUs: 22.0 s shared,
18.7 s split; the flagship's heavier candidates: the same either way).
- "auto" (default): the local pool splits when it has 2 GPUs or more and every share gets 8 CPUs or more; a Ray
  actor does not (it cannot know how many of its host's GPUs the executor uses).
- "even": split (the local pool over its GPUs; a Ray actor by its GPU's index over all of its host's GPUs).
- "off": every runner on every CPU.
The local pool passes each runner its share (EVOKERNEL_RUNNER_CPUS, applied by the runner before anything
else); a Ray actor puts it in its own environment for the runner it starts.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
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


def reserve_for_jobs(cpus: frozenset[int], share: float = 0.25) -> frozenset[int]:
    """The CPUs kept free of spare starts under "auto": the last whole cores, a `share` of them (at least one);
    none on hosts of fewer than 8 CPUs, where every CPU is needed to start spares at all."""
    if len(cpus) < 8:
        return frozenset()
    cs = cores(cpus)
    n = max(1, int(len(cs) * share))
    return frozenset().union(*cs[-n:])


@functools.lru_cache(maxsize=1)
def _spare_cpus(setting: str, allowed_now: frozenset[int]) -> frozenset[int] | None:
    if setting in ("", "all"):
        return None
    if setting == "auto":
        keep = reserve_for_jobs(allowed_now)
        boot = allowed_now - keep
    else:
        try:
            boot = parse_list(setting) & allowed_now
        except ValueError as e:
            log.warning("EVOKERNEL_SPARE_CPUS=%r: %s; spares boot on every CPU", setting, e)
            return None
    if not boot or boot == allowed_now:
        return None
    log.info("spares boot on %d of %d CPUs (EVOKERNEL_SPARE_CPUS=%s)", len(boot), len(allowed_now), setting)
    return boot


def spare_cpus() -> frozenset[int] | None:
    """The CPUs a spare boots on, or None for no restriction."""
    return _spare_cpus(os.environ.get("EVOKERNEL_SPARE_CPUS", "all").strip().lower(), allowed())


def job_cpus() -> frozenset[int]:
    """Where a job's processes run (EVOKERNEL_JOB_CPUS): every CPU unless told."""
    setting = os.environ.get("EVOKERNEL_JOB_CPUS", "all").strip().lower()
    every = allowed()
    if setting in ("", "all"):
        return every
    if setting == "rest":
        boot = spare_cpus()
        return every - boot if boot and every - boot else every
    try:
        return parse_list(setting) & every or every
    except ValueError as e:
        log.warning("EVOKERNEL_JOB_CPUS=%r: %s; jobs run on every CPU", setting, e)
        return every


def release_tree(pid: int) -> bool:
    """Let every thread of pid and its descendants run on job_cpus(), as a job takes a spare. False where not
    allowed."""
    return _set_tree(pid, job_cpus())


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
    """The CPUs a host-timed (CPU backend) benchmark may run all of its timed arms on, in the order tried,
    EVOKERNEL_ARM_CPU: "auto" (default): the job's CPUs from the last, where there are 2 or more; "off"; or a
    CPU number. Rounds interleave the arms, so drift in time cancels; what does not cancel is a difference
    between CPUs that lasts (a VM's vCPU losing time to its host, a busy sibling hyperthread, a slower clock)
    when the scheduler keeps one arm on one CPU and another arm on another. On one CPU, every arm sees the
    same one."""
    setting = os.environ.get("EVOKERNEL_ARM_CPU", "auto").strip().lower()
    if setting in ("off", "none", ""):
        return []
    every = job_cpus()
    if setting == "auto":
        return sorted(every, reverse=True) if len(every) >= 2 else []
    try:
        cpu = int(setting)
    except ValueError:
        log.warning("EVOKERNEL_ARM_CPU=%r is not off, auto or a CPU number; arms are not pinned", setting)
        return []
    return [cpu] if cpu in every else []


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
    """off | even | auto (default); anything else reads as off."""
    value = os.environ.get("EVOKERNEL_CPU_SPLIT", "auto").strip().lower()
    return value if value in ("off", "even", "auto") else "off"


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
    """In a runner: keep to EVOKERNEL_RUNNER_CPUS (its GPU's share, from the pool) before starting anything; the
    spares and jobs it starts inherit it. None when unset or not allowed."""
    text = os.environ.get("EVOKERNEL_RUNNER_CPUS", "").strip()
    if not text:
        return None
    try:
        share = parse_list(text) & allowed()
        if share:
            os.sched_setaffinity(0, share)
            return share
    except (ValueError, OSError) as e:
        log.warning("EVOKERNEL_RUNNER_CPUS=%r not applied: %s", text, e)
    return None
