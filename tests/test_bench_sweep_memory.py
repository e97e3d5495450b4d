"""The sweep's memory figures (bench/kernelbench_sweep.py, bench/gpu_memory.py) from recorded samples: the
largest reading of one forward-running child, what the other processes held at our peak, and the breakdown of
the problems over 3x. Pure functions over rows shaped as the sweep writes them; no GPU."""

from __future__ import annotations

from bench.gpu_memory import busiest_child_mib, timeline_busiest_child_mib
from bench.kernelbench_sweep import _with_one_child, over_3x_breakdown

GIB = 2**30

# [unix s, phase, ours MiB, {name:pid: MiB}], as GpuMemSampler records it
TIMELINE = [
    [1.0, "verify", 2400.0, {"evk-runner:10": 560.0, "evk-spare:11": 420.0, "evk-reference:12": 1420.0}],
    [1.2, "verify", 4000.0, {"evk-runner:10": 560.0, "evk-candidate:13": 426.0, "evk-reference:12": 3014.0}],
    [1.4, "benchmark", 4100.0, {"evk-runner:10": 1100.0, "evk-candidate:13": 2574.0, "evk-reference:12": 426.0}],
    [1.6, "benchmark", 5000.0, {"evk-runner:10": 560.0, "evk-spare:14": 4440.0}],  # a spare is no forward
]


def test_busiest_child_reads_only_the_forward_roles():
    assert busiest_child_mib([("evk-runner", 9000.0), ("evk-spare", 800.0), ("evk-candidate", 700.0)]) == 700.0
    assert busiest_child_mib([("evk-reference:5", 1200.0), ("evk-candidate:6", 700.0)]) == 1200.0
    assert busiest_child_mib([("evk-runner:1", 560.0), ("evk-spare:2", 420.0)]) is None
    assert timeline_busiest_child_mib(TIMELINE) == 3014.0
    assert timeline_busiest_child_mib([]) is None


def test_one_child_figures_of_a_row_come_from_its_timeline():
    row = {"own_bytes": 1 * GIB, "peak_ours_mib": 5000.0, "timeline": TIMELINE}
    out = _with_one_child(row)
    assert out["peak_one_child_mib"] == 3014.0
    assert out["one_child_over_own"] == round(3014 / 1024, 2)
    assert out["others_at_least_mib"] == 5000 - 3014
    # a row that has the sampler's own figure keeps it; one without either has none
    assert _with_one_child({**row, "peak_one_child_mib": 2000.0})["peak_one_child_mib"] == 2000.0
    bare = _with_one_child({"own_bytes": GIB, "peak_ours_mib": 5000.0})
    assert bare["peak_one_child_mib"] is None and bare["one_child_over_own"] is None
    assert bare["others_at_least_mib"] is None


def test_over_3x_breakdown_counts_only_big_problems_over_3x():
    rows = [
        # over 1 GB and over 3x: counted
        {"own_bytes": 1.1 * GIB, "peak_over_own": 3.9, "one_child_over_own": 2.9, "others_at_least_mib": 1050},
        {"own_bytes": 2 * GIB, "peak_over_own": 3.2, "one_child_over_own": 2.1, "others_at_least_mib": 2300},
        {"own_bytes": 8 * GIB, "peak_over_own": 3.3, "one_child_over_own": 2.6, "others_at_least_mib": 9000},
        # within 3x, or under 1 GB, or without a one-child reading: left out
        {"own_bytes": 4 * GIB, "peak_over_own": 2.4, "one_child_over_own": 1.8, "others_at_least_mib": 2500},
        {"own_bytes": 0.5 * GIB, "peak_over_own": 9.0, "one_child_over_own": 4.0, "others_at_least_mib": 900},
        {"own_bytes": 3 * GIB, "peak_over_own": 3.5, "one_child_over_own": None, "others_at_least_mib": None},
    ]
    b = over_3x_breakdown(rows)
    assert b["n"] == 3
    assert b["one_child_over_own"] == [2.1, 2.6, 2.9]
    assert b["one_child_over_2_5x"] == 2
    assert b["others_at_least_mib"] == {"min": 1050, "median": 2300, "max": 9000}
    assert over_3x_breakdown(rows[3:5]) == {"n": 0, "one_child_over_own": [], "one_child_over_2_5x": 0,
                                            "others_at_least_mib": None}


def test_design_floor_table_sets_each_problem_beside_pytorch_alone():
    """bench/child_memory.compare: PyTorch alone (its reserved peak + one context) and the design floor (+ two more
    contexts) per problem over 1 GB, and the within-3x count where the floor allows it."""
    from bench.child_memory import CONTEXT_MIB, compare

    sweep = [{"problem": "a.py", "own_bytes": 1 * GIB, "peak_ours_mib": 2800.0},  # within 3x, floor allows
             {"problem": "b.py", "own_bytes": 1 * GIB, "peak_ours_mib": 3500.0},  # over, floor allows
             {"problem": "c.py", "own_bytes": 1 * GIB, "peak_ours_mib": 4000.0},  # over, the floor too
             {"problem": "small.py", "own_bytes": 10**8, "peak_ours_mib": 900.0},  # not over 1 GB
             {"problem": "unmeasured.py", "own_bytes": 2 * GIB, "peak_ours_mib": 9000.0}]
    alone = [{"problem": "a.py", "plain": {"reserved_mib": 1024}}, {"problem": "b.py", "plain": {"reserved_mib": 1024}},
             {"problem": "c.py", "plain": {"reserved_mib": 2100}}, {"problem": "small.py", "plain": {"reserved_mib": 90}},
             {"problem": "unmeasured.py", "error": "oom"}]
    out = compare(sweep, alone)
    assert [r["problem"] for r in out["rows"]] == ["a.py", "b.py", "c.py"]
    c = out["rows"][2]
    assert c["alone_over_own"] == round((2100 + CONTEXT_MIB) / 1024, 2)
    assert c["floor_over_own"] == round((2100 + 3 * CONTEXT_MIB) / 1024, 2) > 3
    s = out["summary"]
    assert s["n"] == 3 and s["within_3x"] == 1 and s["floor_over_3x"] == ["c.py"] and s["alone_over_3x"] == []
    assert s["where_floor_allows"] == {"n": 2, "within_3x": 1, "over": ["b.py"]}
