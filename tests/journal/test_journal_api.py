"""The journal tools on a recorded trail: list, best_so_far (valid verdicts only), compare, distill, export,
notes with evidence, clear errors, and results within the ~4k-token budget."""

from __future__ import annotations

import json

import anyio
import pytest
from journal_helpers import bench, compiled, verify
from mcp import Client

from evokernel_mcp.artifacts import path_of
from evokernel_mcp.errors import BadInput, NotFound
from evokernel_mcp.journal import api, record_call
from evokernel_mcp.journal.models import DocEvidence, ResultEvidence
from evokernel_mcp.profile.models import DerivedValue, PmcDispatch, PmcResult
from evokernel_mcp.server import build_server

BUDGET_CHARS = 16_000  # ~4k tokens of compact JSON, nulls dropped (what the surface sends)


def src(label: str) -> str:
    return f"import torch\n\n# variant {label}\ndef run(x, y):\n    return x + y  # {label}\n"


def record_variant(label: str, *, passed: bool, median_ms: float, vgpr: int = 32, task: str = "vector_add",
                   dram_gbs: float | None = None) -> dict[str, str]:
    ids = {"compile": record_call("compile_kernel", experiment=label, task=task, source="kernel " + label,
                                  arguments={"language": "triton"}, result=compiled(vgpr=vgpr)),
           "verify": record_call("verify_vs_pytorch", experiment=label, task=task, source=src(label), arguments={},
                                 result=verify(passed, 0.0 if passed else 2.0, 0 if passed else 1000)),
           "bench": record_call("benchmark", experiment=label, task=task, source=src(label), arguments={},
                                result=bench({"small": median_ms / 10, "full": median_ms}, correct=passed))}
    if dram_gbs is not None:
        pmc = PmcResult(dispatches=[PmcDispatch(kernel="k", duration_ns=median_ms * 1e6, counters={"c": 1.0},
                                                derived={"dram_gbs": DerivedValue(value=dram_gbs, unit="GB/s", formula="b/t")})])
        ids["profile"] = record_call("profile_pmc", experiment=label, task=task, source=src(label), arguments={},
                                     result=pmc)
    return ids


def compact_len(model) -> int:
    return len(json.dumps(model.model_dump(mode="json", exclude_none=True), separators=(",", ":")))


@pytest.fixture
def trail(journal):
    ids = {"v1": record_variant("v1", passed=True, median_ms=2.0, dram_gbs=2000.0),
           "v2": record_variant("v2", passed=True, median_ms=1.0, vgpr=40, dram_gbs=3900.0),
           "v3": record_variant("v3", passed=False, median_ms=0.3),  # fastest, but wrong
           "v4": record_variant("v4", passed=False, median_ms=0.4)}  # same failure class
    return ids


def test_list_best_and_verdicts(trail):
    lst = api.list_experiments(task="vector_add", sort="step")
    assert lst.total == 4 and [r.label for r in lst.experiments] == ["v1", "v2", "v3", "v4"]
    assert [r.verdict for r in lst.experiments] == ["valid", "valid", "failed", "failed"]
    assert lst.shape == "full" and all(len(r.times) == 1 for r in lst.experiments)
    assert lst.experiments[2].failure_class == "wrong_output"
    assert lst.experiments[0].latest["verify_vs_pytorch"] == trail["v1"]["verify"]
    speed = api.list_experiments(task="vector_add", sort="speed")
    assert [r.label for r in speed.experiments][:2] == ["v2", "v1"]  # invalid times sort last
    assert [r.label for r in api.list_experiments(verdict="failed").experiments] == ["v4", "v3"]
    assert [r.label for r in api.list_experiments(label="v[12]").experiments] == ["v2", "v1"]
    page = api.list_experiments(task="vector_add", sort="step", limit=3)
    assert page.next_offset == 3 and [r.label for r in api.list_experiments(sort="step", offset=3).experiments] == ["v4"]

    best = api.best_so_far("vector_add")
    by_shape = {b.shape: b for b in best.best}
    assert set(by_shape) == {"small", "full"}
    assert by_shape["full"].label == "v2" and by_shape["full"].median_ms == 1.0 and by_shape["full"].candidates == 2
    assert by_shape["full"].verify_result_id == trail["v2"]["verify"] and by_shape["full"].result_id == trail["v2"]["bench"]
    assert best.excluded == {"wrong_output_after_timing": 4}
    assert [b.shape for b in api.best_so_far("vector_add", shape="small").best] == ["small"]


def test_best_needs_the_exact_source_verified(journal):
    record_call("verify_vs_pytorch", experiment="a", task="t", source=src("a"), arguments={}, result=verify(True))
    record_call("benchmark", experiment="a", task="t", source=src("a-edited"), arguments={}, result=bench({"s": 1.0}))
    best = api.best_so_far("t")
    assert best.best == [] and best.excluded == {"unverified_source": 1}
    assert api.list_experiments(task="t").experiments[0].verdict == "unverified"
    # a later failing verify of the same source takes it out even though an earlier one passed
    record_call("verify_vs_pytorch", experiment="b", task="t", source=src("b"), arguments={}, result=verify(True))
    record_call("benchmark", experiment="b", task="t", source=src("b"), arguments={}, result=bench({"s": 2.0}))
    assert api.best_so_far("t").best[0].label == "b"
    record_call("verify_vs_pytorch", experiment="b", task="t", source=src("b"), arguments={}, result=verify(False, 1.0, 3))
    assert api.best_so_far("t").excluded == {"unverified_source": 1, "failed_verify": 1}


def test_compare_two_variants(trail):
    c = api.compare_experiments("v1", "v2")
    assert c.task == "vector_add" and not c.source.identical
    assert "-    return x + y  # v1" in c.source.diff and "+    return x + y  # v2" in c.source.diff
    vgpr = next(d for d in c.resources if d.name.endswith(".vgpr_count"))
    assert (vgpr.a, vgpr.b, vgpr.delta) == (32.0, 40.0, 8.0)
    full = next(d for d in c.times if d.name == "full.median_ms")
    assert full.a == 2.0 and full.b == 1.0 and full.ratio == pytest.approx(0.5)
    assert full.ratio_ci[0] < 0.5 < full.ratio_ci[1] and full.verdict == "b faster"
    dram = next(d for d in c.counters if d.name == "dram_gbs")
    assert (dram.a, dram.b, dram.unit) == (2000.0, 3900.0, "GB/s") and "no interval" in dram.note
    # result ids name their experiment; a failing variant's times are flagged as not comparable
    c2 = api.compare_experiments(trail["v1"]["verify"], "v3", max_diff_lines=1)
    assert c2.b.label == "v3" and c2.source.lines_left_off == c2.source.lines_total - 1
    assert all("not comparable" in d.note for d in c2.times)


def test_distill_lists_failure_once_with_lesson_and_every_unverified_claim(trail):
    api.record_note("Unmasked tail loads read past n: always mask the last block.",
                    ResultEvidence(kind="result", result_id=trail["v3"]["verify"]), experiment="v3")
    api.record_note("The queue overflows above 64 waves.", "unverified", task="vector_add", kind="claim")
    api.record_note("LDS is 64 KB per workgroup.", "unverified", experiment="v2", kind="claim")
    api.record_note("v2 reaches 3900 GB/s.", ResultEvidence(kind="result", result_id=trail["v2"]["profile"]),
                    task="vector_add", kind="claim")
    d = api.distill("vector_add")
    assert d.experiments == 4 and d.verdicts == {"valid": 2, "failed": 2}
    assert len(d.failures) == 1
    f = d.failures[0]
    assert f.failure_class == "wrong_output" and f.count == 2 and f.labels == ["v3", "v4"]
    assert f.lessons == ["Unmasked tail loads read past n: always mask the last block."]
    assert f.example_result_id == trail["v3"]["verify"]
    assert {n.text for n in d.unverified_claims} == {"The queue overflows above 64 waves.", "LDS is 64 KB per workgroup."}
    assert d.unverified_claims_total == 2 and d.verified_claims == 1
    assert {w.label for w in d.winners} == {"v2"} and d.top_valid[0].label == "v2"
    md = api.distilled_markdown("vector_add")
    assert md.count("**wrong_output** x2") == 1 and "always mask the last block" in md
    assert "The queue overflows above 64 waves." in md and "ask for the source" in md


def test_export_trajectory_markdown_and_png(trail):
    e = api.export_trajectory("vector_add")
    assert e.points == 4 and e.shape == "full" and e.files == ["report.md", "trajectory.png"]
    png = path_of(e.artifact_id, "trajectory.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    report = path_of(e.artifact_id, "report.md").read_text()
    assert "# Distilled journal: vector_add" in report and "| 3 | v3 | failed |" in report
    assert e.markdown_preview == report[:3000]


def test_export_trajectory_of_one_search_keeps_its_variants_and_notes(trail):
    """A task's journal holds several searches: `label` (exact or a glob) narrows the report and the chart to one,
    keeping its variants' notes and the task's own, dropping other variants' notes."""
    api.record_note("v3 masks nothing at the tail.", ResultEvidence(kind="result", result_id=trail["v3"]["verify"]),
                    experiment="v3")
    api.record_note("v1 is the naive start.", "unverified", experiment="v1", kind="claim")
    api.record_note("The whole search runs on one device.", "unverified", task="vector_add", kind="claim")
    e = api.export_trajectory("vector_add", label="v[23]")
    assert e.points == 2
    report = path_of(e.artifact_id, "report.md").read_text()
    assert "| 3 | v3 | failed |" in report and "| 1 | v1 |" not in report
    assert "v3 masks nothing" in report and "one device" in report and "naive start" not in report
    one = api.export_trajectory("vector_add", label="v2")
    assert one.points == 1
    with pytest.raises(NotFound, match="no experiment labelled 'w\\*'"):
        api.export_trajectory("vector_add", label="w*")


def test_note_errors(trail):
    with pytest.raises(NotFound, match="r-ffffffffffff"):
        api.record_note("x is y", ResultEvidence(kind="result", result_id="r-ffffffffffff"), task="vector_add")
    with pytest.raises(NotFound, match="Did you mean: v1"):
        api.record_note("x is y", "unverified", experiment="v1x")
    with pytest.raises(NotFound, match="unknown task"):
        api.record_note("x is y", "unverified", task="no_such_task")
    with pytest.raises(BadInput, match="does not resolve"):
        api.record_note("x is y", DocEvidence(kind="doc", anchor="evokernel://docs/gpu_arch/none.md#x"), task="vector_add")
    with pytest.raises(BadInput, match="needs task"):
        api.record_note("x is y", "unverified")
    with pytest.raises(NotFound, match="no journal entries"):
        api.distill("softmax")
    with pytest.raises(NotFound, match="v9"):
        api.compare_experiments("v1", "v9")


def test_doc_evidence_resolves(trail):
    from evokernel_mcp.docs.read import list_docs

    page = next(p for p in list_docs(detail="brief").docs if p.sections)
    uri = f"evokernel://docs/{page.path}#{page.sections[-1].anchor}"
    note = api.record_note("A fact from the docs.", DocEvidence(kind="doc", anchor=uri), task="vector_add", kind="claim")
    assert note.verified and note.evidence == {"kind": "doc", "anchor": uri} and note.note_id.startswith("n-")


def test_malformed_notes_through_the_client(trail):
    bad = [
        ({"text": "ok text", "evidence": {"kind": "measured", "value": 1.0}, "task": "vector_add"}, "unit"),
        ({"text": "ok text", "evidence": {"kind": "rumour"}, "task": "vector_add"}, "evidence"),
        ({"text": "ok text", "evidence": {"kind": "result", "result_id": "12"}, "task": "vector_add"}, "result_id"),
        ({"text": "ok text", "evidence": {"kind": "doc", "anchor": "http://x.org/a#b"}, "task": "vector_add"}, "anchor"),
        ({"text": "  ", "evidence": "unverified", "task": "vector_add"}, "text"),
        ({"text": "ok text", "task": "vector_add"}, "evidence"),
        ({"text": "ok text", "evidence": "unverified", "experiment": "bad label!"}, "experiment"),
    ]

    async def main():
        async with Client(build_server()) as c:
            for args, word in bad:
                r = await c.call_tool("record_note", args)
                assert r.is_error and word in r.content[0].text, (args, r.content[0].text)
            r = await c.call_tool("record_note", {"text": "DRAM 3.9 TB/s", "evidence": {
                "kind": "measured", "value": 3900, "unit": "GB/s", "source": trail["v2"]["profile"]}, "experiment": "v2"})
            assert not r.is_error and r.structured_content["verified"] is True
            r = await c.call_tool("list_experiments", {"task": "vector_add"})
            assert not r.is_error and r.structured_content["total"] == 4
            text = (await c.read_resource("evokernel://journal/vector_add")).contents[0].text
            assert "| 2 | v2 | valid |" in text and "DRAM 3.9 TB/s" in text
            text = (await c.read_resource("evokernel://journal/vector_add/distilled")).contents[0].text
            assert text.startswith("# Distilled journal: vector_add")

    anyio.run(main)


def test_default_results_fit_the_budget(journal):
    for i in range(60):
        record_variant(f"step{i:02d}-a-fairly-long-label-for-a-variant", passed=i % 3 != 0, median_ms=1.0 + i / 100,
                       dram_gbs=1000.0 + i)
    for i in range(50):
        api.record_note(f"Claim {i}: " + "the hardware does something remarkable " * 8, "unverified",
                        task="vector_add", kind="claim")
        api.record_note(f"Lesson {i}: " + "do this not that " * 10, "unverified", experiment="step00-a-fairly-long-"
                        "label-for-a-variant")
    lst = api.list_experiments()
    assert lst.total == 60 and len(lst.experiments) == 10 and lst.next_offset == 10
    d = api.distill("vector_add")
    assert d.unverified_claims_total == 100 and len(d.unverified_claims) == 15
    c = api.compare_experiments("step01-a-fairly-long-label-for-a-variant", "step02-a-fairly-long-label-for-a-variant")
    for model in (lst, d, c, api.best_so_far("vector_add"), api.export_trajectory("vector_add")):
        assert compact_len(model) < BUDGET_CHARS, (type(model).__name__, compact_len(model))
    assert len(api.distilled_markdown("vector_add")) < BUDGET_CHARS


def test_a_speedup_says_what_it_is_against_and_the_chart_keeps_the_baselines_apart(journal):
    """A benchmark against a baseline source (an earlier step) and one against PyTorch: each recorded time names
    its baseline, the distilled report says it beside the speedup, and the chart draws two lines, not one
    'PyTorch' line at the earlier step's time."""
    from evokernel_mcp.journal.export import baseline_lines

    record_call("verify_vs_pytorch", experiment="s7", task="t", source=src("s7"), arguments={}, result=verify(True))
    record_call("benchmark", experiment="s7", task="t", source=src("s7"), arguments={"baseline": "source"},
                result=bench({"full": 1.0}, baseline_ms=1.8))
    record_call("verify_vs_pytorch", experiment="s8", task="t", source=src("s8"), arguments={}, result=verify(True))
    record_call("benchmark", experiment="s8", task="t", source=src("s8"), arguments={"baseline": "pytorch"},
                result=bench({"full": 0.9}, baseline_ms=40.0))
    rows = api.list_experiments(task="t").experiments
    assert {r.label: [t.baseline for t in r.times] for r in rows} == {"s7": ["source"], "s8": ["pytorch"]}
    best = api.best_so_far("t").best[0]
    assert best.label == "s8" and best.baseline == "pytorch"
    text = api.distilled_markdown("t")
    assert "vs PyTorch" in text
    lines = baseline_lines({"source": [1.8], "pytorch": [40.0]})
    assert [(label, ms) for label, _, ms in lines] == [("PyTorch baseline (median)", 40.0),
                                                      ("baseline source (median)", 1.8)]
    assert api.export_trajectory(task="t").points == 2


def test_the_same_note_recorded_again_is_the_first_one_not_a_copy(journal):
    """A search that records its lessons on every run leaves one note per lesson: the same task, variant, kind,
    text and evidence is the note already there; another text or evidence is a new note."""
    record_call("verify_vs_pytorch", experiment="a", task="t", source=src("a"), arguments={}, result=verify(True))
    from evokernel_mcp.journal.models import MeasuredEvidence

    ev = MeasuredEvidence(kind="measured", value=0.1656, unit="ms", source="benchmark tool")
    first = api.record_note("the swizzle removed the flush's conflicts", ev, experiment="a")
    again = api.record_note("the swizzle removed the flush's conflicts", ev, experiment="a")
    assert first.already_recorded is False and again.already_recorded is True
    assert again.note_id == first.note_id and again.created_at == first.created_at
    other = api.record_note("the swizzle removed the flush's conflicts", ev.model_copy(update={"value": 0.1655}), experiment="a")
    task_note = api.record_note("the swizzle removed the flush's conflicts", ev, task="t")
    assert len({first.note_id, other.note_id, task_note.note_id}) == 3
    assert api.export_trajectory(task="t").markdown_preview.count("the swizzle removed") >= 3
