"""Runtime: the job engine (jobs.py), one worker process per device (pool.py, worker.py), the
server<->worker messages (protocol.py) and the registry of worker ops (ops.py).

Candidate code never runs in the server process: it runs inside a worker, which the pool replaces
after any hang, crash or GPU fault."""
