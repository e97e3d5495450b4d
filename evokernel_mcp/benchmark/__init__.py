"""benchmark and measure_ceilings: timings an engineer would sign off on (api.py: server side;
runner_side.py, arms.py, interleave.py, verdict.py: in the device's runner; sides.py, blocks.py, timing.py,
activity.py, settle.py: inside each arm's sandboxed process; stats.py, roofline.py: pure arithmetic)."""
