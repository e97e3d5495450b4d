"""Registry of runner ops: name -> the function (resolved INSIDE the runner process) and its request and reply
models (checked in both processes: the server validates the payload before it sends it and the reply when it
comes back; the runner validates the request on receipt and the op's answer before it sends it).

Each op is `fn(ctx: RunnerContext, request: <its request model>, progress) -> <its reply model or a dict of its
fields>`. It runs in the job's scratch directory with fd 1/2 captured. It may raise: the runner turns the
exception into an `error` event (kind "exception", or "gpu_fault"/"oom" from the device's message). A failure
of the job itself (the candidate's, the reference's, a limit) is the reply's `error` field, never a raise.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, Field, TypeAdapter, create_model

from evokernel_mcp.benchmark.messages import BenchmarkReply, BenchmarkRequest, CeilingsReply, CeilingsRequest
from evokernel_mcp.profile.messages import SessionReply, SessionRequest
from evokernel_mcp.runtime.messages import PingReply, PingRequest, RunnerRequest, SelftestReply, SelftestRequest
from evokernel_mcp.verify.messages import VerifyReply, VerifyRequest, VerifyStepsReply, VerifyStepsRequest

Progress = Callable[[float, float, str], None]


@dataclass(frozen=True)
class OpSpec:
    target: str  # "module:function", imported only in the runner
    request: type[BaseModel]
    reply: type[BaseModel]


OPS: dict[str, OpSpec] = {
    "ping": OpSpec("evokernel_mcp.runtime.ops:op_ping", PingRequest, PingReply),
    "selftest": OpSpec("evokernel_mcp.runtime.ops:op_selftest", SelftestRequest, SelftestReply),
    "verify": OpSpec("evokernel_mcp.verify.runner_side:runner_verify", VerifyRequest, VerifyReply),
    "verify_steps": OpSpec("evokernel_mcp.verify.runner_side:runner_verify_steps", VerifyStepsRequest,
                           VerifyStepsReply),
    "benchmark": OpSpec("evokernel_mcp.benchmark.runner_side:runner_benchmark", BenchmarkRequest, BenchmarkReply),
    "measure_ceilings": OpSpec("evokernel_mcp.benchmark.ceilings:worker_ceilings", CeilingsRequest, CeilingsReply),
    "profile_session": OpSpec("evokernel_mcp.profile.runner_side:runner_profile_session", SessionRequest,
                              SessionReply),
}


def _call_model(name: str, spec: OpSpec) -> type[RunnerRequest]:
    """The request envelope of one op: its name as a literal, its payload its own model."""
    camel = "".join(p.title() for p in name.split("_"))
    return create_model(f"{camel}Call", __base__=RunnerRequest, op=(Literal[name], ...),  # type: ignore[valid-type]
                        payload=(spec.request, ...))


CALLS = {name: _call_model(name, spec) for name, spec in OPS.items()}
RunnerCall = Annotated[Union[tuple(CALLS.values())], Field(discriminator="op")]  # type: ignore[misc]
RUNNER_CALL: TypeAdapter[Any] = TypeAdapter(RunnerCall)


def spec_of(op: str) -> OpSpec:
    if op not in OPS:
        raise ValueError(f"unknown runner op {op!r}; known: {', '.join(sorted(OPS))}")
    return OPS[op]


def make_call(req_id: int, op: str, payload: dict[str, Any] | BaseModel, scratch: str | None) -> RunnerRequest:
    """The typed request for `op` (ValueError for an unknown op, ValidationError for a payload off its model)."""
    spec = spec_of(op)
    body = payload if isinstance(payload, spec.request) else spec.request.model_validate(
        payload.model_dump() if isinstance(payload, BaseModel) else payload)
    return CALLS[op](id=req_id, op=op, payload=body, scratch=scratch)


def reply_of(op: str, result: BaseModel | dict[str, Any]) -> BaseModel:
    """An op's answer as its reply model (ValidationError when it is not one)."""
    spec = spec_of(op)
    if isinstance(result, spec.reply):
        return result
    return spec.reply.model_validate(result.model_dump() if isinstance(result, BaseModel) else result)


def reply_dict(reply: BaseModel, given: BaseModel | dict[str, Any]) -> dict[str, Any]:
    """A validated reply as the dict the wire and the server's builders carry: the fields the op gave (a dict's
    keys as they were), all of a model's."""
    return reply.model_dump(exclude_unset=isinstance(given, dict), by_alias=True)


def resolve(op: str) -> Callable[..., Any]:
    module, _, func = spec_of(op).target.partition(":")
    return getattr(importlib.import_module(module), func)


def op_ping(ctx: Any, req: PingRequest, progress: Progress) -> PingReply:  # noqa: ARG001
    """Round trip with no work: pid, cwd and the versions imported at runner start."""
    torch = sys.modules.get("torch")
    return PingReply(pid=os.getpid(), cwd=os.getcwd(), python=sys.version.split()[0],
                     torch=torch.__version__ if torch is not None else None)


def op_selftest(ctx: Any, req: SelftestRequest, progress: Progress) -> SelftestReply:  # noqa: ARG001
    """Misbehave on request (tests of the pool): print, report progress, sleep, raise, exit, segfault."""
    if req.print is not None:
        print(req.print, flush=True)
        print(req.print, file=sys.stderr, flush=True)
    for i in range(req.progress_steps):
        progress(i + 1, req.progress_steps, f"step {i + 1}")
        time.sleep(req.step_s)
    if req.sleep_s:
        time.sleep(req.sleep_s)
    if req.raise_:
        raise RuntimeError(req.raise_)
    if req.exit is not None:
        os._exit(req.exit)
    if req.segv:
        import ctypes

        ctypes.string_at(0)
    return SelftestReply(echo=req.echo, pid=os.getpid(), cwd=os.getcwd())
