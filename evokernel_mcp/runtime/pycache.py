"""Bytecode for sandboxed children where the installed packages ship none.

A child runs with PYTHONDONTWRITEBYTECODE: it must never write where a later job would read. Where torch
was installed without its __pycache__ (a read-only image: the lent H200's /opt/torch venv), every child
compiled torch's Python sources again at its start. That cost 4.2-5.4 s wall and 8-9 s of CPU per child,
measured there, and a candidate costs three children. Two GPUs' spare starts then fight over the host.

Here the runner (trusted: harness code only) has one process import what a child imports, with
PYTHONPYCACHEPREFIX pointing at <state dir>/pycache. No agent code has run in it. A child then gets that
prefix read-only:
- bubblewrap binds the directory read-only over the hidden state dir;
- at the "process" level only when the child runs as another uid, which cannot write the files we own.

A child on the "process" level with our own uid gets no prefix. It could write there and poison later
children. (At that level such a child can write anything the server can, our package and the venv included:
the level hides nothing, and doctor and every result say so.)

Python checks each cached file against its source's mtime and size, so a stale entry is recompiled in
memory, never trusted.

Only where torch, or what its meta-tensor path imports, has no bytecode of its own (wanted()).
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from evokernel_mcp.paths import sub_state_dir

log = logging.getLogger(__name__)

PREFIX_ENV = "PYTHONPYCACHEPREFIX"
WARM_TIMEOUT_S = 90.0  # the whole runner start is allowed 180 s (pool.START_TIMEOUT_S), its torch import included
# What a child imports at its start (runtime/child.py: torch, triton, the profiler session, the harness
# sides), plus what candidates commonly import. A module missing here is compiled in the child, as before.
IMPORTS = ("torch", "torch.nn", "torch.nn.functional", "torch.autograd.profiler", "torch.utils.cpp_extension",
           "triton", "triton.language", "triton.compiler.compiler", "triton.runtime.driver", "numpy",
           "evokernel_mcp.runtime.child", "evokernel_mcp.benchmark.activity", "evokernel_mcp.benchmark.sides",
           "evokernel_mcp.verify.sides", "evokernel_mcp.verify.cand_side")
# A GPU reference child's first op on meta tensors (child.py; verify/memory.py plans on meta) imports
# torch._dynamo, sympy and mpmath: without their bytecode that took 3.5-8 s of each such child's start on the
# lent H100, against 0.9-1.6 s with it
META_WARM = "try:\n    import torch\n    m = torch.empty(2, device='meta')\n    m + m\nexcept Exception:\n    pass\n"
ACTIVE: str | None = None  # the prefix this runner's children get, once prepare() made it


def has_bytecode(module: str) -> bool | None:
    """Is the installed module's bytecode next to its source? None when it is not installed, or has no
    Python source. A dotted name is found under its top-level package's directory, importing nothing."""
    top, _, rest = module.partition(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    origin = getattr(spec, "origin", None) if spec is not None else None
    if origin and rest:
        base = os.path.join(os.path.dirname(origin), *rest.split("."))
        origin = next((f for f in (os.path.join(base, "__init__.py"), base + ".py") if os.path.exists(f)), None)
    if not origin or not origin.endswith(".py"):
        return None
    d, name = os.path.split(origin)  # beside the source, whatever prefix this process may have itself
    cached = os.path.join(d, "__pycache__", f"{name[:-3]}.{sys.implementation.cache_tag}.pyc")
    return os.path.exists(cached)


# torch, and what a reference child's first op on meta tensors imports (META_WARM): a process that imported torch
# without PYTHONDONTWRITEBYTECODE (the server, where torch's directory is writable) leaves torch's bytecode but
# not the meta path's (META_WARM says what that cost)
NEEDS_BYTECODE = ("torch", "torch._dynamo", "sympy")


def wanted() -> bool:
    """Children read the runner's bytecode only where torch, or the meta path, has none of its own."""
    return any(has_bytecode(m) is False for m in NEEDS_BYTECODE)


def prefix() -> Path:
    return sub_state_dir("pycache")


def prepare(modules: tuple[str, ...] = IMPORTS, *, env: dict[str, str] | None = None,
            timeout_s: float = WARM_TIMEOUT_S) -> str | None:
    """Write the children's bytecode (when wanted here) and make it this process's ACTIVE prefix. Returns
    the prefix, or None. Never raises: without it a child compiles its imports itself, as before."""
    global ACTIVE
    if not wanted():
        return None
    from evokernel_mcp.runtime import sandbox

    root = prefix()
    code = "import importlib, os\nos.umask(0o022)\nfor m in %r:\n    try:\n        importlib.import_module(m)\n" \
           "    except Exception:\n        pass\n" % (tuple(modules),) + (META_WARM if "torch" in modules else "")
    full = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    full.update({PREFIX_ENV: str(root), "PYTHONPATH": sandbox.python_path()}, **(env or {}))
    t0 = time.monotonic()
    try:
        os.chmod(root, 0o755)  # a child running as another uid must read it
        with open(root / ".lock", "w") as lock:  # runners of one host write it one at a time
            while True:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() - t0 > timeout_s:
                        raise subprocess.TimeoutExpired("flock", timeout_s) from None
                    time.sleep(0.1)
            p = subprocess.run([sys.executable, "-c", code], env=full, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               timeout=max(1.0, timeout_s - (time.monotonic() - t0)))
        if p.returncode != 0:
            log.warning("bytecode for children: the import run failed (%s): %s", p.returncode,
                        p.stderr.decode(errors="replace")[-1000:])
            return None
    except (OSError, subprocess.SubprocessError) as e:
        log.warning("bytecode for children: %r; children compile their imports themselves", e)
        return None
    ACTIVE = str(root)
    log.info("bytecode for children in %s (%.1f s)", root, time.monotonic() - t0)
    return ACTIVE


def child_env(level: str) -> dict[str, str]:
    """The environment entry a child started at this isolation level gets (empty: none)."""
    from evokernel_mcp.runtime import sandbox

    if ACTIVE is None:
        return {}
    if level.startswith("bwrap") or sandbox.scratch_owner(level) is not None:
        return {PREFIX_ENV: ACTIVE}
    return {}


def child_binds(level: str) -> list[str]:
    """Read-only binds for a child at this level (the prefix lies in the state dir, which bwrap hides)."""
    return [ACTIVE] if ACTIVE is not None and level.startswith("bwrap") else []


@contextlib.contextmanager
def active(path: str | None):
    """Tests: this prefix ACTIVE for the block."""
    global ACTIVE
    saved, ACTIVE = ACTIVE, path
    try:
        yield
    finally:
        ACTIVE = saved
