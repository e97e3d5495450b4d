"""The exploit corpus as data, and the judgement of an answer (pure: given this answer, this verdict)."""

from __future__ import annotations

import ast
from collections import Counter

import pytest

from evokernel_mcp.integrity.corpus import load_corpus, select
from evokernel_mcp.integrity.judge import leaked, observe, verdict_held
from evokernel_mcp.integrity.models import FAMILIES, Expect, Report, Row


def test_corpus_size_families_and_sources():
    corpus = load_corpus()
    assert len(corpus) >= 60
    fams = Counter(e.family for e in corpus)
    assert set(fams) == set(FAMILIES) and all(n >= 4 for n in fams.values()), fams
    for e in corpus:
        assert len(e.source) > 20, e.name
        assert e.expect.describe()


def test_every_candidate_is_python_that_parses():
    for e in load_corpus():
        ast.parse(e.candidate, filename=e.name)


def test_cpu_selection_leaves_out_gpu_only_exploits_with_the_reason():
    chosen, skipped = select(None, "cpu")
    assert chosen and all("cpu" in e.backends for e in chosen)
    assert skipped and all("needs" in why for why in skipped.values())
    chosen_t, _ = select(["timing"], "cuda")
    assert {e.family for e in chosen_t} == {"timing"}


@pytest.mark.parametrize(("expect", "is_error", "body", "held"), [
    (Expect(verdict="verify_fails"), False, {"passed": False}, True),
    (Expect(verdict="verify_fails"), False, {"passed": True}, False),
    (Expect(verdict="verify_fails"), True, {"error": {"kind": "bad_candidate"}}, True),
    (Expect(verdict="verify_fails"), False, {"state": "running", "job_id": "j1"}, False),
    (Expect(verdict="benchmark_invalid"), False, {"results": [{"shape": "small", "valid": False}]}, True),
    (Expect(verdict="benchmark_invalid"), False, {"results": [{"shape": "small", "valid": True, "speedup": 1.02}]}, True),
    (Expect(verdict="benchmark_invalid"), False, {"results": [{"shape": "small", "valid": True, "speedup": 3.0}]}, False),
    (Expect(verdict="benchmark_invalid"), False, {}, False),
    (Expect(verdict="rejected"), True, None, True),
    (Expect(verdict="rejected"), False, {"ok": True}, False),
    (Expect(verdict="answered"), False, {"passed": True}, True),
    (Expect(verdict="verify_fails", error_kinds=("oom",)), False, {"passed": False, "error": {"kind": "oom"}}, True),
    (Expect(verdict="verify_fails", error_kinds=("oom",)), False, {"passed": False, "error": {"kind": "crash"}}, False),
])
def test_verdict(expect, is_error, body, held):
    assert verdict_held(expect, is_error, body)[0] is held


def test_a_secret_anywhere_in_the_answer_is_found():
    assert leaked(["evk-env-123"], False, {"stdout": "A=evk-env-123"}, "") is not None
    assert leaked(["evk-env-123"], True, None, "error: ... evk-env-123 ...") is not None
    assert leaked(["evk-env-123"], False, {"passed": False}, "verify: passed=False") is None


def test_observe_says_what_came_back():
    assert observe(False, {"passed": False, "error": {"kind": "oom"}}, "") == "passed=False, error oom"
    assert "invalid (wrong_output_in_timed_call)" in observe(
        False, {"results": [{"shape": "small", "valid": False, "invalid_reason": "wrong_output_in_timed_call"}]}, "")


def test_report_exit_code_and_table():
    from evokernel_mcp.integrity.cli import table

    rows = [Row(exploit="a", family="timing", tool="benchmark", expected="x", observed="y", held=True),
            Row(exploit="b", family="escape", tool="verify_vs_pytorch", expected="x", observed="z", held=False)]
    rep = Report(device="cpu", backend="cpu", started_utc="now", rows=rows)
    assert rep.exit_code == 1 and [r.exploit for r in rep.broken] == ["b"]
    text = table(rep)
    assert "## timing: 1 of 1 held" in text and "BROKE" in text and "1 held, 1 broke" in text
    assert Report(device="cpu", backend="cpu", started_utc="now", rows=rows[:1]).exit_code == 0


def test_selftest_bundle_carries_the_integrity_table(tmp_path):
    from types import SimpleNamespace

    from evokernel_mcp.selftest import bundle
    from evokernel_mcp.selftest.capture import _Cap, _integrity
    from evokernel_mcp.selftest.models import Manifest

    rows = [Row(exploit="a", family="timing", tool="benchmark", expected="x", observed="y", held=True)]
    rep = Report(device="cpu", backend="cpu", started_utc="now", rows=rows)
    man = Manifest(created_utc="now", host="h")
    _integrity(_Cap(tmp_path, man), SimpleNamespace(results={"integrity": rep.model_dump(mode="json")}))
    assert "## timing: 1 of 1 held" in (tmp_path / "integrity" / "table.txt").read_text()
    assert {f.path for f in man.files} == {"integrity/report.json", "integrity/table.txt"}
    parse = bundle._parsers()["integrity_report"]
    assert parse((tmp_path / "integrity" / "report.json").read_text(), "").rows[0].exploit == "a"
    man2 = Manifest(created_utc="now", host="h")
    _integrity(_Cap(tmp_path, man2), SimpleNamespace(results={}))
    assert man2.skipped and "integrity" in man2.skipped[0]["what"]


def test_strict_benchmark_expectation_allows_no_speedup():
    strict = Expect(verdict="benchmark_invalid", strict=True)
    assert verdict_held(strict, False, {"results": [{"shape": "s", "valid": True, "speedup": 0.8}]})[0] is False
    assert verdict_held(strict, False, {"results": [{"shape": "s", "valid": False}]})[0] is True
    assert verdict_held(Expect(verdict="verify_fails"), False, {"state": "failed", "error": {"kind": "x"}})[0]


class _FakeClient:
    """Answers verify like a sound server until `poison` ran; from then on every candidate fails."""

    def __init__(self, poison: str) -> None:
        self.poison, self.poisoned, self.calls = poison, False, []

    async def call_tool(self, tool, args):
        from types import SimpleNamespace

        from evokernel_mcp.integrity.replay import GOOD

        src = args["candidate"]
        self.calls.append(src)
        passed = src == GOOD and not self.poisoned
        self.poisoned = self.poisoned or src == self.poison
        return SimpleNamespace(structured_content={"passed": passed}, is_error=False, content=[])


def _exploit(name: str, family: str, next_unchanged: bool):
    from evokernel_mcp.integrity.models import Exploit

    return Exploit(name=name, family=family, source="a test double of a corpus entry", candidate=f"# {name}\n",
                   expect=Expect(verdict="verify_fails", next_unchanged=next_unchanged))


@pytest.mark.parametrize("poison", ["# h2\n", "# e1\n", ""])
def test_next_job_check_runs_once_per_family_and_breaks_that_familys_rows(poison):
    import anyio

    from evokernel_mcp.integrity.replay import GOOD, WRONG, Plant, replay_all

    chosen = [_exploit("h1", "harness", True), _exploit("h2", "harness", True), _exploit("h3", "harness", False),
              _exploit("e1", "escape", True), _exploit("o1", "outputs", False)]
    client, plant, seen = _FakeClient(poison), Plant(), []
    report = Report(device="cpu", backend="cpu", started_utc="now")
    try:
        anyio.run(lambda: replay_all(client, plant, chosen, report, None, {}, "cpu", seen.append))
    finally:
        plant.close()
    # every exploit in its own call; the check (a correct candidate, then a wrong one unless the correct one
    # already failed) once after each family that has exploits marked next_unchanged
    after_h = [GOOD] if poison == "# h2\n" else [GOOD, WRONG]
    after_e = [GOOD] if poison else [GOOD, WRONG]
    assert client.calls == ["# h1\n", "# h2\n", "# h3\n", *after_h, "# e1\n", *after_e, "# o1\n"]
    broken = {"# h2\n": {"h1", "h2", "e1"}, "# e1\n": {"e1"}, "": set()}[poison]  # the damage stays
    assert {r.exploit for r in report.broken} == broken
    assert all("next correct candidate: passed=False" in r.observed and "checked after" in r.observed
               for r in report.broken)
    assert sorted(r.exploit for r in seen) == ["e1", "h1", "h2", "h3", "o1"]  # each row reported once, final
