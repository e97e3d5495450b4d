"""How a process that runs agent code is started and contained (the trust model in docs/security.md).

Levels, best first (the first that works on this host is used; `doctor` and every result name it):
- "bwrap+uid": bubblewrap (Debian `bubblewrap`): a read-only view of the system (/usr, /lib, /etc, the
  Python install, our package), /root, /home, /tmp, the state dir and any secret file hidden, a private
  writable scratch dir as cwd/HOME/TMPDIR, device nodes bound in, new pid/ipc/net/uts namespaces
  (nothing of the server is visible; no network), all capabilities dropped, and, when the server runs
  as root, the agent's process switched to the unprivileged uid 65534 inside (setpriv) before any
  agent code runs. Killing bwrap (or its parent dying: --die-with-parent) ends the pid namespace,
  so every process of the job dies, setsid children included.
- "bwrap": the same without the uid switch (the server is not root, or setpriv is missing).
- "process": no bwrap here: a fresh process in its own session, minimal environment, scratch as
  cwd/HOME/TMPDIR, rlimits, uid 65534 when root and the Python install is readable to it, parent-death
  signal; the tree (found through /proc; the runner is a child subreaper) is killed at the end. The
  filesystem is NOT hidden at this level: say so.
Every level: an environment allow-list (no server secrets), rlimits (file size, processes, core
dumps; CPU time when asked), stdout/stderr to capped files in the scratch dir.
"""

from __future__ import annotations

import ctypes
import logging
import os
import resource
import shutil
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

from evokernel_mcp import settings
from evokernel_mcp.paths import REPO_DIR, state_dir
from evokernel_mcp.runtime import limits as job_limits
from evokernel_mcp.runtime.envs import ENV_ALLOW, hidden_files, is_secret_name
from evokernel_mcp.runtime.limits import NPROC
from evokernel_mcp.runtime.proctree import children_map as _children_map  # noqa: F401 - re-exported
from evokernel_mcp.runtime.proctree import (  # noqa: F401 - re-exported: callers kill, renice and reap through here
    descendants,
    disown,
    kill_once,
    kill_tree,
    own,
    reap_zombies,
    renice_tree,
    tree_threads,
)

log = logging.getLogger(__name__)

NOBODY = 65534
FSIZE_BYTES = 256 * 1024 * 1024  # the largest file a sandboxed process may write
GPU_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset", "/dev/kfd",
             "/dev/dri")
SYSTEM_RO = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/opt", "/sys")
HIDDEN_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/sudoers")
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER, PR_SET_DUMPABLE = 1, 36, 4


@dataclass
class Spec:
    """One sandboxed process: its argv (inside), scratch dir, extra binds and environment."""

    argv: list[str]
    scratch: Path
    env: dict[str, str] = field(default_factory=dict)
    ro_binds: list[str] = field(default_factory=list)
    rw_binds: list[str] = field(default_factory=list)
    devices: bool = False
    cpu_s: int | None = None
    net: bool = False


def bwrap_path() -> str | None:
    if settings.get().sandbox == "process":
        return None
    from evokernel_mcp import executables

    return executables.find("bwrap")


def base_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The allow-listed environment: no tokens, keys or server settings ever reach agent code."""
    env = {k: os.environ[k] for k in ENV_ALLOW if k in os.environ and not is_secret_name(k)}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["PYTHONPATH"] = python_path()
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra or {})
    return env


def python_path() -> str:
    """Our package plus the server's PYTHONPATH entries that exist (e.g. carried wheels on a GPU host)."""
    parts = [str(REPO_DIR)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    seen: list[str] = []
    for p in parts:
        if p not in seen and os.path.isdir(p):
            seen.append(p)
    return os.pathsep.join(seen)


def python_roots() -> list[str]:
    """Directories the interpreter and its packages live in (bound read-only into the sandbox)."""
    roots = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    roots.update(p for p in sys.path if p and os.path.isdir(p))
    roots.update(python_path().split(os.pathsep))
    state = str(state_dir()).rstrip("/")
    keep = sorted(r for r in roots if r.startswith("/") and r not in ("/", "/tmp", "/root", "/home")
                  and not any(r == s or r.startswith(s + "/") for s in SYSTEM_RO)
                  and not (r == state or r.startswith(state + "/")))
    return [r for r in keep if not any(r != o and r.startswith(o.rstrip("/") + "/") for o in keep)]


def _secret_paths() -> list[str]:
    """Files and dirs agent code must never see even read-only: the state dir, the server's token file and
    every file the server marked secret (runtime/envs.hidden_files)."""
    return [str(state_dir()), *hidden_files()]


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _dirs_for(path: str, mounts: dict[str, str], args: list[str]) -> None:
    """--dir (0755) for each ancestor of a mount target that does not exist in the sandbox yet, so the
    uid inside can traverse it (bwrap would make it 0700). `mounts` maps each mount point so far to
    "bind" or "dir" (a tmpfs or a made dir); an ancestor whose deepest enclosing mount is a bind exists
    already (nothing is created inside a bind)."""
    parts = Path(path).parts
    for i in range(2, len(parts)):
        anc = str(Path(*parts[:i]))
        if anc in mounts:
            continue
        owners = [m for m in mounts if _under(anc, m)]
        if owners and mounts[max(owners, key=len)] == "bind":
            continue
        mounts[anc] = "dir"
        args += ["--perms", "0755", "--dir", anc]


def bwrap_argv(spec: Spec, exe: str, drop_uid: bool) -> list[str]:
    args = [exe, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try"]
    if not spec.net:
        args.append("--unshare-net")
    for d in SYSTEM_RO:
        if os.path.exists(d):
            args += ["--ro-bind", d, d]
    for f in HIDDEN_FILES:
        if os.path.exists(f):
            args += ["--ro-bind", "/dev/null", f]
    args += ["--proc", "/proc", "--dev", "/dev"]
    if spec.devices:
        for node in _gpu_nodes():
            args += ["--dev-bind", node, node]
    args += ["--perms", "1777", "--tmpfs", "/tmp", "--perms", "0755", "--tmpfs", "/root",
             "--perms", "0755", "--tmpfs", "/home", "--perms", "0755", "--tmpfs", "/run"]
    mounts: dict[str, str] = {d: "bind" for d in SYSTEM_RO}
    mounts.update({d: "dir" for d in ("/tmp", "/root", "/home", "/run")})
    for p in python_roots():
        if os.path.exists(p):
            _dirs_for(p, mounts, args)
            args += ["--ro-bind", p, p]
            mounts[p] = "bind"
    for secret in _secret_paths():  # after the read-only roots (one may contain it), before the scratch
        if os.path.isdir(secret):
            _dirs_for(secret, mounts, args)
            args += ["--perms", "0755", "--tmpfs", secret]
            mounts = {m: k for m, k in mounts.items() if not _under(m, secret)}
            mounts[secret] = "dir"
    for kind, p in [("--ro-bind", b) for b in spec.ro_binds] + [("--bind", b) for b in [str(spec.scratch)]
                                                                  + spec.rw_binds]:
        if kind == "--ro-bind" and any(_under(p, r) and mounts.get(r) == "bind" for r in SYSTEM_RO):
            continue  # already visible (read-only) through a system dir; a path through a link (/usr/local/cuda
            # -> cuda-13.0) could not be made again inside it
        if os.path.exists(p):
            _dirs_for(p, mounts, args)
            args += [kind, p, p]
            mounts[p] = "bind"
    for secret in _secret_paths():  # a secret file inside anything bound (last: no later bind shows it again)
        owners = [m for m in mounts if _under(secret, m)]
        if os.path.isfile(secret) and owners and mounts[max(owners, key=len)] == "bind":
            args += ["--ro-bind", "/dev/null", secret]
    args += ["--chdir", str(spec.scratch), "--clearenv"]
    for k, v in spec.env.items():
        args += ["--setenv", k, v]
    if drop_uid:
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--", _setpriv(),
                 f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--inh-caps=-all",
                 "--bounding-set=-all", "--"]
    else:
        args.append("--")
    return args + spec.argv


def _setpriv() -> str:
    return shutil.which("setpriv") or "/usr/bin/setpriv"


def _gpu_nodes() -> list[str]:
    nodes = [n for n in GPU_NODES if os.path.exists(n)]
    try:
        nodes += sorted(f"/dev/{n}" for n in os.listdir("/dev") if n.startswith("nvidia") and n[6:].isdigit())
    except OSError:
        pass
    return nodes


def level_candidates() -> list[str]:
    """Isolation levels to try on this host, best first."""
    out = []
    if bwrap_path():
        if os.geteuid() == 0 and shutil.which("setpriv"):
            out.append("bwrap+uid")
        out.append("bwrap")
    out.append("process")
    return out


def argv_for(spec: Spec, level: str) -> list[str]:
    if level.startswith("bwrap"):
        exe = bwrap_path()
        if exe is None:
            raise RuntimeError("bwrap is not available")
        return bwrap_argv(spec, exe, drop_uid=level == "bwrap+uid")
    return list(spec.argv)


def scratch_owner(level: str) -> int | None:
    """The uid the sandboxed process runs as when it differs from ours (root dropping to nobody), else None."""
    if os.geteuid() == 0 and (level == "bwrap+uid" or level == "process" and process_level_drops_uid()):
        return NOBODY
    return None


def prepare_scratch(scratch: Path, level: str) -> None:
    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / "tmp").mkdir(exist_ok=True)
    owner = scratch_owner(level)
    if owner is not None:
        for p in (scratch, scratch / "tmp"):
            os.chown(p, owner, owner)
        os.chmod(scratch, 0o700)


def preexec(level: str, cpu_s: int | None, nice: int = 0, limits=None):
    """Runs in the child between fork and exec: rlimits, parent-death signal, niceness, uid switch (process
    level). `limits`: limits.preexec_limits(...) (the job's cgroup, memory and CPU time)."""
    def fn() -> None:
        if limits is not None:
            limits()
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if nice:
            os.nice(nice)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE_BYTES, FSIZE_BYTES))
        resource.setrlimit(resource.RLIMIT_NPROC, (NPROC, NPROC))
        if cpu_s:
            resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 5))
        if level == "process" and process_level_drops_uid():
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
    return fn


def _world_can_reach(path: str) -> bool:
    """Can an unprivileged user (other) traverse to and execute/read this path? (mode bits only)"""
    import stat

    p = Path(os.path.realpath(path))
    for part in [*reversed(p.parents), p]:
        try:
            mode = os.stat(part).st_mode
        except OSError:
            return False
        if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
            return False
    return bool(os.stat(p).st_mode & stat.S_IROTH)


def process_level_drops_uid() -> bool:
    """At the 'process' level a root server runs agent code as uid 65534 when that uid can reach the
    interpreter and our package; otherwise it stays root (reported in the isolation notes)."""
    if os.geteuid() != 0:
        return False
    return all(_world_can_reach(p) for p in (sys.executable, str(REPO_DIR / "evokernel_mcp" / "__init__.py")))


def _prctl(option: int, arg: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def become_subreaper() -> None:
    """Orphans of our children (setsid'd grandchildren too) are re-parented to us, so kill_tree finds them."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


def not_dumpable() -> None:
    """No same-uid process may ptrace us or read our memory (/proc/<pid>/mem)."""
    _prctl(PR_SET_DUMPABLE, 0)


_TOOL_LEVEL: list[str] = []


def tool_level() -> str:
    """The best isolation level that runs a plain command here (probed once per process, ~50 ms)."""
    import subprocess
    import tempfile

    if settings.get().sandbox == "process":
        return "process"
    if _TOOL_LEVEL:
        return _TOOL_LEVEL[0]
    for level in level_candidates():
        if level == "process":
            break
        d = Path(tempfile.mkdtemp(prefix="evk-probe-", dir=str(state_dir())))
        try:
            prepare_scratch(d, level)
            argv = argv_for(Spec(argv=["/bin/true"], scratch=d, env=base_env()), level)
            if subprocess.run(argv, capture_output=True, timeout=30).returncode == 0:
                _TOOL_LEVEL.append(level)
                return level
            log.warning("isolation %s does not run here; trying the next level", level)
        except (OSError, subprocess.SubprocessError) as e:
            log.warning("isolation %s does not run here (%r); trying the next level", level, e)
        finally:
            shutil.rmtree(d, ignore_errors=True)
    _TOOL_LEVEL.append("process")
    return "process"


def tool_argv(argv: list[str], workdir: Path, *, env: dict[str, str] | None = None, devices: bool = False,
              ro_binds: list[str] | None = None) -> tuple[list[str], dict[str, str], str]:
    """A compiler or tool run on agent input (Triton's import of agent source, clang, nvcc), wrapped like a
    candidate: the sandbox of the best level here with `workdir` as its only writable dir, the allow-listed
    environment, and rlimits through prlimit (the async runner cannot take a preexec). Returns
    (argv, env, level)."""
    level = tool_level()
    full_env = base_env({"HOME": str(workdir), "TMPDIR": str(workdir / "tmp"), **(env or {})})
    prepare_scratch(workdir, level)
    inner = list(argv)
    lim = shutil.which("prlimit")
    if lim:
        mem, cpu = job_limits.memory_bytes(), job_limits.cpu_s()
        extra = [f"--data={mem}"] if mem else []
        extra += [f"--cpu={cpu}"] if cpu else []
        inner = [lim, f"--fsize={FSIZE_BYTES}", f"--nproc={NPROC}", "--core=0", *extra, "--"] + inner
    if level == "process":
        if process_level_drops_uid() and shutil.which("setpriv"):
            inner = [_setpriv(), f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"] + inner
        return inner, full_env, level
    binds = list(ro_binds or [])
    if os.path.isabs(argv[0]):  # a tool configured outside the system dirs (HIPCC=/home/me/rocm/bin/hipcc)
        binds.append(os.path.dirname(os.path.realpath(argv[0])))
    spec = Spec(argv=inner, scratch=workdir, env=full_env, devices=devices, ro_binds=binds)
    return argv_for(spec, level), full_env, level


def refuse_links(workdir: Path) -> str | None:
    """A sandboxed process may leave symbolic links where we later read its outputs: name the first one."""
    for root, dirs, files in os.walk(workdir):
        for n in dirs + files:
            if os.path.islink(os.path.join(root, n)):
                return os.path.join(root, n)
    return None
