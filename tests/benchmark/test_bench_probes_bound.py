"""Deterministic checks of what makes a benchmark time unforgeable (no timing assertions): the per-repetition
input contents, the probes of every repetition judged by verify's bar, and the runner's bound on reported
times (given these block records, this verdict)."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch

from evokernel_mcp.benchmark import probes, timing, verdict
from evokernel_mcp.benchmark.blocks import BlockTimer
from evokernel_mcp.benchmark.bound import common_host_per_rep, runner_bound
from evokernel_mcp.tasks import load_task

TASK = load_task("vector_add")


def test_no_input_set_is_timed_twice_in_a_row_on_the_same_content():
    for n_sets in (1, 2, 4, 16):
        for n_contents in (2, 3):
            for g in range(200):
                assert probes.content_of(g, n_sets, n_contents) != probes.content_of(g + n_sets, n_sets, n_contents)


def _timer(fn, contents, table, chunks=None):
    x = contents[0]
    return BlockTimer(fn, [[t.clone() for t in x] for _ in range(4)], timing.TimingOptions(max_time_s=0.1),
                      gpu=False, refill_pool=contents[1:], sample_size=0, probe_table=table, probe_chunks=chunks)


def _judge(fn, blocks=(3, 5, 4, 6), n=1000, dtype=torch.float32):
    """Time `fn` block by block on the host path; every block's probes judged against x + y."""
    g = torch.Generator().manual_seed(0)
    contents = [[torch.randn(n, generator=g).to(dtype), torch.randn(n, generator=g).to(dtype)] for _ in range(3)]
    table = probes.position_table(5)
    expected = [{"native": a + b, "hi": a.double() + b.double(), "arg_reductions": {}} for a, b in contents]
    bar = probes.ProbeBar(TASK, expected, table)
    bt = _timer(fn, contents, table, bar.chunks)
    bt.warm_up()
    out, first = [], 0
    for k in blocks:
        bt.time_block(k)
        out.append(bar.check(bt.block_probes, first, len(bt.arg_sets)))
        first += k
    return out


def test_probes_pass_an_honest_candidate_and_catch_skipped_stale_and_cached_answers():
    assert all(c["passed"] and c["checked"] == k for c, k in zip(_judge(torch.add), (3, 5, 4, 6)))
    state = {"n": 0, "out": None}

    def skip_alternate(x, y):  # a quarter of the work on every other call, the rest of a reused buffer stale
        state["n"] += 1
        if state["out"] is None:
            state["out"] = torch.empty_like(x)
        q = x.numel() if state["n"] % 2 else x.numel() // 4
        torch.add(x[:q], y[:q], out=state["out"][:q])
        return state["out"].clone()

    seen: dict = {}

    def by_address(x, y):
        return seen.setdefault((x.data_ptr(), y.data_ptr()), x + y)

    def bf16(x, y):
        return (x.bfloat16() + y.bfloat16()).float()

    for fn in (skip_alternate, by_address, bf16):
        checks = _judge(fn)
        bad = [c for c in checks if not c["passed"]]
        assert bad and "verify's bar" in bad[0]["note"], (fn.__name__, checks)


def _table_reader(x, y):
    """Computes only the positions of the probe table it finds in its own process (the harness's Prober), and
    leaves the rest of its output zero."""
    import gc

    # the Prober with a position table (a GPU-path one from an earlier test may still be uncollected)
    prober = next(o for o in gc.get_objects() if isinstance(o, probes.Prober) and o.idx is not None)
    out = torch.zeros_like(x)
    pos = torch.unique(prober.idx.reshape(-1) % x.numel())
    out[pos] = x[pos] + y[pos]
    return out


@pytest.mark.parametrize("n,dtype", [(1000, torch.float32), (4096, torch.bfloat16), (200_000, torch.float32)])
def test_chunk_sums_catch_a_candidate_that_computes_only_the_probed_positions(n, dtype):
    checks = _judge(_table_reader, n=n, dtype=dtype)
    assert not checks[0]["passed"] and "chunk sum" in checks[0]["note"], checks[0]
    honest = _judge(torch.add, n=n, dtype=dtype)
    assert all(c["passed"] for c in honest), honest


def test_chunk_bar_is_the_sum_of_verify_bars_so_an_output_within_them_passes():
    """Every element off by just under its own bar, all in one direction: each chunk's sums sit at the edge of
    their bar and pass; just over it in one element's worth fails."""
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(5000, generator=g), torch.randn(5000, generator=g)
    ref = a.double() + b.double()
    table = probes.position_table(3)
    bar = probes.ProbeBar(TASK, [{"native": (a + b), "hi": ref, "arg_reductions": {}}], table)
    width = bar.exp.shape[2]
    th = bar.thr[0, 0]
    sums = [k == 1 for k in bar.kinds]
    col = sums.index(True)
    row = bar.exp[0, 0].clone()
    row[col] += 0.999 * th[col]
    assert bar.check(row[None], 0, 1)["passed"]
    row[col] = bar.exp[0, 0, col] + 1.001 * th[col]
    bad = bar.check(row[None], 0, 1)
    assert not bad["passed"] and "chunk sum" in bad["note"] and row.numel() == width
    assert probes.chunk_len(10**6) == probes.CHUNK_LEN_MAX and probes.chunk_len(10**9) == -(-10**9 // 256)
    assert probes.chunk_len(1000) == 1000 and probes.chunk_len(10) == 10


def test_a_cache_keyed_by_address_and_version_never_hits():
    memo: dict = {}
    computed = {"n": 0}

    def by_version(x, y):
        key = (x.data_ptr(), x._version, y.data_ptr(), y._version)
        if key not in memo:
            computed["n"] += 1
            memo[key] = x + y
        return memo[key]

    checks = _judge(by_version)
    assert all(c["passed"] for c in checks)
    timed = sum((3, 5, 4, 6))
    assert computed["n"] >= timed  # every timed repetition computed (warm-up calls may hit: no refill there)


def _blocks(n, k, per_rep_ms, unaccounted_ms, scale=1.0, noise_ms=0.0, seed=0):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        true = k * per_rep_ms
        out.append({"k": k, "sum_ms": true * scale, "wall_ms": true + unaccounted_ms + abs(rng.gauss(0, noise_ms))})
    return out


def _run(n, warm=2):
    return SimpleNamespace(rounds=[{}] * n, warmup_calls={"baseline": warm, "candidate": warm, "control": warm})


def test_runner_bound_given_these_blocks_this_verdict():
    n, warm = 30, 2
    base = _blocks(n + warm, 20, 1.0, 3.0, noise_ms=0.5, seed=1)
    ctrl = _blocks(n + warm, 20, 1.0, 3.0, noise_ms=0.5, seed=2)
    honest = _blocks(n + warm, 20, 0.5, 3.0, noise_ms=0.5, seed=3)  # twice as fast, honestly reported
    forged = _blocks(n + warm, 20, 1.0, 3.0, scale=0.35, noise_ms=0.5, seed=3)  # reports 0.35 x its time
    slight = _blocks(n + warm, 20, 1.0, 3.0, scale=0.9, noise_ms=0.5, seed=3)  # within the allowance
    ok = runner_bound(_run(n), {"baseline": base, "control": ctrl, "candidate": honest})
    assert ok["passed"] and abs(ok["excess_ms"]) < 1.0 and ok["rounds"] == n
    bad = runner_bound(_run(n), {"baseline": base, "control": ctrl, "candidate": forged})
    assert not bad["passed"] and bad["excess_ms"] > 10 and "runner's clock" in bad["detail"]
    assert runner_bound(_run(n), {"baseline": base, "control": ctrl, "candidate": slight})["passed"]
    # without a control arm: only the fraction and the fixed allowance
    assert not runner_bound(_run(n), {"baseline": base, "candidate": forged})["passed"]
    assert runner_bound(_run(0), {"baseline": base, "candidate": forged}) is None
    # a noisy control arm (a loaded host) widens the allowance by its spread
    noisy = _blocks(n + warm, 20, 1.0, 3.0, noise_ms=40.0, seed=4)
    wide = runner_bound(_run(n), {"baseline": base, "control": noisy, "candidate": honest})
    assert wide["allowance_ms"] > ok["allowance_ms"] + 5


def _gpu_blocks(n, k, kernel_ms, harness_ms_per_rep, fixed_ms=1.5, scale=1.0, jitter=0.02, seed=0):
    """GPU-shaped block records: the runner's wall = request + profiler start + common sleep + k x (flush +
    kernel) + sync + reply (harness_ms_per_rep: the flush and the sleep per repetition); reported: k x kernel."""
    rng = random.Random(seed)
    return [{"k": k, "sum_ms": k * kernel_ms * scale,
             "wall_ms": fixed_ms + k * (kernel_ms + harness_ms_per_rep) * (1 + abs(rng.gauss(0, jitter)))}
            for _ in range(n)]


@pytest.mark.parametrize("kernel_ms,k", [(0.05, 300), (1.0, 15), (5.0, 3)])
def test_gpu_blocks_a_rescaled_timer_is_caught_where_the_kernel_dominates(kernel_ms, k):
    n, warm, harness = 30, 2, 0.14  # an H100's 256 MiB read-only flush (~80 us) and a 2 x (10 + 20) us sleep
    base = _gpu_blocks(n + warm, k, kernel_ms, harness, seed=1)
    ctrl = _gpu_blocks(n + warm, k, kernel_ms, harness, seed=2)
    forged = _gpu_blocks(n + warm, k, kernel_ms, harness, scale=0.35, seed=3)
    bad = runner_bound(_run(n), {"baseline": base, "control": ctrl, "candidate": forged}, gpu=True)
    assert not bad["passed"] and bad["enforced"], bad["detail"]
    assert bad["reported_speedup"] == pytest.approx(1 / 0.35, rel=0.01) and bad["wall_speedup"] < 1.05
    honest = _gpu_blocks(n + warm, k, kernel_ms / 3, harness, seed=3)  # 3x faster, honestly reported
    assert runner_bound(_run(n), {"baseline": base, "control": ctrl, "candidate": honest}, gpu=True)["passed"]


def test_gpu_blocks_behind_a_large_fixed_cost_still_catch_a_rescaled_timer():
    """As measured on one H100: 45 ms of each block is fixed harness work (request, profiler start, reply), the
    kernel is 2.65 ms and a block holds 4 repetitions. A 0.35x timer is caught; honest reports pass."""
    n, warm, k = 20, 2, 4
    base = _gpu_blocks(n + warm, k, 2.65, 0.1, fixed_ms=45.0, jitter=0.01, seed=1)
    ctrl = _gpu_blocks(n + warm, k, 2.65, 0.1, fixed_ms=45.0, jitter=0.01, seed=2)
    forged = _gpu_blocks(n + warm, k, 2.65, 0.1, fixed_ms=45.0, scale=0.35, jitter=0.01, seed=3)
    bad = runner_bound(_run(n), {"baseline": base, "control": ctrl, "candidate": forged}, gpu=True)
    assert not bad["passed"], bad["detail"]
    for t in (2.65, 1.3, 5.3):
        cand = _gpu_blocks(n + warm, k, t, 0.1, fixed_ms=45.0, jitter=0.01, seed=3)
        assert runner_bound(_run(n), {"baseline": base, "control": ctrl, "candidate": cand}, gpu=True)["passed"]


def test_gpu_blocks_an_honest_launch_bound_kernel_never_misfires():
    """A 2 us kernel behind an 80 us flush: the walls are almost all harness work, the runner's speedup is
    compressed toward 1, and honest reports of a 2x faster or 2x slower kernel pass (one-sided test)."""
    n, warm, k = 30, 2, 400
    base = _gpu_blocks(n + warm, k, 0.002, 0.14, jitter=0.05, seed=1)
    ctrl = _gpu_blocks(n + warm, k, 0.002, 0.14, jitter=0.05, seed=2)
    for t in (0.001, 0.004, 0.0021):
        cand = _gpu_blocks(n + warm, k, t, 0.14, jitter=0.05, seed=3)
        got = runner_bound(_run(n), {"baseline": base, "control": ctrl, "candidate": cand}, gpu=True)
        assert got["passed"], (t, got["detail"])
        assert 0.9 < got["wall_speedup"] < 1.1


def test_a_deferred_block_answers_when_it_has_run_and_gives_its_times_after():
    from evokernel_mcp.benchmark import sides

    x = torch.randn(100)
    bt = BlockTimer(torch.add, [(x, x.clone())], timing.TimingOptions(max_time_s=0.1), gpu=False, sample_size=1)
    bt.warm_up()
    loaded = SimpleNamespace(arms={"candidate": bt})
    assert sides.arm_block(loaded, {"name": "candidate", "k": 3, "defer": True}) == {"ran": 3}
    assert bt.rep == 0  # the block ran; its times, sample and repetition count wait for arm_times
    rep = sides.arm_times(loaded, {"name": "candidate"})
    assert len(rep["times"]) == 3 and rep["first_rep"] == 0 and bt.rep == 3 and bt.sampler.seen == 1
    with pytest.raises(RuntimeError):
        bt.finish_block()
    assert len(sides.arm_block(loaded, {"name": "candidate", "k": 2})["times"]) == 2 and bt.rep == 5


def test_common_sleep_is_sized_for_the_slowest_host_with_the_candidates_claim_capped():
    assert common_host_per_rep({"baseline": 10e-6, "control": 12e-6, "candidate": 5e-6}) == 12e-6
    assert common_host_per_rep({"baseline": 10e-6, "candidate": 40e-6}) == 40e-6  # a Triton launcher: honest, kept
    assert common_host_per_rep({"baseline": 10e-6, "candidate": 1.0}) == pytest.approx(110e-6)  # inflated: capped
    assert common_host_per_rep({"baseline": 1e-3, "candidate": 1.0}) == pytest.approx(4e-3)
    assert common_host_per_rep({"baseline": None, "candidate": 1e-5}) is None
    assert timing.cushion_ms(100, 10e-6) == pytest.approx(6.0) and timing.cushion_ms(1, 0) == 0.2


def test_verdict_reads_probes_and_the_runner_bound():
    base = {"shape": "s", "candidate": {"times_ms": [1.0] * 10, "host_timing": True}, "check_timed": {"passed": True},
            "check_fresh": {"passed": True}}
    assert verdict.judge_shape(base, None)[0]
    v = verdict.judge_shape({**base, "check_probes": {"passed": False, "checked": 40, "note": "rep 7"}}, None)
    assert v[:2] == (False, "wrong_output_in_timed_call") and "check_probes" in v[2] and "rep 7" in v[2]
    v = verdict.judge_shape({**base, "runner_bound": {"passed": False, "detail": "read 12 ms"}}, None)
    assert v == (False, "time_below_runner_bound", "read 12 ms")
    v = verdict.judge_shape({**base, "confirm": {"runner_bound": {"passed": False, "detail": "again"}}}, None)
    assert v[:2] == (False, "time_below_runner_bound")
    v = verdict.judge_shape({**base, "confirm": {"check_probes": {"passed": False, "note": "rep 3"}}}, None)
    assert v[:2] == (False, "wrong_output_in_timed_call") and v[2].startswith("confirm")
    assert verdict.judge_shape({**base, "runner_bound": {"passed": True}, "check_probes": {"passed": True}}, None)[0]
    # a bound marked not enforced is reported only
    assert verdict.judge_shape({**base, "runner_bound": {"passed": False, "enforced": False}}, None)[0]


def test_host_timing_band_is_at_least_the_floor_and_says_so():
    from evokernel_mcp.benchmark import stats

    base = [1.0, 1.001, 0.999, 1.0, 1.0005, 0.9995, 1.0, 1.0]
    tight = stats.noise_floor(base, base)
    assert tight.band == (1.0, 1.0) and "host" not in tight.source
    host = stats.noise_floor(base, base, min_half=stats.HOST_BAND_FLOOR)
    assert host.band[1] == pytest.approx(1.01) and "at least +/-1.0%" in host.source
    assert not stats.resolved((1.004, 1.008), host) and stats.resolved((1.02, 1.03), host)


def test_signed_chunk_sums_tell_the_answer_to_other_inputs_of_the_same_kind():
    """Non-negative inputs (KernelBench's torch.rand): every output's plain sum is dominated by its mean, so an
    output computed from OTHER inputs (left in freed memory, or cached) matched plain chunk sums within the
    bar. The signed sums take the mean out: the stale answer fails, the right one passes (GPU rows: no table)."""
    g = torch.Generator().manual_seed(4)
    sets = [(torch.rand(512, 512, generator=g), torch.rand(512, 512, generator=g)) for _ in range(2)]
    expected = [{"native": a @ b, "hi": a.double() @ b.double(), "arg_reductions": {}} for a, b in sets]
    bar = probes.ProbeBar(TASK, expected, None)
    prober = probes.Prober(None, bar.chunks)
    prober.take(sets[0][0] @ sets[0][1], 0)  # content 0, right
    prober.take(sets[1][0] @ sets[1][1], 1)  # content 0's repetition answered with content 1's output
    rows = prober.end()
    assert bar.check(rows[:1], 0, 1, [0])["passed"]
    bad = bar.check(rows[1:], 1, 1, [0])
    assert not bad["passed"] and "chunk sum" in bad["note"], bad
