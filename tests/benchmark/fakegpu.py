"""A stand-in GPU for the timing tests (no device): a clock that advances only when work runs, the event API
timing.py binds, and a profiler session that records the device activities run while it is open."""

from __future__ import annotations


def recording_session(owner):
    """A stand-in for activity.TorchActivity: owner.acts collects activities while the session is open."""

    class Session:
        def __enter__(self):
            owner.acts = []
            return self

        def __exit__(self, *exc):
            self.recorded, owner.acts = owner.acts, None

        def activities(self):
            return self.recorded

    return Session()


class FakeGPU:
    """Device work advances the clock (ms); activities carry `stream` (None: records without stream ids)."""

    def __init__(self, kernel_ms: float = 0.5, flush_ms: float = 10.0, event_ms: float = 0.0,
                 sleep_ms: float = 0.0, stream: int | None = None, nbytes: int = 1 << 28):
        self.t, self.kernel_ms, self.flush_ms, self.event_ms = 0.0, kernel_ms, flush_ms, event_ms
        self.sleep_ms, self.stream = sleep_ms, stream
        self.log: list[str] = []
        gpu = self

        class Event:
            def __init__(self, enable_timing=True):
                self.ts = None

            def record(self):
                gpu.t += gpu.event_ms
                self.ts = gpu.t
                gpu.log.append("record")

        self.api = {"Event": Event, "record": Event.record, "elapsed": lambda s, e: e.ts - s.ts,
                    "sync": lambda: None}
        self.nbytes, self.source = nbytes, "fake"
        self.acts: list | None = None  # device activities while a fake profiler session is open
        self.kernel_name = "axpy_kernel"

    def run(self, name: str, ms: float, stream: int | None = None) -> None:
        s, self.t = self.t, self.t + ms
        if self.acts is not None:
            self.acts.append((name, int(round(s * 1e6)), int(round(self.t * 1e6)), stream or self.stream))

    def flush(self) -> None:
        self.run("reduce_kernel<sum>", self.flush_ms)
        self.log.append("flush")

    def kernel(self, a) -> None:
        self.run(self.kernel_name, self.kernel_ms)
        self.log.append(f"kernel{a}")

    def sleep(self, cycles) -> None:
        self.run("spin_kernel", self.sleep_ms)

    def session(self):
        return recording_session(self)

    def install(self, monkeypatch) -> FakeGPU:
        """timing.py's event API, GPU sleep and activity session, all this fake's."""
        import torch

        from evokernel_mcp.benchmark import timing

        monkeypatch.setattr(timing, "_event_api", self.api)
        monkeypatch.setattr(torch.cuda, "_sleep", self.sleep, raising=False)
        monkeypatch.setattr(timing, "_activity_session", self.session)
        return self
