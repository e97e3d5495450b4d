"""verify_vs_pytorch: is the candidate the same function as the PyTorch reference?

- api.py      the tool (server side): validate arguments, run the check as a job, build the result.
- case.py     judge one case in the runner; sides.py: the halves run in sandboxed children;
- runner_side.py  the op in the runner: orchestrates the reference and candidate children.
- compare.py  the comparison, unwritten/NaN/determinism checks (harness numerics; pure torch).
"""

from evokernel_mcp.verify.api import (  # noqa: F401 - the public names
    MAX_SEEDS, ToleranceArg, VerifyCase, VerifyResult, build_payload, resolve_tolerance, result_from_reply,
    verify_vs_pytorch,
)
