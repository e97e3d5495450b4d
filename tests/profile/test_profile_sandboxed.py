"""profile_pmc and thread_trace as runner ops, through the real client, runner and sandbox on the CPU host, with
stand-in profilers that run the command they are given (tests/profile/standin.py): the profiled child loads only
the candidate, inside the sandbox; a candidate that reads the server's environment, writes outside its scratch
dir or prints what it found gets nothing out (result, error text, artifact); a failing candidate is a result with
`error` (not a raised error); the next job's result is right."""

from __future__ import annotations

import json
import os
import stat

import anyio
import pytest
import standin

from evokernel_mcp import artifacts

SECRET = "evk-profile-secret-5b1e77"
REF = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n" \
      "def get_inputs():\n    return [torch.randn(64)]\ndef get_init_inputs():\n    return []\n"
GOOD = "def run(x):\n    return x * 2\n"
NOSY = """
import os, pathlib
found = [f"{k}={v}" for k, v in os.environ.items()]
for p in ("/proc/1/environ", f"/proc/{os.getppid()}/environ", "/proc/self/environ"):
    try:
        found.append(open(p, "rb").read().decode(errors="replace"))
    except OSError as e:
        found.append(repr(e))
print("\\n".join(found))
import sys
print("\\n".join(found), file=sys.stderr)
try:
    pathlib.Path(LEAK, "from_candidate.txt").write_text("\\n".join(found))
except OSError:
    pass
def run(x):
    print("\\n".join(found))
    return x * 2
"""
LINKS = """
import os
for name in (".boot.log", "stdout.txt", "stderr.txt"):
    try:
        os.unlink(name)
    except OSError:
        pass
    os.symlink("/proc/self/environ", name)
os.makedirs("rocprof/run_01/pmc_1", exist_ok=True)
os.symlink("/proc/self/environ", "rocprof/run_01/pmc_1/prof_agent_info.csv")
os.symlink("/", "att")
def run(x):
    return x * 2
"""
RAISES = "import os\ndef run(x):\n    raise RuntimeError('candidate bug; saw: ' + repr(dict(os.environ)))\n"


@pytest.fixture(scope="module")
def server(_isolated_state, tmp_path_factory):
    os.environ["EVOKERNEL_FAULT_SECRET"] = SECRET
    from evokernel_mcp.app import close_app
    from evokernel_mcp.server import build_server

    anyio.run(close_app)  # a fresh runner that has the secret in its environment
    yield build_server(lifespan=None)
    anyio.run(close_app)
    os.environ.pop("EVOKERNEL_FAULT_SECRET", None)


@pytest.fixture(scope="module")
def leak(tmp_path_factory):
    d = tmp_path_factory.mktemp("leak")
    d.chmod(0o777 | stat.S_ISVTX)
    return d


def _call(srv, tool: str, args: dict) -> dict:
    from mcp import Client

    async def main():
        async with Client(srv) as c:
            return await c.call_tool(tool, {"reference": REF, "device": "cpu", "wait_s": 300, "timeout_s": 120,
                                            **args})
    r = anyio.run(main)
    assert not r.is_error, r.content
    text = json.dumps(r.structured_content) + "".join(getattr(c, "text", "") for c in r.content)
    return {"body": r.structured_content, "text": text}


def _artifact_text(aid: str | None) -> str:
    if not aid:
        return ""
    out = []
    for f in artifacts.info(aid).files:
        page = artifacts.read_artifact(aid, name=f.name, limit=10**9)
        out.append(page.text)
    return "\n".join(out)


def _nothing_out(res: dict, leak) -> None:
    body = res["body"]
    assert SECRET not in res["text"]
    assert SECRET not in _artifact_text(body.get("artifact_id"))
    assert list(leak.iterdir()) == []


@pytest.fixture
def rocprof(monkeypatch, tmp_path):
    standin.use(monkeypatch, standin.install(tmp_path / "bin", "rocprofv3"))
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "librocprof-trace-decoder.so").write_bytes(b"")  # presence check only; the replay decodes nothing
    monkeypatch.setenv("ROCPROF_ATT_LIBRARY_PATH", str(lib))


@pytest.fixture
def ncu(monkeypatch, tmp_path):
    standin.use(monkeypatch, standin.install(tmp_path / "bin", "ncu"))


def test_rocprofv3_pmc_and_att_sandboxed_candidate_gets_nothing_out_and_next_job_is_right(server, leak, rocprof):
    nosy = NOSY.replace("LEAK", repr(str(leak)))
    res = _call(server, "profile_pmc", {"candidate": nosy, "counters": ["SQ_WAVES"], "arch": "gfx942"})
    body = res["body"]
    assert body.get("error") is None and body["dispatches_total"] == 4, body
    assert body["isolation"].startswith("bwrap") and body["limits"]["memory_bytes"]
    _nothing_out(res, leak)
    stderr = next(p.text for f in artifacts.info(body["artifact_id"]).files if f.name == "rocprofv3_stderr.txt"
                  for p in [artifacts.read_artifact(body["artifact_id"], name=f.name, limit=10**9)])
    argv = json.loads(stderr.split("STANDIN-ARGV ", 1)[1].splitlines()[0])
    child = argv[argv.index("--") + 1:]
    assert child[1:3] == ["-m", "evokernel_mcp.runtime.child"]  # the sandboxed child, never the old loader
    assert argv[argv.index("-i") + 1] == "pmc_input_run01.txt" and argv[argv.index("-d") + 1] == "rocprof/run_01"
    res = _call(server, "thread_trace", {"candidate": nosy, "kernel_filter": "gemm", "top_n": 5})
    assert res["body"].get("error") is None and res["body"]["kernel"] == "_gemm_afp4_wfp4_kernel", res["body"]
    _nothing_out(res, leak)
    bad = _call(server, "profile_pmc", {"candidate": RAISES, "counters": ["SQ_WAVES"], "arch": "gfx942"})
    err = bad["body"]["error"]
    assert err["kind"] == "exception" and "candidate bug" in err["message"], bad["body"]
    assert SECRET not in bad["text"]
    again = _call(server, "profile_pmc", {"candidate": GOOD, "counters": ["SQ_WAVES"], "arch": "gfx942"})
    assert again["body"].get("error") is None and again["body"]["dispatches"][0]["counters"] == {"SQ_WAVES": 16384.0}


def test_ncu_pmc_and_trace_sandboxed_candidate_gets_nothing_out_and_next_job_is_right(server, leak, ncu):
    nosy = NOSY.replace("LEAK", repr(str(leak)))
    res = _call(server, "profile_pmc", {"candidate": nosy, "preset": "memory"})
    body = res["body"]
    assert body.get("error") is None and body["tool"]["name"] == "ncu" and body["dispatches"], body
    assert body["dispatches"][0]["duration_ns"] == 44704  # the recorded H200 raw page
    _nothing_out(res, leak)
    res = _call(server, "thread_trace", {"candidate": nosy, "top_n": 5})
    assert res["body"].get("error") is None and res["body"]["hot_instructions"], res["body"]
    _nothing_out(res, leak)
    bad = _call(server, "thread_trace", {"candidate": RAISES})
    assert bad["body"]["error"]["kind"] == "exception" and SECRET not in bad["text"], bad["body"]
    again = _call(server, "profile_pmc", {"candidate": GOOD, "preset": "memory"})
    assert again["body"].get("error") is None and again["body"]["dispatches"][0]["duration_ns"] == 44704


def test_links_planted_where_the_harness_reads_give_nothing_out(server, leak, rocprof):
    res = _call(server, "profile_pmc", {"candidate": LINKS, "counters": ["SQ_WAVES"], "arch": "gfx942"})
    assert SECRET not in res["text"] and SECRET not in _artifact_text(res["body"].get("artifact_id")), res["body"]
    res = _call(server, "thread_trace", {"candidate": LINKS, "kernel_filter": "gemm", "top_n": 5})
    assert SECRET not in res["text"] and SECRET not in _artifact_text(res["body"].get("artifact_id")), res["body"]


def test_profiler_that_aborts_before_the_application_runs_is_bisected_not_a_candidate_error(server, rocprof,
                                                                                            tmp_path):
    (tmp_path / "bin" / "abort_if.txt").write_text("SQ_INSTS_LDS\n")
    res = _call(server, "profile_pmc", {"candidate": GOOD, "counters": ["SQ_WAVES", "SQ_INSTS_LDS"],
                                        "arch": "gfx942"})
    body = res["body"]
    assert body.get("error") is None, body
    assert "fails alone" in body["counters_not_collected"]["SQ_INSTS_LDS"] and "rc 134" in \
        body["counters_not_collected"]["SQ_INSTS_LDS"], body
    assert body["dispatches"] and body["dispatches"][0]["counters"] == {"SQ_WAVES": 16384.0}
