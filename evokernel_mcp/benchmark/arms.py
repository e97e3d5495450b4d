"""The benchmark's arms as the runner drives them (harness code only): the children of one job and the arm
each hosts (Arms), and the interleaved timing of their blocks (interleave: rounds, the runner's bound on the
reported times, the probe check of every repetition, lean and parked arms of a big shape). Used by
runner_side.py, which plans each shape and checks the candidate's outputs after timing."""

from __future__ import annotations

import time
from typing import Any

from evokernel_mcp.benchmark.bound import common_host_per_rep, cushion_ms, runner_bound
from evokernel_mcp.benchmark.room import meta
from evokernel_mcp.runtime import cpus
from evokernel_mcp.runtime.devmem import on_host, release_cached
from evokernel_mcp.runtime.proctree import tree_cpu
from evokernel_mcp.runtime.spares import handed_over, note, wall_deadline
from evokernel_mcp.tasks import Task
from evokernel_mcp.verify.runner_side import OUTPUT_SLACK, _nbytes

# Input sets of other seeds each arm copies into its timed storage between blocks (defeats caching by
# address during timing): two when the inputs are small, one above this (each arm holds the pool); the
# candidate keeps fewer sampled repetitions above it too.
POOL_FULL_BYTES = 512 << 20


class Arms:
    """The children of one job and the arms they host, one fresh child each: the candidate, the baseline
    and, on request, the control arm (a byte-identical copy of the baseline in a child of its own, so that
    its ratio to the baseline measures what separate processes alone make of identical code)."""

    def __init__(self, cand, base, task: Task, deadline: float, ctrl=None, cpu: int | None = None, dev: str = "cpu",
                 base_is_reference: bool = False):
        self.cand, self.base, self.task, self.deadline, self.ctrl = cand, base, task, deadline, ctrl
        self.dev = dev  # where the runner compares outputs
        # the baseline is the task's reference loaded afresh (baseline "pytorch"): its process can answer for the
        # reference after its timing (room.hand_over), and reference_gone says the cached one was stopped
        self.base_is_reference, self.reference_gone = base_is_reference, False
        self.via_host = False  # this shape's staged inputs come through host memory (shape_case.via_host)
        self.control_skipped = False  # asked for, never started (shape_case.every_shape_capped)
        self.cpu = None if cpu is None else _pin(self.children().values(), cpu)

    @property
    def control(self) -> bool:
        return self.ctrl is not None

    def children(self) -> dict[str, Any]:
        out = {"baseline": self.base, "candidate": self.cand}
        if self.ctrl is not None:
            out["control"] = self.ctrl
        return out

    def ask(self, child, req: dict[str, Any], max_bytes: int = 1 << 20, handed: bool = False,
            device: str | None = None) -> Any:
        """One request. handed: the request's tensors are the child's to keep (courier.handing_over: a host
        tensor is made on the child's device in one copy, and that copy is the child's own); device "cpu": the
        reply's tensors arrive in host memory (None: a CUDA tensor on the runner's device)."""
        with handed_over(child, handed):
            return child.request(req, timeout_s=wall_deadline(self.deadline), max_bytes=max_bytes, device=device)

    def inputs(self, ref, req: dict[str, Any], staged: bool) -> Any:
        """A case's inputs made by the reference (op "case", inputs_only); staged (devplan.host_staged): moved to the
        host (pinned) once here, so that the runner holds no device copy while it passes them on, nor the cached
        block it came in (a staged shape is big: trim_between_cases would keep up to 512 MiB of it); with via_host,
        they come through host memory instead (child.serve's through_host: no export copy in the reference)."""
        host = staged and self.via_host
        x = self.ask(ref, {**req, "op": "case", "inputs_only": True, "through_host": host}, max_bytes=1 << 42,
                     device="cpu" if host else None)["inputs"]
        if staged and not host:
            x = on_host(x)
            release_cached()
        return x


def _pin(children, cpu: int) -> int | None:
    """Host timing: every arm's process on one CPU (cpus.arm_cpus: a lasting difference between CPUs must not
    read as a difference between the arms); the CPU, or None where not pinned."""
    if all([cpus.pin_tree(c.proc.pid, cpu) for c in children]):
        return cpu
    note("benchmark: arms not pinned to CPU %d (not allowed here); each runs where the scheduler puts it", cpu)
    for c in children:
        cpus.release_tree(c.proc.pid)
    return None


def _run_dict(run, name: str, init: dict, report: dict, gpu: bool, cpu: int | None = None) -> dict[str, Any]:
    """One arm's timing record in the shape api.py reads (timing.TimingRun.to_dict)."""
    times = [t for _, t in run.times_ms[name]]
    extra = {**(report.get("marks") or {}), "rounds": len(run.rounds)}
    if isinstance(init.get("copies_note"), str):  # fewer timed input sets than the caches want: memory was short
        extra["copies_note"] = init["copies_note"][:300]
    if report.get("activity_timer_unused"):
        extra["activity_timer_unused"] = report["activity_timer_unused"]
    ovh = init.get("event_overhead_ms")
    settled = f", after {run.settle_from} for the runner's bound" if run.settle_from is not None else ""
    method = (f"interleaved with the other arms in {len(run.rounds)} rounds ({run.stop_reason}{settled})"
              + (f"; {report.get('timer')} clock" if gpu else "") + ("; CUDA/HIP graph replay" if init.get("graph") else "")
              + (("; cold cache" if init.get("flush_bytes") else "; warm cache") if gpu else "; host wall clock")
              + (f"; every arm on CPU {cpu}" if cpu is not None else "")
              + ("; empty-event overhead subtracted" if ovh else ""))
    return {"times_ms": times, "method": method, "host_timing": not gpu, "warmup_calls": init.get("warmup_calls"),
            "copies": init.get("copies"), "stop_reason": run.stop_reason, "flush_bytes": init.get("flush_bytes"),
            "event_overhead_ms": ovh, "overhead_subtracted": bool(ovh), "timer": report.get("timer"),
            "extra": extra}


def interleave(arms: Arms, case: dict, pool: list, seed: int, opt: dict, progress, gpu: bool,
                bar=None, sample: int | None = None, release_inputs: bool = False, staged: bool = False,
                park: bool = False, last_from_host: bool = False) -> dict:
    """Time every arm in interleaved rounds; raw records per arm, the rounds, the sampled outputs, the runner's
    bound on the reported times (runner_bound) and, with a ProbeBar, the check of every repetition's probes.
    sample: timed repetitions the candidate keeps (None: two, one when inputs and outputs are big);
    release_inputs: a big shape on a GPU: after the arms' set-up the runner's copies of the inputs go, and each arm
    gives its allocator's cache (outputs, working memory) back after every block and makes it again, untimed,
    before its next one (sides.arm_ready): one arm's working memory on the device at a time, not every arm's;
    staged (devplan.host_staged): the runner's copies of the inputs (and the refill pool) wait on the host while the
    arms get theirs (each arm's is made on its device by the hand-over: courier.py), so that two arms' copies,
    not three, are on the device at once; park (devplan.plan_benchmark's park_idle_arms, lean arms only): an arm's
    data waits in its host memory from the end of its set-up and whenever another arm's block is next, so one
    arm's data is on the device at a time (the ABBA order switches arms about once per round); last_from_host
    (devplan.last_arm_from_host, lean unstaged arms): the runner's copies go to the host before the last arm gets
    its own, so that arm's first calls run without them beside."""
    from evokernel_mcp.benchmark import probes
    from evokernel_mcp.benchmark.interleave import run_interleaved
    from evokernel_mcp.benchmark.timing import TimingOptions

    inits = {}
    big = _nbytes(case["inputs"]) + _nbytes(case["native"])  # each sampled repetition keeps inputs + outputs
    if sample is None:
        sample = 2 if big <= POOL_FULL_BYTES else 1
    limit = 4 * OUTPUT_SLACK * big + (16 << 20)
    table = probes.position_table(seed) if bar is not None and not gpu else None  # GPU: chunk sums only
    lean = bool(release_inputs and gpu)  # each arm gives its working memory back between its blocks
    if lean and staged:  # the device copies' cached blocks go too, not only up to trim_between_cases's 512 MiB:
        case["inputs"] = on_host(case["inputs"])  # on an H100 the runner kept a 1-2 GB shape's 512 MiB of inputs
        pool[:] = [on_host(p) for p in pool]  # cached beside the last arm's first call (3.4x its own bytes, not 3.1x)
        release_cached()
    last = list(arms.children())[-1]
    for name, child in arms.children().items():
        if lean and last_from_host and not staged and name == last:
            case["inputs"] = on_host(case["inputs"])
            pool[:] = [on_host(p) for p in pool]
            release_cached()
        req = {"op": "arm_init", "name": name, "inputs": case["inputs"], "seed": seed,
               "init_inputs": case["init_inputs"], "state": case["state"], "options": opt,
               "sample_size": sample if name == "candidate" else 0,
               "refill_pool": pool, "probe_table": table,
               "probe_chunks": bar.chunks if bar is not None else None, "lean": lean, "park": lean and park}
        inits[name] = arms.ask(child, req, max_bytes=1 << 20, handed=True)  # its inputs are its own (one copy)
    req = None  # the last request holds the runner's inputs too: they must go with case["inputs"] below
    if release_inputs:  # every arm has its own copy: the runner's goes (sizes kept for the limits below), its
        case["inputs"] = meta(case["inputs"])  # allocator's cache with it (trim_between_cases would keep up to 512 MiB:
        pool[:] = [meta(p) for p in pool]  # half a 1 GB shape's bytes, through its whole timing)
        release_cached()
    blocks: dict[str, list[dict[str, Any]]] = {name: [] for name in arms.children()}
    probe_checks: list[dict[str, Any]] = []

    host = common_host_per_rep({n: i.get("host_enqueue_s") for n, i in inits.items()}) if gpu else None

    on_device: list[str] = []  # park: the arm whose data is on the device now (none after the set-up)

    def arm(child, name: str, ovh: float | None):
        def call(k: int) -> list[float]:  # event times less the measured empty-event pair, when asked
            req = {"op": "arm_block", "name": name, "k": k}
            if lean and park and on_device != [name]:  # the last arm's data goes to its host before this one's returns
                if on_device:
                    arms.ask(arms.children()[on_device[0]], {"op": "arm_park", "name": on_device[0]})
                on_device[:] = [name]
            if lean:  # its allocations (and parked data) made again, off the runner's clock
                arms.ask(child, {"op": "arm_ready", "name": name})
            if gpu:  # every arm of a round behind the same GPU sleep; the clock stops when the block has run
                req.update(defer=True, cushion_ms=cushion_ms(k, host) if host is not None else None)
            c0 = None if gpu else tree_cpu(child.proc.pid)  # host timing: the tree's CPU clocks (bound.py)
            t0 = time.perf_counter()  # the runner's own clock: the candidate can lengthen it, never shorten it
            rep = arms.ask(child, req, max_bytes=64 << 20)
            wall_ms = (time.perf_counter() - t0) * 1e3
            c1 = None if gpu else tree_cpu(child.proc.pid)
            if gpu:
                rep = arms.ask(child, {"op": "arm_times", "name": name}, max_bytes=64 << 20)
            times = rep["times"] if isinstance(rep, dict) else rep
            block = {"wall_ms": wall_ms, "sum_ms": float(sum(times)), "k": k}
            if c0 is not None and c1 is not None:
                block.update(cpu_ms=(c1[0] - c0[0]) / 1e6, tree=(c0[1], c0[2]), tree_after=(c1[1], c1[2]))
            blocks[name].append(block)
            rows = rep.get("probes") if isinstance(rep, dict) else None
            if name == "candidate" and bar is not None and rows is not None and \
                    (not probe_checks or probe_checks[-1].get("passed")):
                first, n_sets = blocks_done(name) - k, int(inits[name].get("copies") or 1)
                # GPU: refilled per repetition (two or more pool contents) or between blocks (gpu_content_of)
                contents = [probes.gpu_content_of(first + i, len(blocks[name]) - 1, n_sets, len(pool))
                            for i in range(k)] if gpu else None
                probe_checks.append(bar.check(rows, first, n_sets, contents))
            return [max(t - ovh, 0.0) for t in times] if ovh else times
        return call

    def blocks_done(name: str) -> int:
        return sum(b["k"] for b in blocks[name])
    calls = {name: arm(child, name, inits[name].get("event_overhead_ms"))
             for name, child in arms.children().items()}

    def settle(r) -> bool:  # a stop waits while the bound on the rounds so far reads failed (interleave.py)
        b = runner_bound(r, blocks, gpu=gpu)
        return b is None or bool(b["passed"])
    run = run_interleaved(calls, opt=TimingOptions(**opt), rng_seed=seed,
                          on_progress=lambda frac, msg: progress(frac, 1.0, msg), settle=settle)
    note("benchmark: blocks of %s repetitions; GPU sleep ahead of each sized for %s s of host work per "
         "repetition (the arms measured %s)", sorted(set(run.block_sizes)),
         f"{host:.3g}" if host is not None else "-",
         {n: round(float(i.get("host_enqueue_s") or 0), 6) for n, i in inits.items()} if gpu else "-")
    out: dict[str, Any] = {"rounds": {n: run.series(n) for n in run.arms},
                           "runner_bound": runner_bound(run, blocks, gpu=gpu)}
    if bar is not None:
        out["check_probes"] = _probe_summary(probe_checks, bar)
    for name, child in arms.children().items():
        rep = arms.ask(child, {"op": "arm_report", "name": name, "samples": name == "candidate"}, max_bytes=limit)
        out[name] = _run_dict(run, name, inits[name], rep, gpu, arms.cpu)
        if name == "candidate":
            out["samples"] = rep.get("samples") or []
        else:  # the candidate's arm stays until its post-timing checks (they reuse its input storage)
            arms.ask(child, {"op": "arm_close", "name": name})
    return out


def _probe_summary(checks: list[dict[str, Any]], bar) -> dict[str, Any] | None:
    """One record of every block's probe check: the first failure, else how many repetitions passed."""
    if bar.why_not is not None:
        return {"passed": True, "checked": 0, "note": f"probes not judged: {bar.why_not}"}
    if not checks:
        return None
    bad = next((c for c in checks if not c.get("passed")), None)
    return bad or {"passed": True, "checked": sum(c.get("checked") or 0 for c in checks)}
