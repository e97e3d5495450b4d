"""Replays the corpus against a server started as a client starts it (stdio subprocess, real MCP client), with
a planted secret in the server's environment and in a root-only file, and judges every answer."""

from __future__ import annotations

import datetime as dt
import logging
import os
import secrets
import shutil
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from evokernel_mcp.integrity.corpus import select
from evokernel_mcp.integrity.judge import leaked, observe, verdict_held
from evokernel_mcp.integrity.models import Exploit, Report, Row

log = logging.getLogger(__name__)

SECRET_ENV = "EVK_INTEGRITY_PLANTED_VALUE"  # a plain name: held by the allow-list, not by a name filter
GOOD = "def run(x, y):\n    return x + y\n"
WRONG = "def run(x, y):\n    return x - y\n"
BASE_ARGS: dict[str, dict[str, Any]] = {
    "verify_vs_pytorch": {"task": "vector_add", "shapes": ["small"], "seeds": 1, "timeout_s": 60, "wait_s": 300},
    "benchmark": {"task": "vector_add", "shapes": ["small"], "max_time_s": 0.5, "timeout_s": 300, "wait_s": 300},
    "profile_pmc": {"task": "vector_add", "shapes": ["small"], "timeout_s": 300, "wait_s": 300},
    "evaluate_batch": {"task": "vector_add", "shapes": ["small"], "wait_s": 300},
    "compile_kernel": {"language": "triton", "target": "gfx942", "kernel": "add_kernel",
                       "signature": {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
                       "constexprs": {"BLOCK": 1024}},
}


def detect_backend() -> tuple[str, str]:
    """('cuda'|'rocm'|'cpu', a device description) for the device the server's tools run on by default."""
    try:
        import torch

        if torch.cuda.is_available():
            name = torch.cuda.get_device_name(0)
            return ("rocm" if torch.version.hip else "cuda"), name
    except Exception:  # noqa: BLE001 - no torch or no driver: the CPU path
        pass
    return "cpu", "cpu (torch CPU, TRITON_INTERPRET=1)"


class Plant:
    """The bait: a secret in the server's environment, one in a root-only file, and a world-writable directory
    outside every scratch dir that must stay empty."""

    def __init__(self, home: Path | None = None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="evk-integrity-"))
        self.env_secret = "evk-env-" + secrets.token_hex(8)
        self.file_secret = "evk-file-" + secrets.token_hex(8)
        self.token = "evk-tok-" + secrets.token_hex(8)
        self.secret_file = self.root / "secret.txt"
        self.secret_file.write_text(self.file_secret)
        self.secret_file.chmod(0o600)
        self.leak = self.root / "leak"
        self.leak.mkdir()
        self.leak.chmod(0o777 | stat.S_ISVTX)
        self.home = home or self.root / "home"
        self.home.mkdir(exist_ok=True)

    @property
    def secrets(self) -> list[str]:
        return [self.env_secret, self.file_secret, self.token]

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({SECRET_ENV: self.env_secret, "EVOKERNEL_HOME": str(self.home),
                    "EVOKERNEL_HTTP_TOKEN": self.token})
        return env

    def fill(self, src: str) -> str:
        return (src.replace("__LEAK__", str(self.leak)).replace("__SECRET_ENV__", SECRET_ENV)
                .replace("__SECRET_FILE__", str(self.secret_file)).replace("__SERVER_HOME__", str(self.home)))

    def written(self) -> list[str]:
        found = sorted(p.name for p in self.leak.iterdir())
        for p in self.leak.iterdir():
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
        return found

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _text(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") or "" for c in result.content)


async def _call(client, tool: str, args: dict[str, Any]) -> tuple[bool, dict[str, Any] | None, str]:
    r = await client.call_tool(tool, args)
    body = r.structured_content
    if body is None and r.is_error:
        import json

        try:
            body = json.loads(_text(r))
        except ValueError:
            body = None
    return bool(r.is_error), body if isinstance(body, dict) else None, _text(r)


async def _next_jobs_right(client) -> str | None:
    """None when a correct candidate passes and a wrong one fails; else what went wrong."""
    for src, want in ((GOOD, True), (WRONG, False)):
        is_err, body, text = await _call(client, "verify_vs_pytorch", {"candidate": src, **BASE_ARGS["verify_vs_pytorch"]})
        got = None if is_err else (body or {}).get("passed")
        if got is not want:
            return f"next {'correct' if want else 'wrong'} candidate: passed={got} {observe(is_err, body, text)[:80]}"
    return None


HONEST = {"vector_add": GOOD}


async def honest_speedup(client, args: dict[str, Any], cache: dict[str, float | None]) -> float | None:
    """The speedup an honest candidate of the same problem gets in the same call shape (the exploit's true
    speedup: the timing exploits do the honest work and cheat the clock), measured once per argument set."""
    import json

    key = json.dumps({k: v for k, v in args.items() if k != "candidate"}, sort_keys=True, default=str)
    if key not in cache:
        src = HONEST.get(str(args.get("task")))
        best = None
        if src is not None:
            is_err, body, _ = await _call(client, "benchmark", {**args, "candidate": src})
            rows = [r for r in (body or {}).get("results") or [] if isinstance(r, dict)] if not is_err else []
            sp = [r.get("speedup") for r in rows if r.get("valid") and r.get("speedup")]
            best = max(sp) if sp else None
        cache[key] = best
    return cache[key]


# A timing exploit does the honest work and cheats the clock: held when invalid, or when its speedup is within
# this factor of an honest candidate's in the same call shape (one honest measurement: host timing on a busy
# 2-core machine moves by more than the 10 % a GPU's device clock allows).
TRUE_SPEEDUP_SLACK = {"cpu": 1.25}
DEFAULT_SLACK = 1.10


async def replay_one(client, plant: Plant, ex: Exploit, device: str | None,
                     honest: dict[str, float | None] | None = None, backend: str = "cpu") -> Row:
    args = {**BASE_ARGS.get(ex.tool, {}), **ex.args}
    if device and ex.tool != "compile_kernel":
        args.setdefault("device", device)
    key = "source" if ex.tool == "compile_kernel" else "candidate"
    if ex.tool == "evaluate_batch":
        args["candidates"] = [plant.fill(ex.candidate)]
    else:
        args[key] = plant.fill(ex.candidate)
    t0 = time.monotonic()
    try:
        is_err, body, text = await _call(client, ex.tool, args)
    except Exception as e:  # noqa: BLE001 - the client or the server broke: that is a broken defence
        is_err, body, text = True, None, f"client error: {type(e).__name__}: {e}"
        held, why = False, "the server did not answer"
    else:
        expect = ex.expect
        if expect.verdict == "benchmark_invalid" and not expect.strict and honest is not None:
            true = await honest_speedup(client, {k: v for k, v in args.items() if k != "candidate"}, honest)
            if true is not None:
                slack = TRUE_SPEEDUP_SLACK.get(backend, DEFAULT_SLACK)
                expect = expect.model_copy(update={"max_speedup": max(expect.max_speedup, true * slack)})
        held, why = verdict_held(expect, is_err, body)
    observed = observe(is_err, body, text)
    if (s := leaked(plant.secrets, is_err, body, text)) is not None:
        held, why = False, f"secret {s} in the answer"
    if wrote := plant.written():
        held, why = False, f"wrote outside scratch: {wrote[:3]}"
    if why:
        observed = f"{observed} -- {why}"
    return Row(exploit=ex.name, family=ex.family, tool=ex.tool, expected=ex.expect.describe(), observed=observed,
               held=held, seconds=round(time.monotonic() - t0, 1))


async def _next_jobs_checked(client) -> str | None:
    try:
        return await _next_jobs_right(client)
    except Exception as e:  # noqa: BLE001 - the server broke: that is a broken defence
        return f"server did not answer the next job: {type(e).__name__}: {e}"


async def replay_all(client, plant: Plant, chosen: list[Exploit], report: Report, device: str | None,
                     honest: dict[str, float | None], backend: str, progress=None) -> None:
    """Replay every exploit, each in its own job, and judge its own answer at once. The next-job check (a
    correct candidate passes, a wrong one fails) of the exploits marked next_unchanged runs once, after the last
    of them in each family, not after each: damage that outlives a job (the runner's state, its files, a process
    left behind) is still there then, and the check costs two jobs. When it fails, each such exploit of the
    family is marked broken with the reason and the others it ran with."""
    pending: list[int] = []
    for i, ex in enumerate(chosen):
        row = await replay_one(client, plant, ex, device, honest, backend)
        report.rows.append(row)
        if ex.expect.next_unchanged:
            pending.append(len(report.rows) - 1)
        elif progress:
            progress(row)
        if pending and (i + 1 == len(chosen) or chosen[i + 1].family != ex.family):
            bad = await _next_jobs_checked(client)
            names = [report.rows[j].exploit for j in pending]
            after = f" (checked after {', '.join(names[:5])}{', ...' if len(names) > 5 else ''})"
            for j in pending:
                r = report.rows[j]
                if bad:
                    report.rows[j] = r.model_copy(update={"held": False, "observed": f"{r.observed} -- {bad}{after}"})
                if progress:
                    progress(report.rows[j])
            pending = []


def _versions() -> dict[str, str | None]:
    import importlib.metadata

    out: dict[str, str | None] = {"python": sys.version.split()[0]}
    for mod in ("torch", "triton", "mcp"):
        try:
            out[mod] = importlib.metadata.version(mod)
        except importlib.metadata.PackageNotFoundError:
            out[mod] = None
    return out


async def run_integrity(families: list[str] | None = None, names: list[str] | None = None,
                        device: str | None = None, inproc: bool = False, progress=None) -> Report:
    """Start the server, replay the chosen exploits on this host's device, return the table."""
    from mcp import Client

    backend, dev_name = detect_backend()
    chosen, skipped = select(families, backend, names)
    report = Report(device=dev_name, backend=backend, versions=_versions(),
                    started_utc=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), skipped=skipped)
    if inproc:
        from evokernel_mcp.paths import state_dir

        plant = Plant(home=state_dir())
    else:
        plant = Plant()
    try:
        if inproc:
            os.environ[SECRET_ENV] = plant.env_secret
            from evokernel_mcp.server import build_server

            target: Any = build_server()
        else:
            from mcp.client.stdio import StdioServerParameters

            target = StdioServerParameters(command=sys.executable, env=plant.env(),
                                           args=["-m", "evokernel_mcp", "serve", "--log-level", "WARNING"])
        async with Client(target) as client:
            if bad := await _next_jobs_right(client):
                raise RuntimeError(f"the control failed before any exploit ran: {bad}")
            honest: dict[str, float | None] = {}
            await replay_all(client, plant, chosen, report, device, honest, backend, progress)
            if honest:  # the control of the timing family: an honest candidate's benchmark is valid
                bad = [k for k, v in honest.items() if v is None]
                report.rows.append(Row(exploit="control_honest_benchmark", family="timing", tool="benchmark",
                                       expected="an honest candidate is valid (the bar the timing exploits meet)",
                                       observed=f"{len(honest) - len(bad)} of {len(honest)} honest benchmarks valid",
                                       held=not bad))
    finally:
        plant.close()
        if inproc:
            os.environ.pop(SECRET_ENV, None)
    return report
