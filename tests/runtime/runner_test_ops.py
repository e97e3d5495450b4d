"""A runner op for the pool's tests, passed by its "module:function" name (the runner imports it from the
repository): misbehave on request."""

from __future__ import annotations

import os
import sys
import time
from typing import Any


def op_misbehave(payload: dict[str, Any], progress) -> dict[str, Any]:
    """Print, report progress, sleep, raise, exit or segfault, as the payload asks."""
    if "print" in payload:
        print(payload["print"], flush=True)
        print(payload["print"], file=sys.stderr, flush=True)
    for i in range(int(payload.get("progress_steps", 0))):
        progress(i + 1, payload["progress_steps"], f"step {i + 1}")
        time.sleep(float(payload.get("step_s", 0.0)))
    if payload.get("sleep_s"):
        time.sleep(float(payload["sleep_s"]))
    if payload.get("raise"):
        raise RuntimeError(payload["raise"])
    if payload.get("exit") is not None:
        os._exit(int(payload["exit"]))
    if payload.get("segv"):
        import ctypes

        ctypes.string_at(0)
    return {"echo": payload.get("echo"), "pid": os.getpid(), "cwd": os.getcwd()}
