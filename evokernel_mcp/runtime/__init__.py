"""Runtime: the job engine (jobs.py, submit.py), one runner process per device (pool.py, runner.py), the
server<->runner messages (protocol.py), the registry of runner ops (ops.py), and the sandboxed children
that run agent code (sandbox.py, spares.py, child_proc.py, child.py, frames.py, courier.py).

Agent code never runs in the server process nor in the runner: it runs in sandboxed children that serve
one source each; the pool replaces a runner after any hang, crash or GPU fault."""
