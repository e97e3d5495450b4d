"""Cutting a timed loop's device activity records into one span per repetition (activity.spans_ms) and
the calibration that learns which kernels are the harness's own (activity.calibrate)."""

from __future__ import annotations

from fakegpu import recording_session

from evokernel_mcp.benchmark import activity as act

PLAN = act.Plan(flush_names=frozenset({"flush"}), flush_count=1, separator_names=frozenset({"spin"}), per_call=2)


def _us(name, s, e):
    return (name, int(s * 1000), int(e * 1000))


def test_multi_kernel_call_span_includes_the_gap_between_its_kernels():
    acts = [_us("spin", 0, 50), _us("flush", 50, 120), _us("k1", 121, 125), _us("k2", 127, 131),
            _us("flush", 131, 200), _us("k1", 201, 205), _us("k2", 205, 209)]
    assert act.spans_ms(acts, PLAN, 2) == [0.010, 0.008]


def test_the_sleep_cushion_closes_a_repetition_and_order_of_records_does_not_matter():
    acts = [_us("flush", 0, 70), _us("k1", 71, 80), _us("spin", 80, 500), _us("flush", 500, 570),
            _us("k1", 571, 579)]
    assert act.spans_ms(list(reversed(acts)), PLAN, 2) == [0.009, 0.008]


def test_counts_that_do_not_add_up_are_reported_not_guessed():
    acts = [_us("flush", 0, 70), _us("k1", 71, 80), _us("flush", 80, 150)]
    assert "no device activity" in act.spans_ms(acts, PLAN, 2)
    assert act.spans_ms(acts, PLAN, 3) == "2 repetitions in the activity records, 3 timed"
    assert act.spans_ms(acts[:2], PLAN, 1) == [0.009]
    assert "outside any repetition" in act.spans_ms([_us("k1", 0, 1)] + acts, PLAN, 2)
    two = act.Plan(frozenset({"f"}), 2, frozenset(), None)
    assert "calibration said 2" in act.spans_ms([_us("f", 0, 1), _us("k", 1, 2)], two, 1)


def test_warm_cache_groups_by_launches_per_call():
    warm = act.Plan(frozenset(), 0, frozenset({"spin"}), 2)
    acts = [_us("spin", 0, 9), _us("a", 10, 12), _us("b", 12, 15), _us("a", 15, 17), _us("b", 18, 20)]
    assert act.spans_ms(acts, warm, 2) == [0.005, 0.005]
    assert "4 device activities for 3" in act.spans_ms(acts, warm, 3)
    assert "not constant" in act.spans_ms(acts, act.Plan(frozenset(), 0, frozenset(), None), 2)


class _Recorder:
    """A fake profiler: ops append activities to .acts while a session is open."""

    def __init__(self):
        self.acts, self.t = None, 0

    def op(self, *names):
        def run():
            for n in names:
                if self.acts is not None:
                    self.acts.append((n, self.t, self.t + 5))
                self.t += 10
        return run

    def session(self):
        return recording_session(self)


def test_calibrate_learns_names_counts_and_refuses_clashes():
    r = _Recorder()
    plan = act.calibrate(r.session, [r.op("k1", "k2")], r.op("flushA", "flushB"), r.op("spin"), lambda: None)
    assert plan == act.Plan(frozenset({"flushA", "flushB"}), 2, frozenset({"spin"}), 2)
    clash = act.calibrate(r.session, [r.op("flushA")], r.op("flushA"), None, lambda: None)
    assert isinstance(clash, str) and "named like the harness" in clash
    none = act.calibrate(r.session, [r.op()], r.op("flushA"), None, lambda: None)
    assert isinstance(none, str) and "no device activity" in none
