"""Children a job is done with (a mixin of spares.Spares): killed at once, the rest of their end (a CUDA context's
teardown, their Triton cache, their scratch dir) in the background, counted as device work until they are gone, and
waited for where a job needs the device memory they held."""

from __future__ import annotations

import logging
import threading
import time

from evokernel_mcp.runtime.child_proc import Child
from evokernel_mcp.runtime.refcache import TIGHT_FREE_FRACTION

log = logging.getLogger(__name__)


class Retiring:
    """Needs of the class it is mixed into: device, _lock (a Condition), _gpu_busy, _retiring and _retiring_big
    counters."""

    def retire(self, child: Child, big: bool = False) -> None:
        """A job is done with its child: killed now (nothing of it runs past this call), the rest of its end
        (waiting for its processes to be gone, a CUDA context's teardown among them; its Triton cache; its
        scratch dir) in the background, off the job's clock. Until the processes are gone it counts as
        device work: a benchmark's timing waits for it (quiet), as it waits for a spare's device start.
        big: the child served a job planned within its memory cap (over a GB of its own): it may hold gigabytes
        until it is gone, so the next job waits for it before it starts (wait_retired_if_tight)."""
        finish = child.stop()
        with self._lock:
            self._gpu_busy += 1
            self._retiring += 1
            self._retiring_big += int(big)

        def run() -> None:
            try:
                finish()
            except Exception:  # noqa: BLE001 - a child's clean-up failing must not take the runner down
                log.exception("could not finish a retired child")
            finally:
                with self._lock:
                    self._gpu_busy -= 1
                    self._retiring -= 1
                    self._retiring_big -= int(big)
                    self._lock.notify_all()
        try:
            threading.Thread(target=run, daemon=True, name="evokernel-retire").start()
        except RuntimeError:  # no thread to be had: end it here, on the job's clock
            run()

    @staticmethod
    def _free_memory() -> tuple[int, int] | None:
        """(free, total) bytes of this runner's device; None without a device view here."""
        try:
            import torch

            return torch.cuda.mem_get_info()
        except Exception:  # noqa: BLE001
            return None

    def wait_retired_if_tight(self) -> float:
        """At a job's start: when the device is tight (what decides evictions and what big loads need) or a retired
        child of a big job is still ending, wait for retired children first; else their end overlaps this job's
        loads (a 1 GB convolution's verify, right after the last problem's benchmark, read 4.6x its own bytes for
        90 ms: that benchmark's two arms, 1.3 GiB each, still ending beside the new job's three processes)."""
        if not self._retiring or self.device == "cpu":
            return 0.0
        if self._retiring_big:
            return self.wait_retired()
        mem = self._free_memory()  # (no device view: wait, to be safe)
        return self.wait_retired() if mem is None or mem[0] < mem[1] * TIGHT_FREE_FRACTION else 0.0

    def wait_retired(self, timeout_s: float = 30.0) -> float:
        """Wait until the children retired before are gone (their device memory back with the driver: a case's
        memory plan reads what is free); the seconds waited."""
        t0 = time.monotonic()
        with self._lock:
            while self._retiring and time.monotonic() - t0 < timeout_s:
                self._lock.wait(timeout=0.5)
        return time.monotonic() - t0
