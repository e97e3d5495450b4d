"""The server's settings: one frozen model, read once per process, the only place that reads EVOKERNEL_*.

Precedence: a command-line flag (`serve --home ...`, applied with `configure`) > the environment variable >
the default. docs/configuration.md lists every setting; tests/test_settings.py keeps that table and this
module in step.

Processes the server starts get the resolved settings, not the environment: a runner is given them whole in
`_EVOKERNEL_SETTINGS` (runner_env()), so a flag given to `serve` holds in its runners too. Variables that begin
with `_EVOKERNEL_` are internal (set by the server for its own processes, never by a user):
- _EVOKERNEL_SETTINGS: the server's settings as JSON, for its runners (the HTTP token left out);
- _EVOKERNEL_RUNNER_CPUS: a runner's share of the host's CPUs (runtime/cpus.py), from the pool or a Ray actor;
- _EVOKERNEL_TRITON_KEY, _EVOKERNEL_SPAWNED_AT: from a runner to a sandboxed child it starts (runtime/child.py).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

INTERNAL = "_EVOKERNEL_SETTINGS"

# field -> environment variable. The only EVOKERNEL_* names the package reads.
ENV: dict[str, str] = {
    "home": "EVOKERNEL_HOME",
    "devices": "EVOKERNEL_DEVICES",
    "journal": "EVOKERNEL_JOURNAL",
    "task_roots": "EVOKERNEL_TASK_ROOTS",
    "executor": "EVOKERNEL_EXECUTOR",
    "ray_address": "EVOKERNEL_RAY_ADDRESS",
    "ray_slots": "EVOKERNEL_RAY_SLOTS",
    "http_token": "EVOKERNEL_HTTP_TOKEN",
    "http_token_file": "EVOKERNEL_HTTP_TOKEN_FILE",
    "sandbox": "EVOKERNEL_SANDBOX",
    "bwrap": "EVOKERNEL_BWRAP",
    "clang": "EVOKERNEL_CLANG",
    "start_timeout_s": "EVOKERNEL_START_TIMEOUT_S",
    "child_memory": "EVOKERNEL_CHILD_MEMORY",
    "product": "EVOKERNEL_PRODUCT",
}


def default_home(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    return Path(env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")) / "evokernel-mcp"


class Settings(BaseModel):
    """Every setting of the server (docs/configuration.md has the table)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    home: Path = Field(default_factory=default_home, description="caches, artifacts, job scratch, the journal")
    devices: tuple[str, ...] | None = Field(None, description="device ids ('cpu', 'cuda:0', 'rocm:1'); None: the "
                                            "GPUs found, else the CPU")
    journal: Path | None = Field(None, description="the journal's SQLite file; None: home/journal.sqlite3")
    task_roots: tuple[Path, ...] = Field((), description="folders besides the shipped tasks that tasks and "
                                         "KernelBench files may be loaded from by path")
    executor: Literal["local", "ray"] = "local"
    ray_address: str = "auto"
    ray_slots: int | None = Field(None, ge=1)
    http_token: SecretStr | None = None
    http_token_file: Path | None = None
    sandbox: Literal["auto", "process"] = Field("auto", description="auto: the best isolation that runs here "
                                                "(bubblewrap); process: a fresh process and rlimits only")
    bwrap: str | None = Field(None, description="the bubblewrap executable; None: bwrap on PATH")
    clang: str | None = Field(None, description="the clang-19 of the offline HIP compiles; None: looked up")
    start_timeout_s: float = Field(180.0, gt=0, description="longest start of a runner, a sandboxed child or a "
                                   "Ray actor")
    child_memory: str = Field("auto", description="memory of each process that runs agent code and of its job's "
                              "process tree: bytes, 512M, 8G, 'auto' (half the host's RAM, at least 2 GiB) or 'off'")
    memory_factor: float = Field(3.0, ge=0, description="a job with more than 1 GB of its own (inputs + outputs) "
                                 "plans the device memory of our processes within this many times that, where it "
                                 "can, by giving up accuracy and robustness aids (runtime/devplan.py); 0: only the "
                                 "free memory limits it (serve --memory-factor; no variable)")
    # knobs with a measured default and no variable (tests and the code set them; docs/configuration.md)
    cuda_stack_bytes: int = Field(256, ge=0, description="the per-thread stack limit of each of our processes' "
                                  "CUDA contexts (the driver raises it for a launch that needs more); 0: the "
                                  "driver's default (runtime/cuda_stack.py)")
    cpu_split: Literal["auto", "even", "off"] = "auto"
    zygote: Literal["auto", "off"] = Field("auto", description="auto: a CPU child's process is forked from one "
                                           "that imported torch once, into a sandbox bubblewrap made for it, where "
                                           "the server is root (runtime/zygote.py); off: each child starts its "
                                           "own interpreter")
    child_cpu_s: int | None = Field(14400, ge=1, description="CPU seconds of each process of agent code")
    child_pids: int | None = Field(1024, ge=1, description="processes and threads of a job (pids cgroup)")
    cgroup: str = Field("auto", description="'auto', 'off' or a delegated cgroup v2 directory for per-job cgroups")
    ref_cache_memory: str = Field("auto", description="host memory the cached reference processes may hold "
                                  "between jobs ('auto': a quarter of the host's RAM; 'off': no budget)")
    product: str | None = Field(None, description="the arch-table product whose peaks the profiler uses; None: "
                                "the one the live device names")
    warm_start: Literal["auto", "on", "off"] = Field(
        "auto", description="start the first device's runner and its spares when the server starts, so the first "
        "verify pays no start-up: auto (where that device is a GPU), on, off (serve --warm-start; no variable)")
    secret_env: tuple[str, ...] = Field((), description="environment variables that never reach a runner or agent "
                                        "code (serve --secret-env; no variable of its own)")

    @field_validator("devices", mode="before")
    @classmethod
    def _device_list(cls, v: Any) -> Any:  # "cuda:0,cuda:1"
        if isinstance(v, str):
            return tuple(d.strip() for d in v.split(",") if d.strip()) or None
        return v

    @field_validator("task_roots", mode="before")
    @classmethod
    def _path_list(cls, v: Any) -> Any:  # like PATH
        if isinstance(v, str):
            return tuple(p for p in v.split(os.pathsep) if p)
        return v

    @field_validator("executor", "sandbox", "cpu_split", "warm_start", "zygote", mode="before")
    @classmethod
    def _lower(cls, v: Any) -> Any:
        return v.strip().lower() if isinstance(v, str) else v


def _from_environ(environ: Mapping[str, str]) -> dict[str, Any]:
    values = {field: environ.get(var, "").strip() for field, var in ENV.items()}
    return {field: value for field, value in values.items() if value}  # set but empty: not set


def load(environ: Mapping[str, str] | None = None, **flags: Any) -> Settings:
    """Settings from flags (None: not given) over the environment over the defaults; ValueError naming the
    variable or flag when a value is bad."""
    env = os.environ if environ is None else environ
    if env.get(INTERNAL):  # a runner: what its server resolved
        base = Settings.model_validate_json(env[INTERNAL]).model_dump()
        base["http_token"] = None
    else:
        base = _from_environ(env)
    base.update({k: v for k, v in flags.items() if v is not None})
    base.setdefault("home", default_home(env))
    try:
        return Settings.model_validate(base)
    except ValidationError as e:
        fields = [str(err["loc"][0]) if err["loc"] else "?" for err in e.errors()]
        where = ", ".join(f"{ENV.get(f, f)}={base.get(f)!r}: {err['msg']}" for f, err in zip(fields, e.errors()))
        raise ValueError(f"bad setting: {where}") from None


_current: Settings | None = None
_lock = threading.Lock()


def get() -> Settings:
    """This process's settings (read from the environment on first use)."""
    global _current
    with _lock:
        if _current is None:
            _current = load()
        return _current


def configure(**flags: Any) -> Settings:
    """The CLI: settings from its flags over the environment, for the rest of this process."""
    global _current
    s = load(**flags)
    with _lock:
        _current = s
    return s


def reset() -> None:
    """Read the environment again on next use (tests that changed it)."""
    global _current
    with _lock:
        _current = None


def runner_env() -> dict[str, str]:
    """What a runner the server starts needs in its environment to have the server's settings."""
    return {INTERNAL: get().model_dump_json(exclude={"http_token"})}
