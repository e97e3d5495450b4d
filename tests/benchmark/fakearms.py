"""A fake child that answers the benchmark arms' ops (arm_init, arm_block, arm_times, arm_report) and logs each
request, for the runner's side of interleaved timing (benchmark/arms.py) without processes."""

from __future__ import annotations


class ArmChild:
    def __init__(self, name: str, log: list):
        self.name, self.log, self.courier = name, log, None

    def request(self, req, timeout_s, max_bytes, device=None):
        op = req["op"]
        self.log.append((self.name, op, req))
        if op == "arm_init":
            return {"copies": 1, "event_overhead_ms": None, "host_enqueue_s": 1e-5}
        if op == "arm_block":
            self.k = req["k"]
            return {"ran": req["k"]}
        if op == "arm_times":
            return {"times": [1.0] * self.k, "probes": None}
        if op == "arm_report":
            return {"samples": [], "marks": {}, "timer": "events"}
        return {}
