"""The experiment journal: every compile/verify/benchmark/profile/trace call that carries `experiment` is
recorded (source deduplicated by sha256, arguments, key results, result id) in one SQLite file; notes carry
evidence; list/compare/best_so_far/distill/export read it back.

API for the tools (the hook): record_call / arecord_call / journaled. API for scripts (tools/journey.py):
Store, get_store, set_default_path, and the plain tool functions in evokernel_mcp.journal.api.
"""

from evokernel_mcp.journal.models import RESULT_ID_DESCRIPTION, ExperimentArg, TaskLabelArg
from evokernel_mcp.journal.record import (
    EXPERIMENT_HELP,
    arecord_call,
    check_label,
    journaled,
    record_call,
    record_result,
    set_result_id,
    task_key,
)
from evokernel_mcp.journal.store import Store, get_store, journal_path, set_default_path

__all__ = ["EXPERIMENT_HELP", "RESULT_ID_DESCRIPTION", "ExperimentArg", "Store", "TaskLabelArg", "arecord_call",
           "check_label", "get_store", "journal_path", "journaled", "record_call", "record_result",
           "set_default_path", "set_result_id", "task_key"]
