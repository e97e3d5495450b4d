"""evaluate_batch scaling: 16 candidates on 1 vs 2 devices, with the local pool and with Ray on this host.

    PYTHONPATH=. python3 bench/batch_scaling.py [--modes local:1,local:2,ray:1,ray:2] [--n 16]
        [--task vector_add] [--shapes small,medium] [--max-time-s 1.0] [--devices cuda:0,cuda:1] [--merge] [--tag T]

Per mode: a warm-up batch (one candidate per slot: starts the runners, the reference children, the CUDA
contexts), then the timed batch of --n candidates (PyTorch variants of the reference, all correct: x + y for
vector_add, cuDNN calls for conv3d_depthwise, the flagship) through the
whole cascade (verify_small -> verify -> benchmark). Wall time is submit -> done of the one batch job.
Target: on 2 GPUs at most 0.55x the time of 1 GPU, for the local pool and for Ray on one
host. Writes bench/results/batch_scaling_<device>_<date>.{md,json} (device, date, versions; a copy under
$OUT when set) after every mode; --merge adds to today's file, so each mode can run in its own call. A mode
whose executor is missing (no Ray installed) is recorded as skipped, with why.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
from pathlib import Path

import anyio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

VARIANTS = [
    "def run(x, y):\n    return x + y\n",
    "def run(x, y):\n    return y + x\n",
    "import torch\n\ndef run(x, y):\n    return torch.add(x, y)\n",
    "def run(x, y):\n    return x.add(y)\n",
    "import torch\n\ndef run(x, y):\n    out = torch.empty_like(x)\n    torch.add(x, y, out=out)\n    return out\n",
    "import torch\n\ndef run(x, y):\n    return torch.add(x, y, alpha=1)\n",
    "def run(x, y):\n    z = x.clone()\n    z += y\n    return z\n",
    "import torch\n\ndef run(x, y):\n    return torch.stack([x, y]).sum(0)\n",
]


# The flagship task (conv3d_depthwise, bf16 [1,512,61,45,80] at full size): PyTorch/cuDNN variants, all correct,
# whose GPU work (milliseconds per call at full size) is what a real search's candidates look like.
_C3 = "import torch\nimport torch.nn.functional as F\n\n"
CONV3D_VARIANTS = [
    _C3 + "def run(x, w):\n    return F.conv3d(x, w, padding=(0, 2, 2), groups=x.shape[1])\n",
    _C3 + "def run(x, w):\n    return torch.conv3d(x, w, None, 1, (0, 2, 2), 1, x.shape[1])\n",
    _C3 + "def run(x, w):\n    return F.conv3d(x, w, None, (1, 1, 1), (0, 2, 2), (1, 1, 1), x.shape[1])\n",
    _C3 + "def run(x, w):\n    return torch.ops.aten.convolution(x, w, None, [1, 1, 1], [0, 2, 2], [1, 1, 1], False, "
          "[0, 0, 0], x.shape[1])\n",
    _C3 + "def run(x, w):\n    return F.conv3d(F.pad(x, (2, 2, 2, 2)), w, groups=x.shape[1])\n",
    _C3 + "def run(x, w):\n    y = F.conv3d(x.float(), w.float(), padding=(0, 2, 2), groups=x.shape[1])\n"
          "    return y.to(x.dtype)\n",
    _C3 + "def run(x, w):\n    y = F.conv3d(x, w, padding=(0, 2, 2), groups=x.shape[1])\n    return y.contiguous()\n",
    _C3 + "def run(x, w):\n    return torch.nn.functional.conv3d(x.contiguous(), w.contiguous(), padding=(0, 2, 2), "
          "groups=w.shape[0])\n",
]
TASK_VARIANTS = {"vector_add": VARIANTS, "conv3d_depthwise": CONV3D_VARIANTS}


def candidates(n: int, tag: str, task: str = "vector_add"):
    from evokernel_mcp.batch.models import BatchCandidate

    vs = TASK_VARIANTS[task]
    return [BatchCandidate(name=f"{tag}{i:02d}", source=vs[i % len(vs)] + f"# variant {i}\n") for i in range(n)]


async def run_batch(ex, devices: list[str], plan, n: int, tag: str) -> dict:
    from evokernel_mcp.batch import api
    from evokernel_mcp.runtime.jobs import JobManager

    mgr = JobManager(devices=devices)
    try:
        executor = ex(mgr) if callable(ex) else ex
        slots = await executor.slots()
        warm = await api.submit_batch(plan, candidates(len(slots), f"warm{tag}", plan.task.name), jobs=mgr,
                                      executor=executor)
        w = await mgr.wait(warm, 1800)
        t0 = time.perf_counter()
        job = await api.submit_batch(plan, candidates(n, tag, plan.task.name), jobs=mgr, executor=executor)
        out = await mgr.wait(job, 3600)
        wall = time.perf_counter() - t0
    finally:
        await mgr.aclose()
    if out.state != "done":
        return {"state": out.state, "error": str(out.error), "warmup_state": w.state}
    res = out.result
    return {"state": "done", "wall_s": wall, "slots": res.slots, "executor": res.executor, "counts": res.counts,
            "warmup_state": w.state, "rows": [r.model_dump(mode="json", exclude_none=True) for r in res.ranked]}


def local_mode(k: int, devices: list[str]):
    from evokernel_mcp.executors.local import LocalExecutor

    return devices[:k], (lambda mgr: LocalExecutor(mgr.pool))


async def ray_mode(k: int, plan, n: int, devices: list[str]) -> dict:
    import ray

    from evokernel_mcp.executors.ray_executor import RayExecutor

    if not ray.is_initialized():
        kw = {"num_cpus": os.cpu_count()} if devices[0] == "cpu" else {}
        ray.init(include_dashboard=False, log_to_driver=False, **kw)
    ex = RayExecutor(address=None, slots=k)
    try:
        out = await run_batch(ex, devices[:1], plan, n, f"ray{k}_")
        out["actors"] = await anyio.to_thread.run_sync(ex.actor_infos)
        return out
    finally:
        await ex.aclose()


def device_label(devices: list[str]) -> tuple[str, str]:
    if devices[0] == "cpu":
        return "cpu", platform.processor() or "cpu"
    import torch

    name = torch.cuda.get_device_name(0)
    return name.split()[-1].replace("/", "_"), name


def report(data: dict) -> list[Path]:
    modes = data["modes"]
    lines = [f"# evaluate_batch scaling ({data['date']})", "",
             f"- host: {data['host']}; CPUs: {data['cpus']}; device: {data['device_name']} x {len(data['devices'])} "
             f"({', '.join(data['devices'])})",
             f"- versions: {', '.join(f'{k} {v}' for k, v in data['versions'].items())}",
             f"- settings: {', '.join(f'{k}={v}' for k, v in data.get('settings', {}).items()) or 'defaults'}",
             f"- batch: {data['n']} candidates (PyTorch variants of the reference) of task {data['task']}, shapes "
             f"{data['shapes']}, cascade verify_small -> verify -> benchmark (max_time_s {data['max_time_s']}); "
             "wall = submit -> done of the one batch job, after a warm-up batch of one candidate per slot", "",
             "| mode | slots | wall s | valid | ratio to 1 slot | <= 0.55? |", "|---|---|---|---|---|---|"]
    for name, m in modes.items():
        if m.get("state") != "done":
            lines.append(f"| {name} | | | | {m.get('state')}: {m.get('error') or m.get('why')} | |")
            continue
        kind, k = name.split(":")
        one = modes.get(f"{kind}:1", {})
        ratio = m["wall_s"] / one["wall_s"] if one.get("wall_s") and k != "1" else None
        verdict = "" if ratio is None else ("yes" if ratio <= 0.55 else "NO")
        lines.append(f"| {name} | {m['slots']} | {m['wall_s']:.1f} | {m['counts'].get('valid')} | "
                     f"{'' if ratio is None else f'{ratio:.3f}'} | {verdict} |")
    lines += ["", "Executors: " + "; ".join(f"{k}: {m.get('executor')}" for k, m in modes.items() if m.get("executor"))]
    stem = f"batch_scaling_{data['device']}_{data['date'][:10]}{data.get('tag') or ''}"
    out_dir = REPO / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{stem}.md", out_dir / f"{stem}.json"]
    paths[0].write_text("\n".join(lines) + "\n")
    paths[1].write_text(json.dumps(data, indent=1, default=str) + "\n")
    if os.environ.get("OUT"):
        for p in paths:
            Path(os.environ["OUT"], p.name).write_text(p.read_text())
    return paths


async def main(ns: argparse.Namespace) -> None:
    from evokernel_mcp.batch import cascade
    from evokernel_mcp.runtime.pool import discover_devices
    from evokernel_mcp.tasks import load_task

    devices = ns.devices.split(",") if ns.devices else discover_devices()
    plan = cascade.make_plan(load_task(ns.task), stages=None, shapes=ns.shapes.split(","), overrides=None,
                             compile=None, timeout_s=ns.timeout_s, max_time_s=ns.max_time_s)
    dev, dev_name = device_label(devices)
    versions = {"python": platform.python_version()}
    for mod in ("torch", "triton", "ray"):
        try:
            versions[mod] = __import__(mod).__version__
        except Exception as e:  # noqa: BLE001 - recorded
            versions[mod] = f"missing ({type(e).__name__})"
    data = {"date": dt.datetime.now().isoformat(timespec="seconds"), "host": platform.node(), "cpus": os.cpu_count(),
            "device": dev, "device_name": dev_name, "devices": devices, "versions": versions, "task": ns.task,
            "shapes": ns.shapes, "n": ns.n, "max_time_s": ns.max_time_s, "modes": {}}
    data["tag"] = f"_{ns.tag}" if ns.tag else ""
    data["settings"] = {k: v for k, v in sorted(os.environ.items())  # the knobs this run had (CPU split, spares ...)
                        if k.startswith(("EVOKERNEL_", "OMP_")) and k not in ("EVOKERNEL_HOME",)}
    prior = REPO / "bench" / "results" / f"batch_scaling_{dev}_{data['date'][:10]}{data['tag']}.json"
    if ns.merge and prior.is_file():  # modes measured by an earlier call (one mode per device call fits 10 min)
        data["modes"].update(json.loads(prior.read_text()).get("modes", {}))
    for mode in ns.modes.split(","):
        kind, k = mode.split(":")
        k = int(k)
        if k > len(devices) and not (kind == "ray" and devices[0] == "cpu"):
            data["modes"][mode] = {"state": "skipped", "why": f"{len(devices)} device(s) here"}
            continue
        print(f"[batch_scaling] {mode} ...", file=sys.stderr, flush=True)
        if kind == "local":
            devs, ex = local_mode(k, devices)
            data["modes"][mode] = await run_batch(ex, devs, plan, ns.n, f"local{k}_")
        elif versions["ray"].startswith("missing"):
            why = f"ray {versions['ray']}: pip install 'evokernel-mcp[ray]'"
            data["modes"][mode] = {"state": "skipped", "why": why}
        else:
            data["modes"][mode] = await ray_mode(k, plan, ns.n, devices)
        m = data["modes"][mode]
        print(f"[batch_scaling] {mode}: {m.get('state')} {m.get('wall_s', 0):.1f} s {m.get('counts')}",
              file=sys.stderr, flush=True)
        report(data)  # after every mode: a run cut short keeps what it measured
    for p in report(data):
        print(p)


if __name__ == "__main__":
    import logging

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", default="local:1,local:2,ray:1,ray:2")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--task", default="vector_add")
    ap.add_argument("--shapes", default="small,medium")
    ap.add_argument("--max-time-s", type=float, default=1.0)
    ap.add_argument("--timeout-s", type=float, default=300.0)
    ap.add_argument("--devices", default=None, help="pool device ids (default: discovered)")
    ap.add_argument("--tag", default="", help="suffix of the result files (another run of the same day)")
    ap.add_argument("--merge", action="store_true", help="keep the modes of today's earlier run of this script")
    anyio.run(main, ap.parse_args())
