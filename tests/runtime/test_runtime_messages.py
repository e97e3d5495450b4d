"""Every message across a process boundary of the runtime is a model: each runner op names its request and reply
models and a sample of each survives the wire both ways; every child op has a request model; frames off their
model are refused; ops take the runner's context as an argument (no module-level context)."""

from __future__ import annotations

import inspect

import pytest
from pydantic import BaseModel, ValidationError

from evokernel_mcp.runtime import child, ops, protocol
from evokernel_mcp.runtime import messages as m
from evokernel_mcp.tasks import load_task

TASK = load_task("vector_add").model_dump()
ISO = {"level": "process", "notes": ["no bwrap here"], "limits": {}}
ERR = {"kind": "bad_candidate", "message": "protocol violation", "detail": None}

# one request and one reply per runner op, as the server and the runner build them
SAMPLES: dict[str, tuple[dict, dict]] = {
    "ping": ({}, {"pid": 7, "cwd": "/s", "python": "3.11.2", "torch": "2.5.0"}),
    "selftest": ({"print": "hi", "progress_steps": 2, "raise": "boom", "echo": [1, "x"]},
                 {"echo": [1, "x"], "pid": 7, "cwd": "/s"}),
    "verify": ({"task": TASK, "candidate": "def run(x, y):\n    return x + y\n", "shapes": ["small"], "seeds": [0, 1],
                "tolerance": {"atol": 1e-5, "rtol": 1e-5}, "stop_on_first_failure": False, "probe": True,
                "overrides": {}, "choice": {"shapes": ["small"]}, "budget_s": 55.0},
               {"cases": [{"shape": "small", "seed": 0, "passed": True, "max_abs_err": 0.0}], "platform": "x86_64",
                "overrides_applied": {}, "reference_precision": "float64", "isolation": ISO, "stdout": "", "stderr": ""}),
    "verify_steps": ({"candidate": "def run(x, y):\n    return x + y\n", "budget_s": 50.0,
                      "steps": [{"task": TASK, "shapes": ["small"], "seeds": [0]},
                                {"task": TASK, "shapes": ["small", "full"], "seeds": [0, 1, 2]}]},
                     {"steps": [{"cases": [], "error": ERR, "isolation": ISO}]}),
    "benchmark": ({"task": TASK, "candidate": "def run(x, y):\n    return x + y\n", "baseline": "pytorch",
                   "shapes": ["small"], "options": {"min_reps": 6}, "seed": 0, "control": True},
                  {"device_info": {"backend": "cpu"}, "shapes": [{"shape": "small", "rounds": {}}],
                   "clocks_before": None, "clocks_after": None, "ceilings": None,
                   "error": {**ERR, "kind": "timeout", "shape": "small"}, "isolation": ISO, "stdout": "", "stderr": ""}),
    "measure_ceilings": ({"refresh": True}, {"device": "cpu", "host_timing": True, "copy_gbs": 12.5}),
    "profile_session": ({"task": TASK, "candidate": "x", "profiler": ["ncu", "-o", "rep"], "collect": ["rep.ncu-rep"],
                         "exports": [["ncu", "--import", "rep.ncu-rep"]], "timeout_s": 60.0},
                        {"returncode": 0, "files": {"a.csv": "x,y\n"}, "binary": {"rep.ncu-rep": "AAAA"},
                         "exports": [{"returncode": 0, "stdout": "x"}], "isolation": ISO}),
}


def test_every_runner_op_has_request_and_reply_models_and_a_sample():
    assert set(SAMPLES) == set(ops.OPS)
    for name, spec in ops.OPS.items():
        assert issubclass(spec.request, BaseModel) and issubclass(spec.reply, BaseModel), name
        assert callable(ops.resolve(name)), name


@pytest.mark.parametrize("op", sorted(SAMPLES))
def test_a_sample_of_each_op_crosses_both_ways(op):
    payload, reply = SAMPLES[op]
    # server -> runner: built from the op's model, validated by the runner on receipt
    line = protocol.encode(ops.make_call(3, op, payload, "/tmp/s"))
    req = protocol.decode_request(line)
    assert (req.id, req.op, req.scratch) == (3, op, "/tmp/s")
    typed = ops.spec_of(op).request.model_validate(req.payload)
    assert typed == ops.spec_of(op).request.model_validate(payload)
    assert ops.RUNNER_CALL.validate_json(line).payload == typed  # the discriminated union by op agrees
    # runner -> server: the op's answer as its reply model, in a result event, validated again by the server
    body = ops.reply_dict(ops.reply_of(op, reply), reply)
    ev = protocol.decode_event(protocol.encode(m.ResultEvent(event="result", id=3, result=body)))
    assert isinstance(ev, m.ResultEvent) and ev.id == 3
    assert ops.reply_dict(ops.reply_of(op, ev.result), ev.result) == body
    assert set(body) == set(reply)  # the fields the op gave, no more: the server's builders read the same dict


def test_payloads_and_replies_off_their_model_are_refused():
    with pytest.raises(ValueError, match="unknown runner op"):
        ops.make_call(1, "evokernel_mcp.runtime.ops:op_ping", {}, None)  # no free-form "module:function" ops
    with pytest.raises(ValidationError):
        ops.make_call(1, "verify", {**SAMPLES["verify"][0], "seeds": "all"}, None)
    with pytest.raises(ValidationError):
        ops.make_call(1, "benchmark", {**SAMPLES["benchmark"][0], "candidat": "x"}, None)  # a typo fails loudly
    with pytest.raises(ValidationError):
        ops.reply_of("verify", {"cases": [], "error": {"kind": "whatever", "message": "m"}})
    for bad in (b'{"id": 1, "op": "ping"}\n', b'{"id": "x", "op": "ping", "payload": {}}\n', b"[]\n"):
        with pytest.raises(protocol.DecodeError):
            protocol.decode_request(bad)


def test_every_child_op_has_a_request_model_and_replies_are_checked():
    served = {op for table in child.OPS.values() for op in table} | {"load", "warm_profiler", "go"}
    assert served == set(m.CHILD_OPS)
    m.CHILD_REQUEST.validate_python({"op": "load", "role": "candidate", "source": "x", "task": TASK})
    m.CHILD_REQUEST.validate_python({"op": "case", "shape": "small", "seed": 0, "hi": True, "probe": True, "hold": True})
    with pytest.raises(ValidationError):
        m.CHILD_REQUEST.validate_python({"op": "case", "shape": "small"})  # no seed
    with pytest.raises(ValidationError):
        m.CHILD_REQUEST.validate_python({"op": "exec", "code": "..."})
    assert m.CHILD_REPLY.validate_python({"ok": True, "result": {"x": [1, 2]}, "duration_s": 0.1}).result == {"x": [1, 2]}
    assert m.CHILD_REPLY.validate_python({"ok": False, "error": {"kind": "oom", "message": "m"}}).error.kind == "oom"
    for forged in ({"ok": "yes", "result": 1}, {"ok": False, "error": "boom"}, {"ok": True, "result": 1, "also": 2},
                   {"ok": False, "error": {"kind": "x" * 100, "message": "m"}}, {"result": 1}):
        with pytest.raises(ValidationError):
            m.CHILD_REPLY.validate_python(forged)
    assert isinstance(m.CHILD_START.validate_python({"event": "gate"}), m.ChildGate)
    with pytest.raises(ValidationError):
        m.CHILD_START.validate_python({"event": "ready", "info": "not a dict"})


def test_ops_take_the_runner_context_as_an_argument():
    from evokernel_mcp.runtime import runner

    for name in ops.OPS:
        params = list(inspect.signature(ops.resolve(name)).parameters)
        assert params[:1] == ["ctx"] and len(params) == 3, (name, params)
    assert not hasattr(runner, "CTX") and not hasattr(runner, "context")  # no module-level context to reach for


# A stand-in runner whose answer to each request is off the op's reply model.
OFF_MODEL_RUNNER = r'''
import json, sys
print(json.dumps({"event": "ready", "pid": 1, "device": "cpu", "info": {}}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    print(json.dumps({"event": "result", "id": req["id"], "result": {"pid": "not a pid", "extra": 1}}), flush=True)
'''


def test_a_reply_off_its_model_is_an_internal_error_not_a_result():
    from scripted_runner import exchange_with_script

    reply = exchange_with_script(OFF_MODEL_RUNNER, ops.make_call(4, "ping", {}, None))
    assert not reply.ok and reply.result is None and reply.error.kind == "internal"
    assert "does not match its model" in reply.error.message
