"""The one way we run external tools: argv lists, a mandatory timeout, a new process session,
killpg (SIGTERM, then SIGKILL) on timeout or cancel, bounded output tails on errors.

Executables are resolved in one documented order: explicit argument > environment variable >
ROCm/CUDA install directories > PATH. Versions are probed once and cached.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import anyio

from evokernel_mcp.errors import ToolNotFound, ToolTimeout

TAIL_CHARS = 4000

INSTALL_DIRS = [
    os.environ.get("ROCM_PATH", "/opt/rocm") + "/bin",
    os.environ.get("ROCM_PATH", "/opt/rocm") + "/llvm/bin",
    os.environ.get("CUDA_HOME", "/usr/local/cuda") + "/bin",
    "/usr/local/cuda/bin",
]


@dataclass(frozen=True)
class Completed:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    duration_s: float

    def tail(self, which: str = "stderr", n: int = TAIL_CHARS) -> str:
        text = self.stderr if which == "stderr" else self.stdout
        return text[-n:]


def tail(text: str, n: int = TAIL_CHARS) -> str:
    return text if len(text) <= n else "..." + text[-n:]


def resolve_executable(
    name: str, *, explicit: str | None = None, env_var: str | None = None, extra_dirs: list[str] | None = None
) -> str | None:
    """Find an executable: explicit > $env_var > install dirs (ROCm, CUDA) > PATH. None if absent."""
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    if env_var and os.environ.get(env_var):
        cand = os.environ[env_var]
        return cand if os.access(cand, os.X_OK) else shutil.which(cand)
    for d in (extra_dirs or []) + INSTALL_DIRS:
        p = Path(d) / name
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    return shutil.which(name)


def require_executable(name: str, *, env_var: str | None = None, hint: str = "", **kw) -> str:
    path = resolve_executable(name, env_var=env_var, **kw)
    if path is None:
        raise ToolNotFound(name, searched=(kw.get("extra_dirs") or []) + INSTALL_DIRS + ["PATH"], env_var=env_var,
                           hint=hint)
    return path


@functools.lru_cache(maxsize=64)
def probe_version(path: str, args: tuple[str, ...] = ("--version",), timeout_s: float = 10.0) -> str | None:
    """The version line of `path --version` (or given args): the first line naming a version/release with a
    number, else the first non-empty line; None if it fails. Cached per path."""
    try:
        res = run_sync([path, *args], timeout_s=timeout_s)
    except Exception:  # noqa: BLE001 - a version probe must never break a caller
        return None
    lines = [ln.strip() for ln in (res.stdout + "\n" + res.stderr).splitlines() if ln.strip()]
    # nvcc and ncu print a banner first; prefer the line that carries the version
    for line in lines:
        if re.search(r"\b(version|release)\b", line, re.I) and re.search(r"\d", line):
            return line
    return lines[0] if lines else None


def _kill_group(pid: int) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        if sig == signal.SIGTERM:
            time.sleep(0.2)


def run_sync(
    argv: list[str], *, timeout_s: float, cwd: str | Path | None = None, env: dict[str, str] | None = None,
    input_text: str | None = None, tool: str | None = None,
) -> Completed:
    """Run argv (never through a shell) in a new session; kill the whole group on timeout."""
    if not argv or not isinstance(argv, list):
        raise ValueError("argv must be a non-empty list")
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True,
        )
    except FileNotFoundError as e:
        raise ToolNotFound(tool or argv[0]) from e
    try:
        out, err = proc.communicate(input=input_text, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        out, err = proc.communicate()
        raise ToolTimeout(tool or Path(argv[0]).name, timeout_s, tail(err or "")) from None
    return Completed(argv, proc.returncode, out, err, time.monotonic() - t0)


async def run_async(
    argv: list[str], *, timeout_s: float, cwd: str | Path | None = None, env: dict[str, str] | None = None,
    input_text: str | None = None, tool: str | None = None,
) -> Completed:
    """Async twin of run_sync: the event loop keeps serving while the tool runs; cancellation kills the group."""
    if not argv or not isinstance(argv, list):
        raise ValueError("argv must be a non-empty list")
    t0 = time.monotonic()
    try:
        proc = await anyio.open_process(
            argv, cwd=cwd, env=env, start_new_session=True,
            stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
    except FileNotFoundError as e:
        raise ToolNotFound(tool or argv[0]) from e
    out_chunks: list[bytes] = []
    err_chunks: list[bytes] = []

    async def drain(stream, sink):
        async for chunk in stream:
            sink.append(chunk)

    try:
        with anyio.fail_after(timeout_s):
            async with anyio.create_task_group() as tg:
                tg.start_soon(drain, proc.stdout, out_chunks)
                tg.start_soon(drain, proc.stderr, err_chunks)
                if input_text is not None:
                    await proc.stdin.send(input_text.encode())
                    await proc.stdin.aclose()
            await proc.wait()
    except TimeoutError:
        _kill_group(proc.pid)
        raise ToolTimeout(tool or Path(argv[0]).name, timeout_s,
                          tail(b"".join(err_chunks).decode(errors="replace"))) from None
    except BaseException:
        with anyio.CancelScope(shield=True):
            _kill_group(proc.pid)
            await proc.wait()
        raise
    return Completed(argv, proc.returncode, b"".join(out_chunks).decode(errors="replace"),
                     b"".join(err_chunks).decode(errors="replace"), time.monotonic() - t0)
