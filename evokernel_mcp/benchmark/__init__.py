"""benchmark and measure_ceilings: timings an engineer would sign off on (api.py: server side;
worker.py + timing.py: inside the device's worker; stats.py, roofline.py: pure arithmetic)."""
