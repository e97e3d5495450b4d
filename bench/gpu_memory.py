"""Device memory of our processes while a sweep runs: per-process readings (pynvml or nvidia-smi) summed over
this process's tree, sampled in a thread with each phase's peak, the largest reading of one child process, and a
ballast process that holds part of the device. Used by bench/kernelbench_sweep.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterable

# The roles of the children that run a problem's forward (runtime/proctree.name_self): the reference and the
# candidate. Spares and the runner do not run it.
FORWARD_ROLES = ("evk-reference", "evk-candidate")


def busiest_child_mib(readings: Iterable[tuple[str, float]]) -> float | None:
    """The largest reading among (process name, MiB) pairs whose name is a forward role; None if there is none."""
    vals = [v for name, v in readings if name.split(":", 1)[0] in FORWARD_ROLES]
    return max(vals) if vals else None


def timeline_busiest_child_mib(timeline: list) -> float | None:
    """busiest_child_mib over every sample of a timeline ([time, phase, ours MiB, {name:pid: MiB}])."""
    vals = [v for t in timeline if (v := busiest_child_mib(t[3].items())) is not None]
    return max(vals) if vals else None


def _tree(root: int) -> set[int]:
    """root and every descendant (ppid links from /proc: the runner, its sandboxed children, their children)."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(d))
    out, todo = set(), [root]
    while todo:
        p = todo.pop()
        if p not in out:
            out.add(p)
            todo += kids.get(p, [])
    return out


def _comm(pid: int) -> str:
    """The process's name: our runner and children name themselves after their role (evk-runner, evk-spare,
    evk-reference, evk-candidate: runtime/proctree.name_self)."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


_NVML: list = []  # [pynvml once initialised, or None where it is not installed or finds no driver]


def _nvml():
    """pynvml, initialised once (None without it or without NVML): readings in process, microseconds each."""
    if not _NVML:
        try:
            import pynvml

            pynvml.nvmlInit()
            _NVML.append(pynvml)
        except Exception:  # noqa: BLE001 - not installed, or no NVML
            _NVML.append(None)
    return _NVML[0]


def per_process_mib() -> dict[int, float] | None:
    """{pid: device MiB} of every compute process (pynvml where installed, else nvidia-smi); None without either."""
    try:
        pynvml = _nvml()
        if pynvml is None:
            raise RuntimeError("no NVML")
        out: dict[int, float] = {}
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                out[p.pid] = out.get(p.pid, 0.0) + (p.usedGpuMemory or 0) / 2**20
        return out
    except Exception:  # noqa: BLE001 - not installed, or no NVML: nvidia-smi
        pass
    if not shutil.which("nvidia-smi"):
        return None
    try:
        text = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    out = {}
    for line in text.splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            try:
                out[int(parts[0])] = out.get(int(parts[0]), 0.0) + float(parts[1])
            except ValueError:
                continue
    return out


def ours_mib(readings: dict[int, float], tree: set[int], exclude: set[int]) -> float | None:
    """Device MiB of our processes together (None when no reading is of a process of ours)."""
    mine = [v for pid, v in readings.items() if pid in tree and pid not in exclude]
    return sum(mine) if mine else None


class GpuMemSampler:
    """Peaks sampled in a thread: the device's used memory (nvidia-smi / amd-smi, the whole device) and the sum
    over our own processes (per_process_mib filtered to this process's tree, `exclude` left out)."""

    def __init__(self, period_s: float = 0.2, exclude: set[int] | None = None, timeline: bool = False):
        self.period_s, self.peak_mib, self.peak_ours_mib, self._stop = period_s, None, None, threading.Event()
        self.timeline: list | None = [] if timeline else None  # [unix s, phase, ours MiB, {name:pid: MiB},
        # device used MiB, {pid: MiB} of processes not ours]
        self.exclude = exclude or set()
        self.phase = "start"  # set by the sweep before each call: the peak of our processes is kept per phase
        self.by_phase: dict[str, dict] = {}  # {phase: {"peak_mib", "processes": [[name, MiB] of ours at it]}}
        self.peak_one_child_mib: float | None = None  # the largest reading of one reference or candidate child
        self.tool = "nvidia-smi" if shutil.which("nvidia-smi") else None

    def _read(self) -> float | None:
        try:  # NVML in process where installed, else an nvidia-smi process
            pynvml = _nvml()
            if pynvml is None:
                raise RuntimeError("no NVML")
            return max(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).used / 2**20
                       for i in range(pynvml.nvmlDeviceGetCount()))
        except Exception:  # noqa: BLE001 - not installed, or no NVML
            pass
        try:
            out = subprocess.run([self.tool, "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=5).stdout
            return max(float(x) for x in out.split())
        except (OSError, ValueError, subprocess.SubprocessError):
            return None

    def _loop(self) -> None:
        me = os.getpid()
        while not self._stop.is_set():
            dev = self._read()
            if dev is not None:
                self.peak_mib = dev if self.peak_mib is None else max(self.peak_mib, dev)
            per = per_process_mib()
            tree = _tree(me)
            o = ours_mib(per, tree, self.exclude) if per else None
            if o is not None:
                self.peak_ours_mib = o if self.peak_ours_mib is None else max(self.peak_ours_mib, o)
                roles = {f"{_comm(pid)}:{pid}": v for pid, v in per.items() if pid in tree and pid not in self.exclude}
                ph = self.by_phase.get(self.phase)
                if ph is None or o > ph["peak_mib"]:
                    mine = sorted(((k.rsplit(":", 1)[0], v) for k, v in roles.items()), key=lambda x: -x[1])
                    self.by_phase[self.phase] = {"peak_mib": o, "processes": mine}
                one = busiest_child_mib(roles.items())
                if one is not None and (self.peak_one_child_mib is None or one > self.peak_one_child_mib):
                    self.peak_one_child_mib = one
                if self.timeline is not None:  # + the device's used MiB and other processes' ({pid: MiB})
                    others = {str(pid): v for pid, v in per.items() if pid not in tree or pid in self.exclude}
                    self.timeline.append([round(time.time(), 2), self.phase, o, roles, dev, others])
            self._stop.wait(self.period_s)

    def __enter__(self) -> "GpuMemSampler":
        if self.tool:
            self._t = threading.Thread(target=self._loop, daemon=True)
            self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self.tool:
            self._t.join(timeout=10)


BALLAST = """
import sys, torch
x = torch.empty(int(float(sys.argv[1]) * 1e9), dtype=torch.uint8, device="cuda")
x.fill_(1)
torch.cuda.synchronize()
print("ready", flush=True)
sys.stdin.read()  # held until the sweep closes our stdin (or ends)
"""


class Ballast:
    """A separate process holding `gb` GB of the device (torch.empty) for the sweep's duration."""

    def __init__(self, gb: float):
        self.gb, self.proc = gb, None

    def __enter__(self) -> "Ballast":
        if self.gb > 0:
            self.proc = subprocess.Popen([sys.executable, "-c", BALLAST, str(self.gb)], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True)
            if self.proc.stdout.readline().strip() != "ready":
                raise SystemExit(f"the ballast process could not hold {self.gb} GB of the device")
            print(f"ballast: process {self.proc.pid} holds {self.gb} GB of the device", flush=True)
        return self

    @property
    def pids(self) -> set[int]:
        return {self.proc.pid} if self.proc else set()

    def __exit__(self, *exc) -> None:
        if self.proc:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


