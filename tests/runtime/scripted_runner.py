"""One request exchanged with a scripted stand-in for the runner process (RunnerPool._exchange)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def exchange_with_script(script: str, call, register: bool = False):
    """Start `python -c script` as the cpu runner (it must announce "ready" first), send `call`, return the
    reply the pool makes of what the script answers. register: the pool counts it as its cpu runner."""
    import anyio

    from evokernel_mcp.runtime.pool import RunnerPool, _Runner

    async def main():
        pool = RunnerPool(["cpu"])
        proc = await anyio.open_process([sys.executable, "-c", script], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        w = _Runner("cpu", proc, Path("/nonexistent.log"))
        assert (await w.next_event()).event == "ready"
        if register:
            pool._runners["cpu"] = w
        try:
            return await pool._exchange(w, call, 10, None, Path("/nonexistent"))
        finally:
            await pool.aclose()
            await w.kill()

    return anyio.run(main)
