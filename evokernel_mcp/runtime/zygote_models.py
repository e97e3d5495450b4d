"""The messages of the zygote (runtime/zygote.py) with the runner and with each sandbox's stub.

The stub (zygote_stub.py) writes its hello as plain JSON and reads the zygote's replies as plain lines: it
starts in every sandbox and imports nothing heavy (pydantic alone would cost it a third of a second on a
2-core VM). The trusted side checks what the stub sends against StubHello on receipt.
"""

from __future__ import annotations

from pydantic import Field

from evokernel_mcp.models import Model

# The lines between a stub and the zygote's fork: FORKED (the stub answers OK: it will not start a child of its
# own), then EXIT <wait status>; or EXEC <reason> (the stub starts the child itself).
FORKED, OK, EXIT, EXEC = "forked", "ok", "exit", "exec"
# What differs between two CPU children's environments (child_proc.child_env; bwrap sets PWD): all else must be the
# zygote's own, or the child starts as before (imports read the environment: OMP_*, MALLOC_*, PYTHON*)
PER_CHILD_ENV = ("HOME", "TMPDIR", "TRITON_CACHE_DIR", "_EVOKERNEL_SPAWNED_AT", "PWD")


class ZygoteReady(Model):
    """The zygote's first line to the runner, once its imports are done (or why it will not serve)."""

    ok: bool
    pid: int
    import_s: float = 0.0
    reason: str = ""


class ForkRequest(Model):
    """The runner to the zygote, with two descriptors: the stub's socket (its peer is in the sandbox) and the
    socket the fork reports on."""

    cgroup_procs: list[str] = Field(default_factory=list, description="the job's cgroup.procs files to join")


class StubHello(Model):
    """A stub to the zygote's fork, with its descriptors (SCM_RIGHTS) and its credentials (SCM_CREDENTIALS)."""

    argv: list[str] = Field(description="the child's arguments (runtime/child.py)")
    env: dict[str, str]
    cwd: str
    fds: list[int] = Field(description="the numbers the passed descriptors had in the stub, in order")
    start: int = Field(description="the stub's start time (/proc/self/stat, clock ticks since boot): the pid the "
                       "kernel gave is the stub's, not a process that took the number after it ended")


class ForkReport(Model):
    """The zygote's fork to the runner: the host pid of the process that serves the sandbox, or why none does
    (the stub then starts the child itself, as without a zygote)."""

    pid: int | None = None
    reason: str = ""
