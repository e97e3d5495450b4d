"""The server's side of a profiler session: one runner op ("profile_session", profile/runner_side.py) per
profiler run, its named outputs written into a harness-only dir (the job's own scratch dir, which no sandbox
sees), and the one failure convention of the long tools: a failure is a result with `error`, never a raise."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from evokernel_mcp.errors import EvoError
from evokernel_mcp.models import ErrorInfo
from evokernel_mcp.profile import collect
from evokernel_mcp.profile.collect import SessionOutcome
from evokernel_mcp.profile.messages import SessionReply
from evokernel_mcp.profile.safe_files import materialize
from evokernel_mcp.runtime.protocol import classify_text
from evokernel_mcp.tasks import Task

OP_SLACK_S = 150.0  # beyond the profiler's own limit: the reference's process and the child's start


def launch_for(jctx, task: Task, spec: dict[str, Any], timeout_s: float) -> collect.Launch:
    """A Launch whose sessions run as runner ops on the job's device."""
    workdir = Path(jctx.scratch_dir) / "profile"
    workdir.mkdir(parents=True, exist_ok=True)
    base = {"task": task.model_dump(), "candidate": spec["candidate"], "shape": spec.get("shape"),
            "seed": int(spec.get("seed", 0)), "warmup": int(spec.get("warmup", 1)), "iters": int(spec.get("iters", 1))}
    seen: dict[str, Any] = {}  # (the Launch's info)

    async def session(profiler: list[str], *, timeout_s: float, files_in: dict[str, str] | None = None,
                      collect: list[str] | tuple = (), exports: list[list[str]] | tuple = (),
                      export_if: str | None = None, binds: list[str] | tuple = ()) -> SessionOutcome:
        payload = {**base, "profiler": [str(a) for a in profiler], "files_in": files_in or {},
                   "collect": list(collect), "exports": [[str(a) for a in e] for e in exports],
                   "export_if": export_if, "binds": list(binds), "timeout_s": timeout_s}
        reply = await jctx.pool.call(jctx.device, "profile_session", payload, timeout_s=timeout_s + OP_SLACK_S,
                                     on_progress=jctx.progress, scratch_dir=jctx.scratch_dir)
        seen["device_name"] = reply.worker_info.get("device_name")
        if not reply.ok:
            return SessionOutcome(returncode=None, error=reply.error)
        r = SessionReply(**reply.result)
        seen["isolation"] = r.isolation.model_dump() if r.isolation is not None else {}
        materialize(workdir, r.files, {k: base64.b64decode(v) for k, v in r.binary.items()})
        return SessionOutcome(returncode=r.returncode, timed_out=r.timed_out, stderr=r.stderr, exports=r.exports,
                              error=ErrorInfo(**r.error.model_dump(exclude={"shape"})) if r.error else None, refused=r.refused)

    return collect.Launch(spec=spec, workdir=workdir, timeout_s=timeout_s, session=session, info=seen)


async def run_pipeline(launch: collect.Launch, pipeline, model):
    """Run a pipeline; a session that could not run the candidate, or a profiler that failed, becomes a result
    of `model` with `error` (as verify_vs_pytorch's), stating the isolation and the limits either way."""
    from evokernel_mcp.runtime.limits import Limits, current

    try:
        res = await pipeline(launch)
    except collect.SessionFailed as e:
        res = model(error=e.error, message=f"No profile: {e.error.kind} ({e.error.message[:300]})")
    except EvoError as e:
        text = str(e)
        err = ErrorInfo(kind=classify_text(text) or "harness", message=f"the profiler failed: {text[:3000]}")
        res = model(error=err, message=f"No profile: {err.message[:300]}")
    iso = launch.info.get("isolation") or {}
    res.isolation = iso.get("level")
    res.limits = Limits(**iso["limits"]) if iso.get("limits") else current()
    return res
