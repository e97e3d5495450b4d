"""A job of more than 1 GB of its own is planned within memory_factor x its own bytes (runtime/devplan.py data_cap,
settings.memory_factor, 3 by default): verify samples its float64 reference and checks the candidate's inputs
by a digest (verify/compare.digest) instead of a second copy; benchmark cuts its aids. The cap is soft (a
job whose leanest plan exceeds it still runs where the free memory holds it) and off at 0. Decided on
injected numbers at KernelBench level-1 sizes; the digest and the candidate's run on the CPU."""

from __future__ import annotations

import types

import pytest
import torch

from evokernel_mcp import settings
from evokernel_mcp.runtime.devplan import CONTEXT_BYTES_ASSUMED, data_cap, plan_benchmark
from evokernel_mcp.verify.compare import digest
from evokernel_mcp.verify.memory import VERIFY_PROCESSES, TensorSpec, plan_device_case

GB = 10**9
H100 = 80 * 2**30
FREE = H100 - 8 * 2**30  # the contexts of the runner, its children and spares
RELU = [TensorSpec(shape=[4096, 393216], dtype="float32")]  # 19_ReLU: 6.4 GB in, 6.4 GB out
NORM = [TensorSpec(shape=[112, 64, 512, 512], dtype="float32")]  # 36_RMSNorm_: 7.5 GB in and out
SMALL = [TensorSpec(shape=[4096, 4096], dtype="float32")]  # 67 MB


def _factor() -> float:
    return settings.Settings().memory_factor  # the default, as a server started without flags has it


def test_the_default_factor_is_three_and_a_big_verify_plans_within_it():
    assert _factor() == 3.0
    own = 2 * RELU[0].nbytes()
    plan = plan_device_case(RELU, RELU, FREE, 200 * GB, total_device=H100, memory_factor=_factor())
    cap = 3 * own - VERIFY_PROCESSES * CONTEXT_BYTES_ASSUMED
    assert plan.cap_bytes == cap and plan.refuse is None
    assert plan.needed_bytes <= cap, "the plan's tensors within 3x the job's own bytes, contexts counted"
    whole = plan_device_case(RELU, RELU, FREE, 200 * GB, total_device=H100, memory_factor=0)
    assert plan.needed_bytes < whole.needed_bytes, "the lean plan needs less than the full one"
    assert plan.ref_hi is False and plan.pristine is False, "float64 sampled, inputs checked by digest"
    off = plan_device_case(RELU, RELU, FREE, 200 * GB, total_device=H100, memory_factor=0)
    assert off.cap_bytes is None and off.ref_hi is True and off.pristine is True, \
        "factor 0: only the free memory limits the job (the float64 reference whole where it fits)"


def test_a_small_job_has_no_cap_and_keeps_every_aid():
    plan = plan_device_case(SMALL, SMALL, FREE, 200 * GB, total_device=H100, memory_factor=_factor())
    assert plan.cap_bytes is None and plan.ref_hi is True and plan.pristine is True
    assert data_cap(10**9, 3.0, 3) is None and data_cap(10**9 + 1, 3.0, 3) is not None


def test_the_cap_is_soft_the_leanest_plan_runs_where_the_free_memory_holds_it():
    plan = plan_device_case(NORM, NORM, FREE, 200 * GB, total_device=H100, memory_factor=1.0)
    assert plan.refuse is None, "a cap never refuses a job"
    assert plan.needed_bytes > plan.cap_bytes and plan.ref_hi is False and plan.pristine is False
    too_small = plan_device_case(NORM, NORM, 20 * GB, 200 * GB, total_device=H100, memory_factor=_factor())
    assert too_small.refuse is not None, "the free memory still refuses what cannot fit"


def test_a_big_benchmark_cuts_its_aids_to_the_cap_and_says_so():
    i = o = RELU[0].nbytes()
    cap = data_cap(i + o, _factor(), 5)
    p = plan_benchmark(i, o, FREE, H100, control=True, refill_sets=1, sample_size=1, cap=cap)
    full = plan_benchmark(i, o, FREE, H100, control=True, refill_sets=1, sample_size=1)
    assert p.needed_bytes <= cap < full.needed_bytes, "without the cap the free memory alone would allow more"
    assert not p.control and p.refill_sets == 0 and p.cap_bytes == cap
    assert "memory cap" in " ".join(p.notes)
    soft = plan_benchmark(i, o, FREE, H100, control=True, refill_sets=1, sample_size=1, cap=GB)
    assert soft.too_big is None and soft.sample_size == 0 and soft.parts["transfer"] == 0, "the leanest plan"
    assert "over the job's memory cap" in soft.notes[-1]
    small = plan_benchmark(64 << 20, 64 << 20, FREE, H100, control=True, refill_sets=1, sample_size=1,
                           cap=data_cap(128 << 20, _factor(), 5))
    assert small.control and small.refill_sets == 1 and small.sample_size == 1


@pytest.mark.parametrize("t", [torch.randn(1000, 37), torch.randn(5, 8, dtype=torch.complex64),
                               torch.randint(0, 7, (999,), dtype=torch.int64), torch.rand(64) > 0.5,
                               torch.randn(64, 64).t(), torch.randn(300).to(torch.bfloat16)])
def test_a_digest_is_stable_and_sees_a_change_a_swap_and_a_balanced_change(t):
    d = digest(t, block_elems=256)
    assert digest(t.clone(), block_elems=256) == d == digest(t, block_elems=4096), "blocks do not change it"
    flat = t.reshape(-1).clone()
    changed = flat.clone()
    changed[7] = flat[3] if flat[7] != flat[3] else ~flat[7] if flat.dtype == torch.bool else flat[7] + 1
    assert digest(changed.reshape(t.shape), block_elems=256) != d
    if flat[0] != flat[-1]:
        swapped = flat.clone()
        swapped[0], swapped[-1] = flat[-1], flat[0]
        assert digest(swapped.reshape(t.shape), block_elems=256)[1] != d[1], "a swap leaves the plain sum"


def test_a_balanced_change_leaves_the_plain_sum_and_moves_the_weighted_one():
    x = torch.arange(1000, dtype=torch.int32)
    y = x.clone()
    y[10] += 5
    y[900] -= 5
    (p0, w0), (p1, w1) = digest(x), digest(y)
    assert p0 == p1 and w0 != w1


def _loaded(fn):
    return types.SimpleNamespace(module=types.SimpleNamespace(run=fn), device="cpu", models={})


@pytest.mark.parametrize("pristine", [True, False])
def test_the_candidate_run_finds_a_mutation_with_a_copy_or_a_digest(pristine):
    from evokernel_mcp.verify.cand_side import cand_run

    x = torch.randn(257, 3)

    def honest(a):
        return a * 2

    def writes_input(a):
        a[100, 1] += 1.0
        return a * 2

    for fn, mutated in ((honest, False), (writes_input, True)):
        loaded = _loaded(fn)
        a = cand_run(loaded, {"op": "run", "seed": 0, "inputs": [x.clone()], "poison": "nan", "keep": True,
                              "pristine": pristine})
        assert a["inputs_mutated"] is mutated
        b = cand_run(loaded, {"op": "run", "seed": 0, "poison": "sentinel", "same_inputs": True,
                              "pristine": pristine})
        assert b["inputs_mutated"] is mutated
        if not mutated:
            assert torch.equal(a["out"], x * 2) and torch.equal(b["out"], x * 2)
    kept, want = loaded.kept_inputs if loaded.kept_inputs else (None, None)
    assert loaded.kept_inputs is None, "run B keeps nothing further (keep was not asked)"
    assert kept is None and want is None



def test_the_benchmarks_post_timing_checks_leave_the_float64_copy_out_under_the_cap(use_settings):
    from evokernel_mcp.benchmark.runner_side import checks_hi

    assert checks_hi(64 << 20, 64 << 20), "a small shape: float64 checks, as before"
    assert not checks_hi(64 << 20, 2 << 30), "outputs over 1 GiB: native, as before"
    assert not checks_hi(8 * GB, 8 << 20), "4_Matrix_vector_multiplication: 8 GB of inputs, capped by default"
    use_settings(memory_factor=0)
    assert checks_hi(8 * GB, 8 << 20), "no cap: only the outputs' size decides"


@pytest.mark.parametrize("body, new", [("return x.relu()", False), ("return x", True), ("return x.view(-1)", True),
                                       ("return x.relu_()", True)])
def test_the_perturbed_kernelbench_candidate_changes_its_own_output_in_place_and_never_an_input(body, new):
    """Outputs x1.01 + 1e-3: in place where the forward made the output (no second copy of a big output), a new
    tensor where the output is an input's storage (returned as is, a view, an in-place op's result)."""
    from evokernel_mcp.kb_candidates import perturbed

    ns: dict = {}
    exec(perturbed(f"import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        {body}\n"), ns)
    x = torch.rand(100) - 0.5
    want = ns["Model"]()(x.clone()).reshape(-1) * 1.01 + 1e-3
    x0 = x.clone() if "relu_" not in body else x.clone().relu_()
    made = []
    orig = ns["_evk_perturb"]

    def spy(o, given):
        made.append(o.untyped_storage().data_ptr())
        got = orig(o, given)
        made.append(got.untyped_storage().data_ptr())
        return got
    ns["_evk_perturb"] = spy
    got = ns["ModelNew"]()(x)
    assert torch.allclose(got.reshape(-1), want) and torch.equal(x, x0), "the inputs as the forward left them"
    assert (made[0] != made[1]) is new


class _Cand:
    """A candidate child's replies, run A (poison NaN) and run B (poison -320), for the runner's judge."""

    def __init__(self, a, b):
        self.outs, self.asked = {"nan": a, "sentinel": b}, []

    def request(self, req, **kw):
        self.asked.append(req["poison"])
        return {"out": self.outs[req["poison"]].clone(), "inputs_mutated": False}


@pytest.mark.parametrize("host", [False, True])
@pytest.mark.parametrize("kind", ["honest", "racy", "unwritten", "wrong"])
def test_a_lean_case_judged_one_run_at_a_time_gives_the_record_of_the_full_judge(kind, host, monkeypatch):
    """verify/runner_side._lean_case (a case within its memory cap: run A judged, then only its digest kept while
    run B arrives) gives the case record judge() gives with both runs at hand; where run A has NaN (unwritten
    elements) it keeps run A and judges both. With the reference's outputs in host memory (devplan.outputs_on_host:
    a 1-2 GB convolution's) the judge reads them where they are, block by block, never as a whole device copy."""
    from evokernel_mcp.runtime import devplan
    from evokernel_mcp.tasks import load_task
    from evokernel_mcp.verify import case as case_mod
    from evokernel_mcp.verify.case import judge
    from evokernel_mcp.verify.compare import SENTINEL
    from evokernel_mcp.verify.runner_side import _lean_case

    task = load_task("vector_add")
    x, y = torch.randn(5000), torch.randn(5000)
    ref = x + y
    a, b = ref.clone(), ref.clone()
    if kind == "racy":
        b[17] = torch.nextafter(b[17], torch.tensor(9.0))
    if kind == "unwritten":
        a[3], b[3] = float("nan"), SENTINEL
    if kind == "wrong":
        a[40] += 1.0
        b[40] += 1.0

    def case():
        return {"native": ref.clone(), "hi": None, "inputs": [x, y], "init_inputs": [], "state": {},
                "plan": {"pristine": False}, "reference_precision": "native", "notes": []}

    cand = _Cand(a, b)
    beside = []  # verify's case: the candidate's reply arrives beside the runner's copy (its export counts)
    monkeypatch.setattr(devplan, "outputs_on_host", lambda i, o, factor, work, reply_beside: beside.append(reply_beside)
                        or host)
    moved, leaves = [], case_mod._leaves
    monkeypatch.setattr(case_mod, "_leaves", lambda obj, device, *r: moved.append(device) or leaves(obj, device, *r))
    lean = _lean_case(task, "small", 0, case(), cand, 1e18, "cpu", "test", None, None, False)
    assert (None in moved) is host, "the reference's outputs: judged where they are, or moved whole"
    assert beside == [True]
    monkeypatch.setattr(case_mod, "_leaves", leaves)
    full = judge(task, "small", 0, case(), {"out": a.clone()}, {"out": b.clone()}, None, device="cpu")
    assert cand.asked == ["nan", "sentinel"]
    keys = ("passed", "mismatches", "nan_count", "unwritten_count", "deterministic", "max_abs_err", "note")
    assert {k: lean.get(k) for k in keys} == {k: full.get(k) for k in keys}
    assert lean["passed"] is (kind in ("honest", "racy")) and lean["deterministic"] is (kind != "racy")


def _ref_loaded(forward):
    mod = types.ModuleType("ref")

    class Model(torch.nn.Module):
        def forward(self, x):
            return forward(x)

    mod.Model = Model
    return types.SimpleNamespace(module=mod, task=None, device="cpu", models={})


def test_a_reference_runs_a_checks_inputs_without_a_copy_and_is_refused_when_it_modifies_them(monkeypatch):
    """ref_expected with own_inputs: the forward on the received inputs themselves, the same outputs as with a
    copy; a reference that writes into its inputs is refused with MODIFIED_INPUTS (the runner asks again)."""
    from evokernel_mcp import candidate as cand
    from evokernel_mcp.verify import sides

    monkeypatch.setattr(cand, "build_reference", lambda task, module, seed, device: module.Model())
    x = torch.randn(300)
    plain = _ref_loaded(lambda t: t * 3)
    a = sides.ref_expected(plain, {"op": "expected", "inputs": [x.clone()], "seed": 0, "hi": False})
    b = sides.ref_expected(plain, {"op": "expected", "inputs": [x.clone()], "seed": 0, "hi": False,
                                   "own_inputs": True})
    assert torch.equal(a["native"], b["native"]) and torch.equal(a["native"], x * 3)
    inplace = _ref_loaded(lambda t: t.mul_(3))
    ok = sides.ref_expected(inplace, {"op": "expected", "inputs": [x.clone()], "seed": 0, "hi": False})
    assert torch.equal(ok["native"], x * 3), "with a copy, an in-place reference is fine"
    with pytest.raises(sides.HarnessError, match=sides.MODIFIED_INPUTS):
        sides.ref_expected(inplace, {"op": "expected", "inputs": [x.clone()], "seed": 0, "hi": False,
                                     "own_inputs": True})


def test_the_runner_asks_again_with_a_copy_when_the_reference_modified_its_inputs():
    from evokernel_mcp.benchmark.runner_side import expected
    from evokernel_mcp.runtime.child_proc import ChildFailed
    from evokernel_mcp.verify.sides import MODIFIED_INPUTS

    class Arms:
        dev, asked = "cuda", []

        def ask(self, child, req, max_bytes=0, handed=False, device=None):
            self.asked.append(req.get("own_inputs", False))
            if req.get("own_inputs"):
                raise ChildFailed("harness", f"HarnessError: {MODIFIED_INPUTS}: ask again with a copy")
            return {"native": 1}

    arms, x = Arms(), [1]
    got = expected(arms, None, x, 0, hi=False)
    assert got == {"native": 1, "inputs": x} and got["inputs"] is x and arms.asked == [True, False]
    arms.asked = []
    assert expected(arms, None, x, 0, hi=True) == {"native": 1, "inputs": x} and arms.asked == [False], "float64: a copy"


def test_an_arg_reductions_reference_sends_no_inputs_back_and_the_runner_judges_with_its_own(monkeypatch):
    from evokernel_mcp import candidate as cand
    from evokernel_mcp.benchmark.runner_side import expected
    from evokernel_mcp.verify import sides

    monkeypatch.setattr(cand, "build_reference", lambda task, module, seed, device: module.Model())
    x = torch.randn(4, 5)
    reply = sides.ref_expected(_ref_loaded(lambda t: torch.argmax(t, dim=1)),
                               {"op": "expected", "inputs": [x.clone()], "seed": 0, "hi": False})
    assert reply["arg_reductions"] and "inputs" not in reply, "8 GiB sent back was a second copy in the reference"

    class Arms:
        dev = "cpu"

        def ask(self, child, req, max_bytes=0, handed=False, device=None):
            return dict(reply)
    mine = [x]
    assert expected(Arms(), None, mine, 0, hi=False)["inputs"] is mine


def test_verifys_reference_runs_on_its_inputs_in_a_lean_case_and_again_on_fresh_ones_if_it_wrote_into_them(
        monkeypatch):
    """sides._own_inputs_outputs: the forwards on the inputs themselves (no copy); where the reference wrote into
    them, the same inputs made afresh and the forwards run again with copies, so the candidate gets pristine
    inputs and the outputs of pristine inputs."""
    from evokernel_mcp.verify import sides
    from evokernel_mcp.verify.refout import _native_forward

    x = torch.randn(300)
    monkeypatch.setattr(sides, "_make_inputs", lambda loaded, shape, seed, probe: [x.clone()])
    req = {"shape": "small", "seed": 0}

    class Times3(torch.nn.Module):
        def __init__(self, inplace):
            super().__init__()
            self.inplace = inplace

        def forward(self, t):
            return t.mul_(3) if self.inplace else t * 3

    for inplace in (False, True):
        model = Times3(inplace)
        given = [x.clone()]
        inputs, out = sides._own_inputs_outputs(None, given, req, lambda xs: _native_forward(model, xs))
        assert torch.equal(inputs[0], x) and torch.equal(out, x * 3)
        assert (inputs is given) is (not inplace), "the same tensors unless the reference wrote into them"


LOSS_IN = [TensorSpec(shape=[32768, 32768], dtype="float32")] * 2  # 94_MSELoss: 8.6 GB in, a scalar out
SCALAR = [TensorSpec(shape=[], dtype="float32")]


def test_within_a_cap_no_process_keeps_a_second_copy_of_the_inputs_even_where_one_would_fit_the_cap():
    """A loss's forward makes temporaries of twice its inputs that no plan sees before it runs: with a pristine
    copy beside them the reference and the candidate each held 3 x the inputs (25 GiB of 8 GiB on an H100).
    Under a cap the inputs are checked by digest, and the comparison blocks are the smaller LEAN_CHUNK."""
    from evokernel_mcp.verify.memory import DEFAULT_CHUNK, LEAN_CHUNK

    plan = plan_device_case(LOSS_IN, SCALAR, FREE, 200 * GB, total_device=H100, memory_factor=_factor())
    assert plan.cap_bytes is not None and plan.refuse is None
    assert 2 * sum(s.nbytes() for s in LOSS_IN) <= plan.cap_bytes, "a pristine copy alone would fit the cap"
    assert plan.pristine is False and plan.chunk_elems == LEAN_CHUNK < DEFAULT_CHUNK
    off = plan_device_case(LOSS_IN, SCALAR, FREE, 200 * GB, total_device=H100, memory_factor=0)
    assert off.pristine is True and off.chunk_elems == DEFAULT_CHUNK, "no cap: the copy and the full blocks"


def test_a_candidate_loads_its_inputs_then_runs_on_them_and_still_finds_a_mutation():
    from evokernel_mcp.verify.cand_side import cand_run

    x = torch.randn(64, 5)
    for fn, mutated in ((lambda a: a * 2, False), (lambda a: a.mul_(2), True)):
        loaded = _loaded(fn)
        got = cand_run(loaded, {"op": "run", "seed": 0, "inputs": [x.clone()], "keep": True, "load_only": True,
                                "pristine": False})
        assert got == {"loaded": True} and "out" not in got, "nothing ran"
        a = cand_run(loaded, {"op": "run", "seed": 0, "poison": "nan", "keep": True, "same_inputs": True,
                              "pristine": False})
        assert a["inputs_mutated"] is mutated and torch.equal(a["out"], x * 2)
        b = cand_run(loaded, {"op": "run", "seed": 0, "poison": "sentinel", "same_inputs": True,
                              "pristine": False})
        assert b["inputs_mutated"] is mutated


class _Courier:
    def __init__(self):
        self.handing = False

    def handing_over(self):
        import contextlib

        @contextlib.contextmanager
        def cm():
            self.handing = True
            try:
                yield self
            finally:
                self.handing = False
        return cm()


class _DeviceCand:
    """A candidate child on a device: records each request, whether it was handed over, and whether the runner
    still held its copy of the inputs when it was made."""

    def __init__(self, case):
        self.courier, self.case, self.log = _Courier(), case, []

    def request(self, req, **kw):
        from evokernel_mcp.runtime.messages import CHILD_REQUEST

        CHILD_REQUEST.validate_python(req)  # what the child's end checks first
        held = any(t.numel() for t in self.case["inputs"])
        self.log.append((req.get("load_only", False), "inputs" in req, req.get("same_inputs"), self.courier.handing,
                         held))
        return {"loaded": True} if req.get("load_only") else {"out": torch.zeros(3), "inputs_mutated": False}


@pytest.mark.parametrize("pristine", [True, False])
def test_within_a_cap_the_runner_lets_its_copy_of_the_inputs_go_before_the_candidates_forward(pristine):
    from evokernel_mcp.verify.runner_side import _candidate_runs

    case = {"native": torch.zeros(3), "inputs": [torch.randn(100)], "init_inputs": [], "state": {},
            "plan": {"pristine": pristine}}
    cand = _DeviceCand(case)
    runs = _candidate_runs(cand, case, 0, 1e18, "cuda", "test")
    assert len(runs) == 2 and case["inputs"][0].numel() == 0, "the runner's copy is gone after run A"
    if pristine:  # the full plan: run A carries the inputs, the runner's copy goes after it
        assert cand.log == [(False, True, False, False, True), (False, False, True, False, False)]
    else:  # loaded first (handed over: one copy), then both runs on the kept inputs without the runner's copy
        assert cand.log == [(True, True, None, True, True), (False, False, True, False, False),
                            (False, False, True, False, False)]


@pytest.mark.parametrize("arg,cap", [(False, 1 << 20), (True, 1 << 20), (False, 3 << 20), (False, None)])
def test_over_its_cap_with_two_copies_the_runner_hands_the_inputs_over_from_host_memory(arg, cap, monkeypatch):
    from evokernel_mcp.runtime import devmem, devplan
    from evokernel_mcp.verify.runner_side import _candidate_runs

    moved = []
    # the cap data_cap leaves for 1 MiB of inputs: under their two copies (1 MiB), over them (3 MiB), none (a small job)
    monkeypatch.setattr(devplan, "data_cap", lambda own, factor, processes: cap)

    def on_host(x):  # (on the CPU every tensor is on the host already: record what would move)
        moved.append(x)
        return [t.clone() for t in x]
    monkeypatch.setattr(devmem, "on_host", on_host)
    big = torch.randn(1 << 18)  # 1 MiB: a transfer by fd
    case = {"native": torch.zeros(3), "inputs": [big], "init_inputs": [], "state": {}, "plan": {"pristine": False},
            **({"arg_reductions": [{"dim": 0}]} if arg else {})}
    cand, sent = _DeviceCand(case), []
    request = cand.request
    cand.request = lambda req, **kw: (sent.extend(req.get("inputs") or []), request(req, **kw))[1]
    _candidate_runs(cand, case, 0, 1e18, "cuda", "test")
    if arg or cap != 1 << 20:  # the judge reads an arg-reduction's inputs; two copies within the cap cost nothing
        assert moved == [] and sent[0] is big
    else:  # the export the candidate adopts is then the only device copy
        assert len(moved) == 1 and moved[0][0] is big and sent[0] is not big and torch.equal(sent[0], big)


def test_a_nan_anywhere_in_a_big_output_is_found_block_by_block(monkeypatch):
    from evokernel_mcp.verify import compare
    from evokernel_mcp.verify.case import has_nan

    monkeypatch.setattr(compare, "BLOCK_ELEMS", 64)
    x = torch.zeros(1000)
    assert has_nan({"o": x}, "cpu") is False and has_nan([x.view(10, 100).t()], "cpu") is False
    x[999] = float("nan")  # the last, partial block
    assert has_nan([x], "cpu") is True and has_nan([x.view(10, 100).t()], "cpu") is True
    assert has_nan([torch.zeros(0)], "cpu") is False


def _digest_on_the_host(t, block_elems):
    """The digest as two sums of per-block sums in Python integers (no wrapping until the end)."""
    from evokernel_mcp.verify.compare import _WEIGHT, _bits

    if t.is_complex():
        t = torch.view_as_real(t)
    x = _bits(t).reshape(-1)
    plain = weighted = 0
    for s in range(0, x.numel(), block_elems):
        blk = x[s:s + block_elems].to(torch.int64)
        pos = torch.arange(s, s + blk.numel(), dtype=torch.int64) * _WEIGHT + 1
        plain += int(blk.sum())
        weighted += int((blk * pos).sum())
    return plain % (1 << 64), weighted % (1 << 64)


@pytest.mark.parametrize("t", [torch.randn(10_007), torch.randn(3001, dtype=torch.float64),
                               torch.randint(-2**62, 2**62, (4099,), dtype=torch.int64),
                               torch.randn(77, 5, dtype=torch.complex128), torch.randn(999).to(torch.float16)])
def test_a_digest_summed_on_the_device_is_the_host_sum_of_its_blocks_mod_2_64(t):
    """The sums wrap in int64 where the tensor is and are read once: the same values as summing each block's sums
    in Python integers (int64 near 2**62 overflows within a block and across blocks); an 8-byte input, which the
    digest reads in place, is left as it was."""
    kept = t.clone()
    assert digest(t, block_elems=1000) == _digest_on_the_host(t, 1000) == _digest_on_the_host(t, 1 << 24)
    assert torch.equal(t, kept)


def test_a_digest_makes_no_temporary_bigger_than_one_small_block():
    """A digest runs just before a forward, and the allocator keeps what it freed: its temporaries are at most
    16 MiB each (DIGEST_BLOCK_ELEMS int64s), whatever the tensor's size (32 MiB here)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from evokernel_mcp.verify.compare import DIGEST_BLOCK_ELEMS

    sizes = []

    class Sizes(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for o in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(o, torch.Tensor) and o.untyped_storage().data_ptr() != x.untyped_storage().data_ptr():
                    sizes.append(o.numel() * o.element_size())
            return out

    x = torch.randn(1 << 23)
    with Sizes():
        digest(x)
    assert sizes and max(sizes) <= 8 * DIGEST_BLOCK_ELEMS == 16 << 20
