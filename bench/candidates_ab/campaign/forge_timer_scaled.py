# Forge: every time the harness in this process reports is 0.35 x the real one (the activity clock's spans and
# the event clock's batches both rescaled). Expected: valid=false, time_below_runner_bound (the runner's clock).
import torch

import evokernel_mcp.benchmark.activity as _act
import evokernel_mcp.benchmark.timing as _timing

_spans, _batch = _act.spans_ms, _timing.timed_batch


def _scaled_spans(*a, **k):
    r = _spans(*a, **k)
    return [t * 0.35 for t in r] if isinstance(r, list) else r


def _scaled_batch(*a, **k):
    return [t * 0.35 for t in _batch(*a, **k)]


_act.spans_ms, _timing.timed_batch = _scaled_spans, _scaled_batch


def run(A, B):
    return torch.matmul(A, B)
