"""Typed messages across the process boundaries of the runtime (pydantic models; every frame is validated by
the receiver and built from a model by the sender).

- Server <-> runner (protocol.py carries them as JSON lines): a request is a RunnerRequest whose payload is
  the op's own request model (runtime/ops.py names each op's request and reply models); the runner answers
  with the RunnerEvent union (ready, progress, result, error).
- Runner <-> sandboxed child (frames.py carries them, tensors beside the JSON): the runner sends one of the
  child ops' requests (ChildRequest, by op); the child answers ChildStart at its start and a ChildReply per
  request. What a child sends is agent-controlled: a frame that is not one of these models is the
  candidate's protocol violation (bad_candidate), never the harness's error.

Tensor-carrying fields are typed Any: a tensor, or lists/tuples/dicts of them, as frames.py decodes them
within its limits (dtypes, shapes, bytes).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import ConfigDict, Field, TypeAdapter

from evokernel_mcp.models import ErrorInfo, Model
from evokernel_mcp.runtime.limits import Limits
from evokernel_mcp.tasks import Task


# ---------------------------------------------------------------- server <-> runner: the envelope
class RunnerRequest(Model):
    """One request on the runner's stdin; `payload` is checked against the op's own request model."""

    id: int
    op: str
    payload: dict[str, Any]
    scratch: str | None = None


class ReadyEvent(Model):
    event: Literal["ready"]
    pid: int
    device: str
    info: dict[str, Any] = Field(default_factory=dict)


class ProgressEvent(Model):
    event: Literal["progress"]
    id: int
    done: float = 0.0
    total: float = 0.0
    message: str = ""


class _Done(Model):
    id: int
    stdout: str = ""
    stderr: str = ""
    duration_s: float | None = None
    events: list[str] = Field(default_factory=list, description="Where the op's time went, for the server's log.")


class ResultEvent(_Done):
    event: Literal["result"]
    result: dict[str, Any] = Field(description="The op's reply model, dumped (checked again by the server).")


class ErrorEvent(_Done):
    event: Literal["error"]
    error: ErrorInfo
    fatal: bool = False


RunnerEvent = Annotated[Union[ReadyEvent, ProgressEvent, ResultEvent, ErrorEvent], Field(discriminator="event")]
RUNNER_EVENT: TypeAdapter[Any] = TypeAdapter(RunnerEvent)


# ---------------------------------------------------------------- the runtime's own ops (tests of the pool)
class PingRequest(Model):
    pass


class PingReply(Model):
    pid: int
    cwd: str
    python: str
    torch: str | None = None


class SelftestRequest(Model):
    """Misbehave on request: print, report progress, sleep, raise, exit, segfault."""

    print: str | None = None
    progress_steps: int = 0
    step_s: float = 0.0
    sleep_s: float = 0.0
    raise_: str | None = Field(default=None, alias="raise")
    exit: int | None = None
    segv: bool = False
    echo: Any = None

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class SelftestReply(Model):
    echo: Any = None
    pid: int
    cwd: str


# ---------------------------------------------------------------- runner <-> child
class _ChildReq(Model):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)


class GoRequest(_ChildReq):
    op: Literal["go"]


class WarmProfilerRequest(_ChildReq):
    op: Literal["warm_profiler"]


class LoadRequest(_ChildReq):
    op: Literal["load"]
    role: Literal["reference", "candidate"]
    task: Task
    source: str | None = None


class CaseRequest(_ChildReq):
    op: Literal["case"]
    shape: str
    seed: int
    hi: bool = False
    probe: bool = False
    hold: bool = False
    inputs_only: bool = False
    work: bool = False
    memory_factor: float = 0.0  # settings.memory_factor: a big case is planned within it x its own bytes
    through_host: bool = False  # the reply's tensors go through host memory (child.serve): no export copy


class PlanRequest(_ChildReq):
    """A case's memory plan from meta tensors alone (no input made, no forward run): the runner reads it before
    the case, to give our idle processes' device memory back before the reference's own peak."""
    op: Literal["plan"]
    shape: str
    seed: int
    hi: bool = False
    memory_factor: float = 0.0


class ExpectedRequest(_ChildReq):
    op: Literal["expected"]
    held: bool = False
    inputs: Any = None
    seed: int | None = None
    hi: bool = False
    own_inputs: bool = False  # the forward may run on the received inputs themselves (checked by digest)


class _Case(_ChildReq):
    init_inputs: Any = None
    state: Any = None
    seed: int


class RunRequest(_Case):
    op: Literal["run"]
    poison: Literal["nan", "sentinel"]
    keep: bool = False
    same_inputs: bool = False
    pristine: bool = True  # keep: a pristine copy of the inputs for the next run; False: the inputs and a digest
    load_only: bool = False  # receive and keep the inputs (keep=true), run nothing
    model_key: str | None = None
    inputs: Any = None


class ArmInitRequest(_Case):
    op: Literal["arm_init"]
    name: str
    inputs: Any
    options: dict[str, Any]
    sample_size: int = 0
    refill_pool: Any = None
    probe_table: Any = None
    probe_chunks: list[int] | None = None
    lean: bool = False  # give the device memory back after each block, made again by arm_ready before the next
    park: bool = False  # lean, and the data waits on the host between turns (arm_park; arm_ready brings it back)


class ArmReadyRequest(_ChildReq):
    op: Literal["arm_ready"]
    name: str


class ArmParkRequest(_ChildReq):
    op: Literal["arm_park"]
    name: str


class ArmBlockRequest(_ChildReq):
    op: Literal["arm_block"]
    name: str
    k: int
    defer: bool = False
    cushion_ms: float | None = None


class ArmTimesRequest(_ChildReq):
    op: Literal["arm_times"]
    name: str


class ArmReportRequest(_ChildReq):
    op: Literal["arm_report"]
    name: str
    samples: bool = False


class ArmCloseRequest(_ChildReq):
    op: Literal["arm_close"]
    name: str


class SettledRequest(_Case):
    op: Literal["settled"]
    inputs: Any


class BenchChecksRequest(_Case):
    op: Literal["bench_checks"]
    refill: Any = None
    fresh: Any = None


class ProfileRunRequest(_Case):
    op: Literal["profile_run"]
    inputs: Any
    warmup: int = 1
    iters: int = 1


ChildRequest = Annotated[Union[GoRequest, WarmProfilerRequest, LoadRequest, CaseRequest, PlanRequest,
                               ExpectedRequest, RunRequest,
                               ArmInitRequest, ArmReadyRequest, ArmParkRequest, ArmBlockRequest, ArmTimesRequest,
                               ArmReportRequest, ArmCloseRequest, SettledRequest,
                               BenchChecksRequest, ProfileRunRequest], Field(discriminator="op")]
CHILD_REQUEST: TypeAdapter[Any] = TypeAdapter(ChildRequest)
CHILD_OPS = tuple(m.model_fields["op"].annotation.__args__[0] for m in ChildRequest.__origin__.__args__)  # type: ignore[attr-defined]


class ChildError(Model):
    """A child's own account of a failure; its kind is mapped onto the runner's (an unknown one: bad_candidate)."""

    kind: str = Field(max_length=64)
    message: str = ""
    detail: str | None = None


class ChildOk(Model):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    ok: Literal[True]
    result: Any = None
    duration_s: float | None = None
    # the child's allocator at its fullest during the op (GPU; torch's reserved bytes: VMM transfers and the
    # context not in it): for the runner's log only, a number agent code could change, never a decision's input
    peak_reserved_bytes: int | None = None


class ChildErr(Model):
    ok: Literal[False]
    error: ChildError
    duration_s: float | None = None


class ChildReady(Model):
    event: Literal["ready"]
    info: dict[str, Any] = Field(default_factory=dict)


class ChildGate(Model):
    event: Literal["gate"]


CHILD_REPLY: TypeAdapter[Any] = TypeAdapter(Union[ChildOk, ChildErr])
CHILD_START: TypeAdapter[Any] = TypeAdapter(Annotated[Union[ChildReady, ChildGate], Field(discriminator="event")])


# ---------------------------------------------------------------- pieces of the ops' replies
class OpError(ErrorInfo):
    """Why an op's job failed, as a result field (ChildFailed.info(); benchmark adds the shape set)."""

    shape: str | None = None


class Isolation(Model):
    """How the job's agent code was contained (Spares.isolation())."""

    level: str
    notes: list[str] = Field(default_factory=list)
    limits: Limits
