"""What a runner op receives beside its request: the runner's device and its sandboxed children (spares,
cached references). The runner makes one at its start and hands it to every op (runtime/ops.py)."""

from __future__ import annotations

from evokernel_mcp.runtime.spares import Spares


class RunnerContext:
    """The device id ('cpu', 'cuda:0', 'rocm:0') and the children that serve it."""

    def __init__(self, device: str, spares: Spares | None = None):
        self.device = device
        self.spares = spares if spares is not None else Spares(device)
