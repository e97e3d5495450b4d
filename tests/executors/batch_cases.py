"""The batch executors' acceptance cases on the CPU path: 6 candidates of vector_add (at CI sizes) through the
cascade, two right ones, one wrong on every size (fails verify_small), one wrong only past 1000 elements (fails
verify), one hanging (its stage times out), one slow; and the ranked table each executor must give for them
(test_executors_local.py on the local pool, test_executors_ray.py on Ray)."""

from __future__ import annotations

from pathlib import Path

from evokernel_mcp.batch.models import BatchCandidate

TASK = str(Path(__file__).resolve().parent / "vector_add_tiny")  # vector_add at N = 256 (tiny) and 4096 (small)
SOURCES = {
    "plus": "def run(x, y):\n    return x + y\n",
    "torch_add": "import torch\n\ndef run(x, y):\n    return torch.add(x, y)\n",
    "slow": "import time\n\ndef run(x, y):\n    time.sleep(0.02)\n    return x + y\n",
    "minus": "def run(x, y):\n    return x - y\n",
    "short": "def run(x, y):\n    out = x + y\n    out[1000:] = 0\n    return out\n",  # right only up to 1000
    # sleeps: the stage limit (wall time) ends it as it ends a busy loop, which held a CPU of a 2-core host for
    # the whole limit
    "hang": "import time\n\ndef run(x, y):\n    while True:\n        time.sleep(0.05)\n",
}
# the stage limit ends the hanging candidate; it must hold a normal stage on a loaded 2-core host (12 s did not)
ARGS = {"shapes": None, "timeout_s": 30.0, "max_time_s": 0.2}
EXPECTED_FAILED = [("short", False, "verify"), ("hang", False, "verify_small"), ("minus", False, "verify_small")]


def cands() -> list[BatchCandidate]:
    return [BatchCandidate(name=k, source=v) for k, v in SOURCES.items()]


def table(rows) -> list[tuple]:
    return [(r["name"], r["valid"], r.get("failed_stage")) for r in rows]


def check(rows) -> None:
    got = table(rows)
    assert got[3:] == EXPECTED_FAILED, got
    assert sorted(got[:3]) == sorted((n, True, None) for n in ("plus", "torch_add", "slow"))
    assert got[2][0] == "slow", got  # 20 ms of sleep per call ranks last of the valid ones
    by = {r["name"]: r for r in rows}
    assert by["hang"]["reason"].startswith("timeout")
    assert by["minus"]["reason"].startswith("wrong_output") and by["short"]["reason"].startswith("wrong_output")
    assert all(r["speedup"] > 0 and r["median_ms"] > 0 for r in rows[:3])
