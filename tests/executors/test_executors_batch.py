"""evaluate_batch without a real runner: the plan (stages, shapes, shrunk sizes), ranking, back-pressure,
concurrency across slots (one candidate per slot at a time), cancel, the ROCm visibility rule of the Ray
actor, the CLI flags, and the tool on the MCP surface. A fake executor stands in for the device pool."""

from __future__ import annotations

import json

import anyio
import pytest
from mcp import Client

from evokernel_mcp import executors
from evokernel_mcp.batch import api, cascade
from evokernel_mcp.batch.models import BatchCandidate, CompileSpec
from evokernel_mcp.errors import BadInput, EvoError
from evokernel_mcp.executors.base import Executor, Stage
from evokernel_mcp.executors.ray_executor import actor_device
from evokernel_mcp.runtime.jobs import JobManager
from evokernel_mcp.runtime.protocol import WorkerReply
from evokernel_mcp.tasks import load_task, task_from_reference

BIG_REF = """
import torch
import torch.nn as nn

batch_size = 64
dim = 65536


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
"""


def _plan(task=None, **kw):
    args = dict(stages=None, shapes=None, overrides=None, compile=None, timeout_s=30.0, max_time_s=0.5)
    args.update(kw)
    return cascade.make_plan(task or load_task("vector_add"), **args)


# ---------------------------------------------------------------- the plan
def test_default_cascade_on_a_task_with_shape_sets():
    p = _plan()
    assert p.stages == ["verify_small", "verify", "benchmark"]
    assert p.small_shapes == ["small"] and p.verify_shapes == ["small", "medium", "full"] and p.bench_shape == "full"
    p = _plan(shapes=["medium", "small"])  # the task's order, whatever the request's
    assert p.small_shapes == ["small"] and p.verify_shapes == ["small", "medium"] and p.bench_shape == "medium"
    p = _plan(shapes=["medium"])  # one shape set of a shipped task: nothing smaller to try first
    assert p.stages == ["verify", "benchmark"]


def test_compile_stage_only_with_a_spec():
    spec = CompileSpec(language="triton", kernel="add_kernel")
    assert _plan(compile=spec).stages == ["compile", "verify_small", "verify", "benchmark"]
    with pytest.raises(BadInput, match="compile="):
        _plan(stages=["compile", "verify"])
    with pytest.raises(BadInput, match="runs nothing"):
        _plan(stages=[])
    assert _plan(stages=["benchmark", "verify"]).stages == ["verify", "benchmark"]


def test_kernelbench_reference_small_stage_uses_shrunk_sizes_and_user_overrides():
    t = task_from_reference(BIG_REF)
    p = _plan(t, overrides={"batch_size": 32})
    assert p.overrides == {"batch_size": 32} and "batch_size = 32" in p.task.reference_source
    assert p.stages == ["verify_small", "verify", "benchmark"] and p.small_overrides
    assert p.small_overrides["dim"] < 65536 or p.small_overrides.get("batch_size", 32) < 32
    assert p.small_task.reference_source != p.task.reference_source
    with pytest.raises(BadInput, match="shape sets"):
        _plan(overrides={"N": 4})  # a shipped task's sizes are its shape sets
    with pytest.raises(BadInput, match="batch_size"):
        _plan(t, overrides={"batch_sise": 4})  # did-you-mean from overrides.py


def test_unknown_shape_set_is_refused():
    with pytest.raises(BadInput, match="no shape set"):
        _plan(shapes=["huge"])


# ---------------------------------------------------------------- ranking
def _o(name, valid=True, stage=None, speedup=None, median=None):
    o = cascade.Outcome(index=0, name=name, valid=valid, speedup=speedup, median_ms=median)
    if not valid:
        o.failed_stage = stage
    return o


def test_rank_valid_by_speedup_then_failed_by_how_far_they_got():
    got = cascade.rank([_o("c", stage="verify_small", valid=False), _o("slow", speedup=0.5, median=2.0),
                        _o("b", stage="benchmark", valid=False), _o("fast", speedup=2.0, median=0.5),
                        _o("a", stage="verify_small", valid=False), _o("nobench"), _o("d", stage="verify", valid=False)])
    assert [o.name for o in got] == ["fast", "slow", "nobench", "b", "d", "a", "c"]
    assert cascade.counts(got) == {"valid": 3, "failed_verify_small": 2, "failed_benchmark": 1, "failed_verify": 1}


# ---------------------------------------------------------------- back-pressure
def test_busy_past_the_queue_limit_names_the_batch_to_wait_for(monkeypatch):
    monkeypatch.setattr(api, "_pending", {object(): (api.MAX_CANDIDATES - 10, ["job-abc"])})
    api.check_capacity(10, 1)  # exactly at the limit: accepted
    with pytest.raises(EvoError, match="busy") as e:
        api.check_capacity(11, 1)
    assert e.value.next_call == "job_result(job_id='job-abc', wait_s=50)"
    api.check_capacity(11, 8)  # more devices, a larger queue


# ---------------------------------------------------------------- a fake executor
GOOD = "def run(x, y):\n    return x + y\n"
BAD = "def run(x, y):\n    return x - y\n"


def _cases(payload: dict, bad: bool) -> dict:
    cases = [{"shape": s, "seed": 0, "passed": not bad, "mismatches": 7 if bad else 0} for s in payload["shapes"]]
    return {"cases": cases, "isolation": {"level": "fake"}}


def _verify_reply(slot: str, payload: dict) -> WorkerReply:
    bad = payload["candidate"].startswith(BAD)
    if "steps" in payload:  # op verify_steps: stops after the first step that fails, as the runner does
        steps = [_cases(p, bad) for p in payload["steps"][:1 if bad else None]]
        return WorkerReply(ok=True, device=slot, result={"steps": steps})
    return WorkerReply(ok=True, device=slot, result=_cases(payload, bad))


class FakeExecutor(Executor):
    name = "fake"

    def __init__(self, slots=("a", "b"), gate: int = 0, block: bool = False):
        self._slots, self.gate, self.block = list(slots), gate, block
        self.in_flight: dict[str, int] = {}
        self.max_per_slot = 0
        self.max_total = 0
        self.started, self.cancelled = [], []
        self._arrived = None

    async def slots(self):
        return self._slots

    def capacity_hint(self):
        return len(self._slots)

    async def run(self, slot: str, stage: Stage, on_progress=None) -> WorkerReply:
        self.started.append((slot, stage.op, stage.payload["candidate"]))
        self.in_flight[slot] = self.in_flight.get(slot, 0) + 1
        self.max_per_slot = max(self.max_per_slot, self.in_flight[slot])
        self.max_total = max(self.max_total, sum(self.in_flight.values()))
        try:
            if self.block:
                await anyio.sleep_forever()
            if self.gate and len(self.started) <= self.gate:  # the first `gate` stages wait for each other
                with anyio.fail_after(30):  # a deadlock guard, not a timing assertion
                    while sum(self.in_flight.values()) < self.gate and len(self.started) < self.gate:
                        await anyio.sleep(0.01)
            return _verify_reply(slot, stage.payload)
        except BaseException:
            self.cancelled.append(slot)
            raise
        finally:
            self.in_flight[slot] -= 1


@pytest.fixture
def mgr():
    m = JobManager(devices=["cpu"])
    yield m
    anyio.run(m.aclose)


def _cands(n, bad=()):
    return [BatchCandidate(name=f"c{i}", source=(BAD if i in bad else GOOD) + f"# {i}\n") for i in range(n)]


def test_candidates_run_concurrently_one_per_slot_and_stop_at_their_first_failure(mgr):
    ex = FakeExecutor(gate=2)
    plan = _plan(stages=["verify_small", "verify"], shapes=["small", "medium"])
    cands = [*_cands(5, bad={1}), BatchCandidate(name="junk", source="x = 1\n")]

    async def main():
        job = await api.submit_batch(plan, cands, jobs=mgr, executor=ex)
        return await mgr.wait(job, 120)

    out = anyio.run(main)
    assert out.state == "done", out.error
    res = out.result
    assert ex.max_total == 2 and ex.max_per_slot == 1  # both slots busy at once, never two on one slot
    assert {s for s, _, _ in ex.started} == {"a", "b"}
    rows = {r.name: r for r in res.ranked}
    assert [r.name for r in res.ranked[-2:]] == ["c1", "junk"]
    assert rows["c1"].failed_stage == "verify_small" and rows["c1"].reason.startswith("wrong_output")
    assert rows["junk"].failed_stage == "verify_small" and "bad_candidate" in rows["junk"].reason
    assert all(rows[f"c{i}"].valid for i in (0, 2, 3, 4))
    # verify_small and verify are one stage (op verify_steps: one candidate process); c1 stopped at
    # verify_small; junk never reached the executor
    assert sum(1 for _, _, src in ex.started if src.startswith(BAD)) == 1
    assert len(ex.started) == 5 and {op for _, op, _ in ex.started} == {"verify_steps"}
    assert set(res.ranked[0].model_dump()) >= {"name", "valid"}
    assert res.counts == {"valid": 4, "failed_verify_small": 2} and res.slots == 2
    assert all(r.result_id for r in res.ranked)  # the artifact of each candidate's full results
    assert not api._pending  # the batch's queue entry is gone once it finished


class _Recording(FakeExecutor):
    """Records the shape sets each stage was given, per slot."""

    def __init__(self, slots, hosts=None):
        super().__init__(slots=slots)
        self.shapes: dict[str, list] = {}
        if hosts is not None:
            self.hosts = hosts  # as the Ray executor reports its actors: slot -> "device@host"

    async def run(self, slot, stage, on_progress=None):
        steps = stage.payload.get("steps") or [stage.payload]
        self.shapes.setdefault(slot, []).extend(list(p["shapes"]) for p in steps)
        return await super().run(slot, stage, on_progress)


@pytest.mark.parametrize("slots,hosts,want", [
    (("cpu",), None, [["small"]]),  # the CPU path: its small shape sets
    (("cuda:0",), None, [["small"], ["small", "medium", "full"]]),  # a GPU: all of them
    (("ray:0",), {"ray:0": "cuda:0@node-3"}, [["small"], ["small", "medium", "full"]]),
    (("ray:0",), {"ray:0": "cpu@node-3"}, [["small"]]),
])
def test_default_shapes_follow_the_device_of_each_slot(mgr, slots, hosts, want):
    ex = _Recording(slots, hosts)
    plan = _plan(task=load_task("softmax"), stages=["verify_small", "verify"])

    async def main():
        job = await api.submit_batch(plan, _cands(1), jobs=mgr, executor=ex)
        return await mgr.wait(job, 120)

    res = anyio.run(main).result
    assert ex.shapes[slots[0]] == want and res.ranked[0].valid
    assert res.verify_shapes == want[-1] and ("CPU path" in res.shape_rule) is (want == [["small"]])
    assert [s.shape for s in res.shapes_skipped] == ([] if len(want) > 1 else ["medium", "full"])


def test_cancel_stops_the_stages_in_flight_and_starts_no_more(mgr):
    ex = FakeExecutor(block=True)
    plan = _plan(stages=["verify"], shapes=["small"])

    async def main():
        job = await api.submit_batch(plan, _cands(6), jobs=mgr, executor=ex)
        with anyio.fail_after(60):
            while len(ex.started) < 2:
                await anyio.sleep(0.01)
        st = await mgr.cancel(job)
        return st

    st = anyio.run(main)
    assert st.state == "cancelled"
    assert sorted(ex.cancelled) == ["a", "b"] and len(ex.started) == 2
    assert not api._pending


def test_duplicate_names_and_oversized_batches_refused(mgr):
    with pytest.raises(BadInput, match="unique"):
        anyio.run(lambda: api.submit_batch(_plan(), [BatchCandidate(name="x", source=GOOD)] * 2, jobs=mgr,
                                           executor=FakeExecutor()))
    with pytest.raises(BadInput, match="1 to 256"):
        anyio.run(lambda: api.submit_batch(_plan(), _cands(257), jobs=mgr, executor=FakeExecutor()))
    assert not api._pending


# ---------------------------------------------------------------- Ray actor device visibility
def test_actor_device_keeps_one_visibility_variable_on_rocm():
    assert actor_device({}, [], None) == ("cpu", [])
    assert actor_device({"CUDA_VISIBLE_DEVICES": "3"}, [3], "nvidia") == ("cuda:3", [])
    # Ray < 2.45 on AMD: ROCR_VISIBLE_DEVICES; the pool sets HIP_VISIBLE_DEVICES=3, so ROCR must go
    assert actor_device({"ROCR_VISIBLE_DEVICES": "3"}, ["3"], "amd") == ("rocm:3", ["ROCR_VISIBLE_DEVICES"])
    env = {"HIP_VISIBLE_DEVICES": "5", "ROCR_VISIBLE_DEVICES": "5", "CUDA_VISIBLE_DEVICES": "5"}
    assert actor_device(env, ["5"], "amd") == ("rocm:5", ["ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"])
    assert actor_device({"HIP_VISIBLE_DEVICES": "1"}, ["1"], "amd") == ("rocm:1", [])
    with pytest.raises(ValueError, match="exactly one GPU"):
        actor_device({}, ["0", "1"], "nvidia")


# ---------------------------------------------------------------- CLI and configuration
def test_serve_flags_choose_the_executor(monkeypatch):
    from evokernel_mcp import cli

    monkeypatch.setattr(executors, "_config", None)
    monkeypatch.delenv("EVOKERNEL_EXECUTOR", raising=False)
    ns = cli.build_parser().parse_args(["serve", "--executor", "ray", "--ray-address", "ray://head:10001",
                                        "--ray-slots", "4"])
    assert cli._configure(ns) is None
    assert executors.config() == executors.ExecutorConfig("ray", "ray://head:10001", 4)
    monkeypatch.setattr(executors, "_config", None)
    monkeypatch.setenv("EVOKERNEL_EXECUTOR", "slurm")
    assert "slurm" in cli._configure(cli.build_parser().parse_args(["serve"]))
    monkeypatch.setattr(executors, "_config", None)
    monkeypatch.setenv("EVOKERNEL_EXECUTOR", "ray")  # the flag wins over the environment
    assert cli._configure(cli.build_parser().parse_args(["serve", "--executor", "local"])) is None
    assert executors.config().kind == "local"


# ---------------------------------------------------------------- the MCP surface
def test_evaluate_batch_on_the_surface_is_terse_strict_and_destructive():
    from evokernel_mcp.server import build_server

    async def main():
        async with Client(build_server()) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            typo = await c.call_tool("evaluate_batch", {"task": "vector_add", "candidats": []})
            empty = await c.call_tool("evaluate_batch", {"task": "vector_add", "candidates": []})
            full = json.loads((await c.read_resource("evokernel://tools/evaluate_batch")).contents[0].text)
            return tools["evaluate_batch"], typo, empty, full

    tool, typo, empty, full = anyio.run(main)
    assert tool.annotations.destructive_hint is True and tool.annotations.read_only_hint is False
    listed = set(tool.input_schema["properties"])
    assert listed == {"candidates", "task", "reference", "wait_s", "detach"}
    assert {"stages", "shapes", "overrides", "compile", "timeout_s", "experiment"} <= set(
        full["input_schema"]["properties"])
    assert "Advanced: stages" in tool.description
    size = len(tool.name) + len(tool.description) + len(json.dumps(tool.input_schema, separators=(",", ":")))
    assert size <= 700, f"evaluate_batch costs {size} characters of tools/list"
    assert typo.is_error and "candidates" in typo.structured_content["error"]["message"]
    assert empty.is_error and empty.structured_content["error"]["kind"] == "bad_argument"


def test_experiment_records_each_candidate_under_its_own_label(mgr, tmp_path, use_settings):
    from evokernel_mcp.journal import api as journal

    use_settings(journal=tmp_path / "journal.sqlite3")
    plan = _plan(stages=["verify_small", "verify"], shapes=["small", "medium"])

    async def main():
        job = await api.submit_batch(plan, _cands(2, bad={1}), jobs=mgr, executor=FakeExecutor(),
                                     experiment="batch/t1", task="vector_add")
        return await mgr.wait(job, 120)

    out = anyio.run(main)
    assert out.state == "done", out.error
    ids = {r.name: r.result_id for r in out.result.ranked}
    assert all(rid.startswith("r-") for rid in ids.values()), ids
    rows = {e.label: e for e in journal.list_experiments(task="vector_add").experiments}
    assert set(rows) == {"batch/t1/c0", "batch/t1/c1"}
    assert rows["batch/t1/c0"].verdict == "valid"  # verify passed, no benchmark stage
    assert rows["batch/t1/c1"].verdict == "failed" and rows["batch/t1/c1"].failure_class == "wrong_output"
    assert rows["batch/t1/c1"].latest.get("verify_vs_pytorch") == ids["c1"]
