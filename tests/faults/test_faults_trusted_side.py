"""Attacks on the trusted side, CPU path, real runner and real sandbox, through the real MCP client: harness code
that reads what agent code chose (capture files, frames, a cache dir), and secrets the server holds.

Each test runs the attack, then asserts that no secret or foreign file reached the client, that the runner did
not block, and that the next jobs get the right verdict.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from faultkit import GOOD, SECRET, WRONG, assert_next_jobs_right, call, runner_pids, verify

pytestmark = pytest.mark.slow

ENV_SECRET = "evk-planted-env-4c1d"  # under a name no allow-list knows
TOKEN = "evk-http-token-0b5e77aa9d1c4f2e8a6b"  # the server's HTTP token: in its environment and in a file
FILE_SECRET = "evk-root-only-file-93e1"


@pytest.fixture(scope="module", autouse=True)
def planted(tmp_path_factory):
    """Secrets the server holds, planted before its runner starts: an environment variable, the HTTP token (as
    a variable and as a 0644 token file inside a directory every sandbox binds: the repo), a root-only file."""
    from evokernel_mcp.paths import REPO_DIR
    from evokernel_mcp.runtime import envs

    token_file = REPO_DIR / ".evk-test-token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o644)
    secret_file = tmp_path_factory.mktemp("rootonly") / "secret.txt"
    secret_file.write_text(FILE_SECRET)
    secret_file.chmod(0o600)
    os.environ["ZZ_PLANTED_VALUE"] = ENV_SECRET
    os.environ["EVOKERNEL_HTTP_TOKEN"] = TOKEN
    envs.hide_file(token_file)  # as `serve --token-file` does
    yield {"token_file": token_file, "secret_file": secret_file}
    os.environ.pop("ZZ_PLANTED_VALUE", None)
    os.environ.pop("EVOKERNEL_HTTP_TOKEN", None)
    envs._HIDDEN_FILES.remove(os.path.realpath(token_file))
    token_file.unlink(missing_ok=True)


def _blob(r) -> str:
    return str(r.structured_content or {}) + "".join(getattr(c, "text", "") for c in r.content)


def _no_secret(r) -> None:
    blob = _blob(r)
    for s in (SECRET, ENV_SECRET, TOKEN, FILE_SECRET):
        assert s not in blob, f"{s} reached the client"


REPLACE_CAPTURE = """
import os
for name in ("stdout.txt", "stderr.txt", ".boot.log"):
    try:
        os.unlink(name)
    except OSError:
        pass
    MAKE(name)
""" + WRONG


def test_a_capture_file_replaced_by_a_link_fifo_or_device_is_not_read(server, planted):
    """Each replacement in its own job; the next jobs are checked once, after the last (damage that outlives a job
    is still there then, as the integrity replay checks a family)."""
    makes = {"secret_file": f"lambda n: os.symlink({str(planted['secret_file'])!r}, n)",
             "proc_environ": "lambda n: os.symlink('/proc/self/environ', n)",
             "fifo": "os.mkfifo",
             "dev_zero": "lambda n: os.symlink('/dev/zero', n)"}
    before = runner_pids() or (verify(server, GOOD) and runner_pids())  # the runner is up
    for what, make in makes.items():
        r = verify(server, REPLACE_CAPTURE.replace("MAKE", f"({make})"), timeout_s=60)
        assert not r.is_error and r.structured_content["passed"] is False, (what, r.structured_content)
        assert r.structured_content.get("error") is None, (what, r.structured_content["error"])  # a wrong answer
        _no_secret(r)
        assert runner_pids() == before, f"{what}: the runner was blocked and replaced"
    assert_next_jobs_right(server)


SNIFF = """
import glob, os
def _seen():
    blobs = [repr(dict(os.environ)).encode()]
    for p in glob.glob("/proc/*/environ") + glob.glob("/proc/*/cmdline") + [TOKEN_FILE, SECRET_FILE]:
        try:
            blobs.append(open(p, "rb").read())
        except OSError:
            pass
    return [s for s in SECRETS if any(s.encode() in b for b in blobs)]
SEEN = _seen()
print("SEEN" if SEEN else "CLEAN", len(SEEN))
"""


def _sniffer(planted) -> str:
    return (SNIFF.replace("TOKEN_FILE", repr(str(planted["token_file"])))
            .replace("SECRET_FILE", repr(str(planted["secret_file"])))
            .replace("SECRETS", repr([SECRET, ENV_SECRET, TOKEN, FILE_SECRET])))


def test_no_secret_of_the_server_is_readable_from_verify_or_benchmark(server, planted):
    cand = _sniffer(planted) + "def run(x, y):\n    return x - y if SEEN else x + y\n"
    r = verify(server, cand)
    assert r.structured_content["passed"] is True and "CLEAN" in r.structured_content["stdout"], _blob(r)[:3000]
    b = call(server, "benchmark", {"task": "vector_add", "candidate": cand, "shapes": ["small"], "min_reps": 2,
                                   "max_time_s": 0.2, "wait_s": 120, "timeout_s": 120})
    body = b.structured_content or {}
    assert not b.is_error and body.get("error") is None, _blob(b)[:3000]
    assert "CLEAN" in (body.get("stdout") or ""), _blob(b)[:3000]
    _no_secret(r)
    _no_secret(b)


def test_no_secret_of_the_server_is_readable_from_evaluate_batch(server, planted):
    cand = _sniffer(planted) + "def run(x, y):\n    return x - y if SEEN else x + y\n"
    r = call(server, "evaluate_batch", {"task": "vector_add", "candidates": [{"name": "sniff", "source": cand}],
                                        "stages": ["verify"], "shapes": ["small"], "wait_s": 120})
    body = r.structured_content or {}
    assert body.get("ranked") and body["ranked"][0]["valid"] is True, _blob(r)[:3000]
    _no_secret(r)


def test_no_secret_of_the_server_is_readable_from_a_triton_compile(server, planted):
    src = _sniffer(planted) + """
if SEEN:
    raise RuntimeError("found " + repr(SEEN))
import triton
import triton.language as tl


@triton.jit
def k(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), tl.load(x_ptr + tl.arange(0, BLOCK)) + 1)
"""
    r = call(server, "compile_kernel", {"source": src, "language": "triton", "kernel": "k", "target": "gfx942",
                                        "signature": {"x_ptr": "*fp32"}, "constexprs": {"BLOCK": 64}})
    assert not r.is_error and r.structured_content["ok"] is True, _blob(r)[:3000]
    _no_secret(r)


def test_what_a_job_writes_does_not_reach_the_same_sources_next_job(server):
    """A source that stores something in its Triton cache dir, its home or a linked .triton in one job and looks
    for it in the next: nothing is carried (the second job is as clean as the first)."""
    carry = """
import os, shutil
found = [p for p in (os.environ["TRITON_CACHE_DIR"] + "/carry/note.json", os.path.expanduser("~/note.json"))
         if os.path.exists(p)]
os.makedirs(os.environ["TRITON_CACHE_DIR"] + "/carry", exist_ok=True)
open(os.environ["TRITON_CACHE_DIR"] + "/carry/note.json", "w").write("from the last job")
open(os.path.expanduser("~/note.json"), "w").write("from the last job")
print("CARRIED" if found else "FRESH")
def run(x, y):
    return x + y
"""
    first, second = verify(server, carry), verify(server, carry)
    for r in (first, second):
        assert r.structured_content["passed"] is True and "FRESH" in r.structured_content["stdout"], _blob(r)[:2000]
    linked = f"""
import os, shutil
shutil.rmtree(".triton", ignore_errors=True)
os.symlink({str(Path(__file__).parent)!r}, ".triton")  # the runner must never walk it
""" + GOOD
    r = verify(server, linked)
    assert r.structured_content["passed"] is True
    from evokernel_mcp.paths import state_dir

    kept = state_dir() / "kernel-cache"
    files = [p.name for p in kept.rglob("*")] if kept.is_dir() else []
    assert not [n for n in files if n.endswith(".py") or n == "note.json"], files  # nothing of a job's was kept


FORGED = """
import os
LINE = DEEP
def run(x, y):
    for fd in range(3, 64):
        try:
            os.write(fd, LINE)
        except OSError:
            pass
    import time
    time.sleep(30)
"""


FORGED_LINES = {
    "deep_json": b'{"msg":' + b"[" * 200_000 + b"]" * 200_000 + b',"tensors":[]}\n',
    "shape_1e30": b'{"msg":{"ok":true,"result":{"__t__":0}},"tensors":[{"dtype":"float32","shape":[1e30],"nbytes":4}]}\n',
    "shape_overflow": b'{"msg":{"ok":true,"result":{"__t__":0}},"tensors":[{"dtype":"float32","shape":[0,'
                      b'281474976710656,281474976710656],"nbytes":0}]}\n',
    "claims_internal": b'{"msg":{"ok":false,"error":{"kind":"internal","message":"the harness broke"}},"tensors":[]}\n',
}


def test_a_forged_frame_is_the_candidates_fault(server):
    """Each forged frame in its own job; the next jobs are checked once, after the last."""
    for what, line in FORGED_LINES.items():
        r = verify(server, FORGED.replace("DEEP", repr(line)), timeout_s=60)
        body = r.structured_content
        assert not r.is_error and body["passed"] is False, (what, body)
        assert body["error"]["kind"] == "bad_candidate", (what, body["error"])
    assert_next_jobs_right(server)
