"""verify_vs_pytorch: is the candidate the same function as the PyTorch reference?

- api.py      the tool (server side): validate arguments, run the check as a job, build the result.
- case.py     judge one case in the runner; sides.py: the halves run in sandboxed children;
- draws.py    a spec task's input draws, kept in the reference process between cases and jobs;
- runner_side.py  the op in the runner: orchestrates the reference and candidate children.
- compare.py  the comparison, unwritten/NaN/determinism checks (harness numerics; pure torch).
"""

# The public names, from api.py on first use (PEP 562): the sandboxed child imports verify.sides, and must not
# pay for api.py's import of the MCP SDK (~0.5 s of every child's start).
_PUBLIC = ("MAX_SEEDS", "ToleranceArg", "VerifyCase", "VerifyResult", "build_payload", "resolve_tolerance",
           "result_from_reply", "verify_vs_pytorch")
__all__ = list(_PUBLIC)


def __getattr__(name: str):
    if name in _PUBLIC:
        from evokernel_mcp.verify import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
