"""Op "profile_session" in the runner (harness code only; never imports agent code): one profiler run over a
sandboxed child that loads ONLY the candidate.

1. The inputs come from the reference's own process (the cached reference child, op "case"), as for
   verify and benchmark: the profiled process never loads the reference.
2. A fresh child is started in the sandbox with the profiler wrapping it INSIDE the sandbox: bwrap ... setpriv
   ... <profiler argv> -- python -m evokernel_mcp.runtime.child. The profiler's directories are bound in
   read-only (beside the system dirs every child sees), the device nodes as for any GPU child; the
   environment is the children's allow-list plus what the harness names (never the server's). Paths in the
   profiler's argv are relative to the child's scratch dir (its cwd). It speaks over its pipes only (a
   profiler may close other descriptors), so inputs cross by pipe.
3. It loads the candidate, runs op "profile_run" (warm-up, then the profiled launches), and is told to end
   (stdin closed); the profiler then writes its files and exits, within the time limit or killed.
4. Export commands (ncu --import) run in the same sandbox on the same scratch dir; their stdout comes back
   through a pipe, capped.
5. Only the files the payload names are read back: a walk from an O_DIRECTORY|O_NOFOLLOW descriptor,
   each file opened O_NOFOLLOW|O_NONBLOCK, refused unless a regular file, read up to a size cap
   (safe_files.py). The scratch dir is removed with the child.
Failures (the reference, the candidate, an OOM, the profiler) are a result with `error`, never an exception.
"""

from __future__ import annotations

import base64
import subprocess
import time
from typing import Any

from evokernel_mcp.profile.messages import ExportOut, SessionReply, SessionRequest
from evokernel_mcp.profile.safe_files import read_capped, read_tree
from evokernel_mcp.runtime.context import RunnerContext
from evokernel_mcp.runtime.messages import OpError
from evokernel_mcp.runtime.spares import ChildFailed, note, wall_deadline

EXPORT_MAX_BYTES = 64 << 20
# A profiled process that died or hung: reported through the profiler's exit status and messages (the pipeline
# classifies them: a hang, an abort, a group it cannot schedule, the application's own fault), not as an error
# the candidate's code reported (its exception, its out-of-memory, its GPU fault: the result's error).
PROFILER_OUTCOMES = ("crash", "timeout")
LOAD_TIMEOUT_S = 120.0


def runner_profile_session(ctx: RunnerContext, req: SessionRequest, progress) -> SessionReply:
    out = SessionReply(isolation=ctx.spares.isolation())
    deadline = time.monotonic() + req.timeout_s
    try:
        case = _inputs(ctx, req, deadline)
    except ChildFailed as e:
        out.error = OpError(**e.info())
        return out
    progress(0.2, 1.0, "inputs from the reference's process")
    child, died = None, None
    try:
        child = _spawn(ctx, req)
        _run(child, req, case, deadline)
        progress(0.8, 1.0, "profiled launches done")
    except ChildFailed as e:
        if e.kind in PROFILER_OUTCOMES:  # the process under the profiler died or hung: often the profiler's doing
            died = e  # (a counter group it cannot schedule aborts the application): its exit status decides
        else:
            out.error = OpError(**e.info())
    finally:
        if child is not None:
            _finish(child, req, out, deadline)
    if died is not None:
        out.timed_out = out.timed_out or died.kind == "timeout"
        out.stderr = (out.stderr + f"\n[harness] the profiled process: {died.message}").strip()
    return out


def _inputs(ctx, req: SessionRequest, deadline: float) -> dict[str, Any]:
    from evokernel_mcp.verify.runner_side import LOAD_TIMEOUT_S as REF_LOAD_S

    task = req.task
    shape = req.shape or task.shape_names()[-1]
    ref = ctx.spares.reference(task, timeout_s=min(REF_LOAD_S, wall_deadline(deadline)))
    try:
        case = ref.request({"op": "case", "shape": shape, "seed": req.seed, "hi": False},
                           timeout_s=wall_deadline(deadline), max_bytes=1 << 42)
    except ChildFailed as e:
        if e.kind in ("timeout", "crash", "oom", "gpu_fault"):
            ctx.spares.drop_reference(ref)
        kind = "harness" if e.kind in ("exception", "bad_candidate") else e.kind
        raise e.again(kind, f"reference side, shape set {shape!r} seed {req.seed}: {e.message}") from e
    return {k: case.get(k) for k in ("inputs", "init_inputs", "state")}


def _spawn(ctx, req: SessionRequest):
    from evokernel_mcp.runtime.spares import Child, spawn

    level = ctx.spares.level
    return spawn(lambda: Child(ctx.device, level, warm=False, wrap=[*req.profiler, "--"], binds=req.binds,
                               env_extra=req.env, files=req.files_in))


def _run(child, req: SessionRequest, case: dict[str, Any], deadline: float) -> None:
    task = req.task
    child.wait_ready(timeout_s=wall_deadline(deadline))
    child.unnice()  # started at the spares' nice value and CPUs, like any child; this one serves a job now
    note("profiled child started under %s", req.profiler[0] if req.profiler else "?")
    child.request({"op": "load", "role": "candidate", "source": req.candidate, "task": task.model_dump()},
                  timeout_s=min(LOAD_TIMEOUT_S, wall_deadline(deadline)), max_bytes=1 << 20)
    child.request({"op": "profile_run", **case, "seed": req.seed, "warmup": req.warmup, "iters": req.iters},
                  timeout_s=wall_deadline(deadline), max_bytes=1 << 20)


def _finish(child, req: SessionRequest, out: SessionReply, deadline: float) -> None:
    """End the child (stdin closed: the profiler writes its files and exits), read back what is named, run the
    exports, and discard the child and its scratch dir."""
    try:
        child.tx.close()
    except OSError:
        pass
    try:
        out.returncode = child.proc.wait(timeout=wall_deadline(deadline))
    except subprocess.TimeoutExpired:
        out.timed_out = True
        child.kill()
    try:
        out.stderr = read_capped(child.scratch, ".boot.log", 200_000, tail=True)
        texts, blobs, refused = read_tree(child.scratch, req.collect)
        out.files, out.refused = texts, refused
        out.binary = {k: base64.b64encode(v).decode() for k, v in blobs.items()}
        if req.exports and not out.timed_out and (req.export_if is None or req.export_if in blobs
                                                  or req.export_if in texts):
            out.exports = [_export(child, req, argv, deadline) for argv in req.exports]
    finally:
        child.discard()


def _export(child, req: SessionRequest, argv: list[str], deadline: float) -> ExportOut:
    """One export command on the session's files, in the same sandbox (its own limits); its stdout goes to a
    file the runner opened (no path the sandbox sees; file size capped by the rlimit), read back capped."""
    import tempfile

    from evokernel_mcp.runtime import limits, sandbox

    env = sandbox.base_env({"HOME": str(child.scratch), "TMPDIR": str(child.scratch / "tmp"), **req.env})
    spec = sandbox.Spec(argv=argv, scratch=child.scratch, env=env, ro_binds=list(req.binds))
    _, cg = limits.for_child()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(sandbox.argv_for(spec, child.level), stdout=out, stderr=err,
                                    stdin=subprocess.DEVNULL, cwd=str(child.scratch), env=env, start_new_session=True,
                                    preexec_fn=sandbox.preexec(child.level, None, 0, limits=limits.preexec_limits(cg)))
            try:
                rc = proc.wait(timeout=min(120.0, wall_deadline(deadline)))
            except subprocess.TimeoutExpired:
                sandbox.kill_tree(proc.pid)
                proc.wait()
                rc = None
        finally:
            if cg is not None:
                cg.remove()
        out.seek(0)
        err.seek(max(0, err.seek(0, 2) - 20000))
        return ExportOut(returncode=rc, stdout=out.read(EXPORT_MAX_BYTES).decode(errors="replace"),
                         stderr=err.read().decode(errors="replace") + ("" if rc is not None else
                                                                       "\nexport did not finish in time; killed"))
