"""evaluate_batch: many candidates through a cascade (compile -> verify small -> verify all -> benchmark),
concurrently across an executor's devices, ranked. api.py is the tool, cascade.py the per-candidate logic."""

from evokernel_mcp.batch.api import evaluate_batch, run_batch, submit_batch
from evokernel_mcp.batch.cascade import Plan, make_plan, rank
from evokernel_mcp.batch.models import BatchCandidate, BatchResult, BatchRow, CompileSpec

__all__ = ["BatchCandidate", "BatchResult", "BatchRow", "CompileSpec", "Plan", "evaluate_batch", "make_plan", "rank",
           "run_batch", "submit_batch"]
