"""A stand-in for the runner-op session in tests of the pipelines' own logic (bisection, time limits, ATT
retries, parsing): it runs the (replay) profiler directly in the work dir with a child that does nothing.
How a session runs the candidate, sandboxed, is tested through the real runner (test_profile_sandboxed.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from evokernel_mcp.errors import ToolTimeout
from evokernel_mcp.profile import collect as pipelines
from evokernel_mcp.profile.messages import ExportOut
from evokernel_mcp.subproc import run_async

NOOP_CHILD = [sys.executable, "-c", "pass"]


def local_launch(work: Path, spec: dict, timeout_s: float = 60.0, pass_timeout_s: float | None = None,
                 argvs: list | None = None) -> pipelines.Launch:
    work.mkdir(parents=True, exist_ok=True)

    async def session(profiler, *, timeout_s, files_in=None, collect=(), exports=(), export_if=None, binds=()):
        for name, text in (files_in or {}).items():
            (work / name).write_text(text)
        argv = [*map(str, profiler), "--", *NOOP_CHILD]
        if argvs is not None:
            argvs.append(argv)
        try:
            res = await run_async(argv, timeout_s=timeout_s, env=dict(os.environ), cwd=work, tool="profiler")
        except ToolTimeout as e:
            return pipelines.SessionOutcome(returncode=None, timed_out=True, stderr=e.stderr_tail)
        outs = []
        if export_if is None or (work / export_if).exists():
            for e in exports:
                r = await run_async(list(map(str, e)), timeout_s=60, env=dict(os.environ), cwd=work, tool="export")
                outs.append(ExportOut(returncode=r.returncode, stdout=r.stdout, stderr=r.stderr))
        return pipelines.SessionOutcome(returncode=res.returncode, stderr=res.stderr, exports=outs)

    return pipelines.Launch(spec=spec, workdir=work, timeout_s=timeout_s, session=session, pass_timeout_s=pass_timeout_s)

