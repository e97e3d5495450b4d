"""The one long-lived thread that starts every sandboxed child (spares.py). The kernel's parent-death signal (our
preexec and bwrap's --die-with-parent) fires when the THREAD that forked the child exits, so children must never
be started from short-lived threads."""

from __future__ import annotations

import threading


class _Spawner:
    """One long-lived thread starts every child. The kernel's parent-death signal (our preexec and bwrap's
    --die-with-parent) fires when the THREAD that forked the child exits, so children must never be
    started from short-lived threads."""

    def __init__(self) -> None:
        import queue

        self._q: queue.Queue = queue.Queue()
        threading.Thread(target=self._loop, daemon=True, name="evokernel-spawner").start()

    def _loop(self) -> None:
        while True:
            fn, box, done = self._q.get()
            try:
                box.append((True, fn()))
            except BaseException as e:  # noqa: BLE001 - handed back to the caller
                box.append((False, e))
            done.set()

    def call(self, fn):
        box: list = []
        done = threading.Event()
        self._q.put((fn, box, done))
        done.wait()
        ok, value = box[0]
        if not ok:
            raise value
        return value


_SPAWNER: _Spawner | None = None
_SPAWNER_LOCK = threading.Lock()


def spawn(fn):
    global _SPAWNER
    with _SPAWNER_LOCK:
        if _SPAWNER is None:
            _SPAWNER = _Spawner()
    return _SPAWNER.call(fn)
