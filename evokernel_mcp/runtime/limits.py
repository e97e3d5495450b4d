"""Per-job limits on the processes that run agent code (candidates, references, profiled children): memory,
CPU time and processes, stated in every result (`limits`) and named in the error when one is hit.

- Memory: RLIMIT_DATA on every such process (its private writable memory: heap, anonymous mappings; a
  GPU process's address-space reservations are PROT_NONE and its device memory is not host memory, so
  CUDA/HIP keep working, where RLIMIT_AS would break them: a CUDA context reserves terabytes of address
  space). Where a cgroup hierarchy is writable here (cgroup v1 `memory`, or a delegated v2 directory:
  the cgroup setting) the whole process tree of the job is also held to the same figure (memory.max /
  memory.limit_in_bytes: shared memory and a tree of forks included), and an OOM kill there is read back
  from the cgroup's counters, so it is reported as `oom`, never as a crash.
- CPU time: RLIMIT_CPU per process (SIGXCPU, then SIGKILL 5 s later): reported as `timeout` naming it.
- Processes: a per-job `pids` cgroup where available; else RLIMIT_NPROC, which Linux counts per uid (every
  sandbox of uid 65534 on the host shares it): the result says which.

Settings (settings.py, read at each child's start): child_memory (EVOKERNEL_CHILD_MEMORY: bytes, or 512M / 8G;
"auto": half the host's RAM, at least 2 GiB; "off"), child_cpu_s (14400), child_pids (per job, 1024, where a
pids cgroup is available), cgroup ("auto", "off" or a cgroup v2 directory to create per-job cgroups in).
"""

from __future__ import annotations

import logging
import os
import re
import secrets
from pathlib import Path

from pydantic import Field

from evokernel_mcp import settings
from evokernel_mcp.models import Model
from evokernel_mcp.runtime.proctree import descendants

log = logging.getLogger(__name__)
NPROC = 4096  # RLIMIT_NPROC of a sandboxed process where no pids cgroup limits its job (counted per uid)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_bytes(raw: str | None, default: int | None) -> int | None:
    """'8G', '512M', '1048576' -> bytes; 'off'/'none'/'0' -> None; 'auto'/'' -> default. ValueError otherwise."""
    v = (raw or "auto").strip().lower()
    if v in ("auto", ""):
        return default
    if v in ("off", "none", "0"):
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?", v)
    if not m:
        raise ValueError(f"not a size: {raw!r} (use e.g. 8G, 512M or a number of bytes, or off)")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def _host_ram() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 16 << 30


def _setting_bytes(name: str, raw: str, default: int | None) -> int | None:
    try:
        return parse_bytes(raw, default)
    except ValueError as e:
        log.warning("%s: %s; using the default", name, e)
        return default


def memory_bytes() -> int | None:
    return _setting_bytes("EVOKERNEL_CHILD_MEMORY", settings.get().child_memory, max(2 << 30, _host_ram() // 2))


def cpu_s() -> int | None:
    return settings.get().child_cpu_s


def job_pids() -> int | None:
    return settings.get().child_pids


class Limits(Model):
    """The limits one process of agent code ran under (the same for every such process of the job)."""

    memory_bytes: int | None = Field(default=None, description="Host memory cap; None: none.")
    memory_scope: str = Field(default="", description="How it is enforced: 'RLIMIT_DATA per process' and, where "
                              "available, '+ cgroup (the process tree)'.")
    cpu_s: int | None = Field(default=None, description="CPU-time cap per process, seconds (RLIMIT_CPU).")
    processes: int | None = Field(default=None, description="Process/thread cap.")
    processes_scope: str = Field(default="", description="'job (pids cgroup)' or 'uid (RLIMIT_NPROC: shared by "
                                 "every sandbox of that uid on the host)'.")


# ---------------------------------------------------------------- cgroups
def _own_paths() -> dict[str, str]:
    """controller (or '' for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    out: dict[str, str] = {}
    try:
        text = Path("/proc/self/cgroup").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for c in parts[1].split(",") if parts[1] else [""]:
                out[c] = parts[2]
    return out


def _writable_dir(p: Path) -> bool:
    return p.is_dir() and os.access(p, os.W_OK | os.X_OK)


def _v1_base(controller: str, own: dict[str, str]) -> Path | None:
    mount = Path("/sys/fs/cgroup") / controller
    if not (mount / "cgroup.procs").exists():
        return None
    path = own.get(controller, "/").lstrip("/")
    base = mount / path if path and (mount / path).is_dir() else mount
    return base if _writable_dir(base) else None


def _v2_base(setting: str, own: dict[str, str]) -> Path | None:
    """A v2 dir whose children get memory and pids: named by the cgroup setting, or (auto) our own cgroup when
    it already delegates both controllers to its children (a systemd unit with Delegate=yes and a leaf)."""
    if setting not in ("auto", ""):
        base = Path(setting)
    else:
        root = Path("/sys/fs/cgroup")
        if not (root / "cgroup.subtree_control").exists() or "" not in own:
            return None
        base = root / own[""].lstrip("/")
    try:
        ctl = (base / "cgroup.subtree_control").read_text().split()
    except OSError:
        return None
    return base if {"memory", "pids"} <= set(ctl) and _writable_dir(base) else None


class JobCgroup:
    """The cgroup(s) of one child's process tree: memory and pids caps, its OOM-kill count, removal."""

    def __init__(self, dirs: dict[str, Path], v2: bool):
        self.dirs, self.v2 = dirs, v2
        self._kills_at_removal: int | None = None  # read before the dirs go (their counters go with them)

    @property
    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in dict.fromkeys(self.dirs.values())]

    def oom_kills(self) -> int:
        d = self.dirs.get("memory")
        if d is None:
            return 0
        if self._kills_at_removal is not None:
            return self._kills_at_removal
        name = "memory.events" if self.v2 else "memory.oom_control"
        try:
            for line in (d / name).read_text().splitlines():
                k, _, v = line.partition(" ")
                if k == "oom_kill":
                    return int(v)
        except (OSError, ValueError):
            pass
        if not self.v2:  # older v1 kernels have no oom_kill line: a hit of the limit is the sign
            try:
                return int((d / "memory.failcnt").read_text().strip()) and 1
            except (OSError, ValueError):
                return 0
        return 0

    def remove(self) -> None:
        if self._kills_at_removal is None:
            self._kills_at_removal = self.oom_kills()
        import time

        left = list(dict.fromkeys(self.dirs.values()))
        for _ in range(20):  # a killed process leaves its cgroup as it exits: moments after our wait returns
            for d in list(left):
                try:
                    os.rmdir(d)
                    left.remove(d)
                except FileNotFoundError:
                    left.remove(d)
                except OSError:
                    pass
            if not left:
                return
            time.sleep(0.05)


class _Plan:
    def __init__(self) -> None:
        self.setting = settings.get().cgroup.strip()
        own = _own_paths()
        self.v2 = None
        self.v1: dict[str, Path] = {}
        if self.setting.lower() != "off":
            self.v2 = _v2_base(self.setting, own)
            if self.v2 is None and self.setting in ("auto", ""):
                for c in ("memory", "pids"):
                    b = _v1_base(c, own)
                    if b is not None:
                        self.v1[c] = b
        for base in {*self.v1.values(), *([self.v2] if self.v2 else [])}:
            self._sweep(base)

    @staticmethod
    def _sweep(base: Path) -> None:
        """Remove job cgroups left by runners that were killed (empty by now: their processes are gone)."""
        for d in base.glob("evokernel-*"):
            pid = d.name.split("-")[1] if d.name.count("-") >= 2 else ""
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                try:
                    os.rmdir(d)
                except OSError:
                    pass

    def make(self) -> JobCgroup | None:
        MEMORY_BYTES, JOB_PIDS = memory_bytes(), job_pids()
        name = f"evokernel-{os.getpid()}-{secrets.token_hex(4)}"
        dirs: dict[str, Path] = {}
        try:
            if self.v2 is not None:
                d = self.v2 / name
                d.mkdir()
                dirs = {"memory": d, "pids": d}
                _write(d / "memory.max", MEMORY_BYTES or "max")
                _write(d / "memory.swap.max", 0 if MEMORY_BYTES else "max", missing_ok=True)
                _write(d / "pids.max", JOB_PIDS or "max")
                return JobCgroup(dirs, v2=True)
            for c, base in self.v1.items():
                d = base / name
                d.mkdir()
                dirs[c] = d
            if "memory" in dirs and MEMORY_BYTES:
                _write(dirs["memory"] / "memory.limit_in_bytes", MEMORY_BYTES)
                _write(dirs["memory"] / "memory.memsw.limit_in_bytes", MEMORY_BYTES, missing_ok=True)
            if "pids" in dirs and JOB_PIDS:
                _write(dirs["pids"] / "pids.max", JOB_PIDS)
        except OSError as e:
            log.warning("per-job cgroup not made here (%r): rlimits only", e)
            JobCgroup(dirs, self.v2 is not None).remove()
            return None
        return JobCgroup(dirs, v2=False) if dirs else None

    def describe(self, cg: JobCgroup | None) -> Limits:
        MEMORY_BYTES, JOB_PIDS = memory_bytes(), job_pids()
        mem = "RLIMIT_DATA per process" + (" + cgroup (the process tree)" if cg and "memory" in cg.dirs else "")
        per_job = cg is not None and "pids" in cg.dirs and JOB_PIDS
        return Limits(memory_bytes=MEMORY_BYTES, memory_scope=mem if MEMORY_BYTES else "none", cpu_s=cpu_s(),
                      processes=JOB_PIDS if per_job else NPROC,
                      processes_scope="job (pids cgroup)" if per_job else
                      "uid (RLIMIT_NPROC: shared by every sandbox of that uid on the host; no writable pids cgroup)")


def _write(path: Path, value, missing_ok: bool = False) -> None:
    try:
        path.write_text(str(value))
    except FileNotFoundError:
        if not missing_ok:
            raise
    except OSError:
        if not missing_ok:
            raise


_PLAN: list[_Plan] = []


def plan() -> _Plan:
    if not _PLAN:
        _PLAN.append(_Plan())
    return _PLAN[0]


def for_child() -> tuple[Limits, JobCgroup | None]:
    """The limits of a new child, and its cgroup (None where none can be made)."""
    p = plan()
    cg = p.make() if (p.v2 is not None or p.v1) else None
    return p.describe(cg), cg


def ref_cache_bytes() -> int | None:
    """Host memory the cached reference processes may hold together between jobs (the ref_cache_memory setting:
    default a quarter of the host's RAM; off: no budget)."""
    return _setting_bytes("ref_cache_memory", settings.get().ref_cache_memory, _host_ram() // 4)


def tree_rss(pid: int) -> int:
    """Resident bytes of a process and its descendants (0 for what is gone)."""
    total = 0
    for p in [pid, *descendants(pid)]:
        try:
            with open(f"/proc/{p}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
        except (OSError, ValueError, IndexError):
            pass
    return total


def current() -> Limits:
    """What a new child gets here (stated in results)."""
    p = plan()
    return p.describe(JobCgroup({c: Path("/") for c in p.v1} or ({"memory": p.v2, "pids": p.v2} if p.v2 else {}),
                                p.v2 is not None) if (p.v1 or p.v2) else None)


def preexec_limits(cgroup: JobCgroup | None):
    """Runs between fork and exec (sandbox.preexec): join the cgroup, then the per-process rlimits."""
    import resource

    procs = cgroup.procs_files if cgroup is not None else []
    MEMORY_BYTES, CPU_S = memory_bytes(), cpu_s()

    def fn() -> None:
        pid = str(os.getpid()).encode()
        for f in procs:
            fd = os.open(f, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)
        if MEMORY_BYTES:
            resource.setrlimit(resource.RLIMIT_DATA, (MEMORY_BYTES, MEMORY_BYTES))
        if CPU_S:
            resource.setrlimit(resource.RLIMIT_CPU, (CPU_S, CPU_S + 5))
    return fn


# ---------------------------------------------------------------- naming a hit limit
_HOST_OOM = ("memoryerror", "not enough memory", "cannot allocate memory", "can't allocate memory",
             "std::bad_alloc", "out of memory")
_DEVICE_OOM = ("cumemcreate failed", "cuda_error_out_of_memory", "hiperroroutofmemory", "cuda out of memory",
               "hip out of memory", "outofmemoryerror")


def gib(n: int | None) -> str:
    return "no limit" if n is None else f"{n / 2**30:.2f} GiB" if n >= 1 << 30 else f"{n / 2**20:.0f} MiB"


def attribute(kind: str, message: str, *, role: str, limits: Limits | None, cgroup: JobCgroup | None,
              killed_by: str | None) -> tuple[str, str, str | None]:
    """(kind, message, limit) for a child's failure: an OOM (its own MemoryError, the allocator's words, or the
    cgroup's OOM killer) is 'oom' naming the memory limit and the role; SIGXCPU is 'timeout' naming the
    CPU-time limit. Anything else passes through (limit None)."""
    lim = limits or Limits()
    mem = f"memory limit {gib(lim.memory_bytes)} ({lim.memory_scope})"
    low = message.lower()
    if killed_by == "SIGKILL" and cgroup is not None and cgroup.oom_kills() > 0:
        return "oom", f"the {role} process was killed by the out-of-memory killer: it went over its {mem}", mem
    if kind in ("exception", "bad_candidate", "crash", "oom", "harness") and any(m in low for m in _HOST_OOM) \
            and "cuda" not in low and "hip" not in low:
        return "oom", f"the {role} process ran out of host memory under its {mem}: {message}", mem
    if killed_by == "SIGXCPU":
        cpu = f"CPU-time limit {lim.cpu_s} s per process (RLIMIT_CPU)"
        return "timeout", f"the {role} process used up its {cpu} and was killed", cpu
    if kind == "oom" or any(m in low for m in _DEVICE_OOM):
        return "oom", f"the {role} process ran out of device memory: {message}", "the device's free memory"
    if kind == "timeout":
        return kind, f"the {role} process: {message}", "the job's wall-clock limit (timeout_s)"
    return kind, message, None


def killed_by(returncode: int | None) -> str | None:
    import signal

    if returncode is None or returncode == 0 or 0 < returncode <= 128:
        return None
    try:  # (bwrap exits 128 + n when the process it ran was killed by signal n)
        return signal.Signals(-returncode if returncode < 0 else returncode - 128).name
    except ValueError:
        return None
