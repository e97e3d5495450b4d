"""The machine-readable verdict of one benchmarked shape: `valid`, and when not, one reason from a closed set.

A search loop reads `speedup`; it must never read a number that came from a wrong, unfinished or
unattributable measurement. So the verdict is computed here, by harness code in the runner, from the raw
record of the shape (the candidate process's timing records and the runner's own output checks), and
when it is `invalid` the result's speedup and timing figures are nulled (results.shape_result).

Invalid vs flag: a reason is INVALID when the number measured is not the time of the requested
computation (wrong output, work outside the window, no device work, a time below what the silicon
allows). Things that make a valid number less comparable are FLAGS, not reasons: the clocks moving
during the series (`clocks_moved`, the figures are in the result), the activity clock being unavailable
(events used instead, saying why), host timing on the CPU path.

The raw record `judge_shape` reads (keys absent = that check was not run; it never makes a shape invalid):
- error: str                 the candidate raised / crashed on this shape
- settled: {plain_tensor: bool, pending: bool, detail: str}    settle.settled_check
- check_sampled: {passed: bool, checked: int, ...}   outputs kept from random timed repetitions, compared
- check_probes: {passed: bool, checked: int, note}   every timed repetition's output at a few positions
                                                     (probes.py), judged by verify's bar
- runner_bound: {passed: bool, detail, ...}          the candidate's reported times against the runner's own
                                                     clock around each block (runner_side.runner_bound); also
                                                     under confirm: {runner_bound, check_probes} of the
                                                     second process
- check_timed, check_fresh: {passed: bool, ...}      outputs after timing (refilled storage; fresh inputs)
- check_probe: {passed: bool | None, ...}            the output on verify's signed probe inputs after timing
                                                     (passed None: the reference cannot run on them)
- candidate: the timing run dict; its `extra` may hold
    outside_window: str      device work of the call outside its timed window (side stream, after the end)
    no_device_work: str      the profiler saw no device activity for the call (GPU path)
    activity_cut_failed: str the activity records had the call's work but did not cut into repetitions
  and `times_ms` (their median is compared with floor_ms).
"""

from __future__ import annotations

import statistics
from typing import Any, Literal, get_args

InvalidReason = Literal[
    "candidate_error",
    "output_not_plain_tensor",
    "wrong_output_in_timed_call",
    "wrong_output_after_timing",
    "below_problem_precision",
    "work_pending_at_return",
    "device_work_outside_timed_window",
    "no_device_work",
    "timer_fallback",
    "below_physical_floor",
    "not_confirmed",
    "time_below_runner_bound",
]

EXPLAIN: dict[str, str] = {
    "candidate_error": "the candidate raised or crashed on this shape; nothing was timed to completion",
    "output_not_plain_tensor": "the output is not a plain torch.Tensor (a subclass or lazy wrapper can defer "
                               "or fake the work); return plain tensors",
    "wrong_output_in_timed_call": "the output of a timed repetition (probed at random positions in every "
                                  "repetition, or kept whole at random) does not match the reference on the "
                                  "inputs it was given (work skipped, a cached or stale answer, a lower "
                                  "precision than the problem's dtype)",
    "wrong_output_after_timing": "the output on refilled or fresh inputs after timing does not match the reference "
                                 "(e.g. results cached by input address, or an nth-call switch)",
    "below_problem_precision": "the output on verify's signed probe inputs (randn x 4, as verify_vs_pytorch's probe "
                               "case) fails verify's bar for the problem's dtype: a computation in a lower "
                               "precision (TF32, fp16 or bf16 for an fp32 problem), or one right only on the "
                               "task's own input range; verify_vs_pytorch fails it too",
    "work_pending_at_return": "the output changed after the call returned (device work on an unjoined stream "
                              "or a background thread still writing it): the timed window missed that work",
    "device_work_outside_timed_window": "the activity records show device work of the call on another stream or "
                                        "after the timed window; synchronize it onto the current stream",
    "no_device_work": "the profiler saw no device activity for the call: nothing was computed on the GPU",
    "timer_fallback": "the call's device activity did not cut into one span per repetition, so no clock can be "
                      "trusted to hold the whole call (event times would miss part of it)",
    "below_physical_floor": "the time is below the device's physical floor for this problem's bytes and FLOPs "
                            "(roofline at datasheet peaks): the full problem was not computed",
    "not_confirmed": "with confirm=true, a second fresh process on fresh inputs measured a speedup whose "
                     "interval does not overlap the first one's",
    "time_below_runner_bound": "the times the candidate's process reported are shorter than the runner's own "
                               "clock around its blocks allows (same harness work as the baseline arm): a "
                               "rescaled timer, or work moved out of the timed windows",
}
REASONS: tuple[str, ...] = get_args(InvalidReason)

FLOOR_SLACK = 0.95  # a median below 95 % of the datasheet roofline is impossible (5 % for clock/peak error)


def _failed(check: Any) -> bool:
    return isinstance(check, dict) and check.get("passed") is False


def _detail_of(check: dict[str, Any]) -> str:
    keys = ("mismatches", "max_abs_err", "checked", "note")
    return ", ".join(f"{k}={check[k]}" for k in keys if check.get(k) is not None)[:500] or "see check_detail"


def _timing_reason(run: dict[str, Any]) -> tuple[InvalidReason, str] | None:
    extra = run.get("extra") or {}
    for key, reason in (("outside_window", "device_work_outside_timed_window"),
                        ("no_device_work", "no_device_work"), ("activity_cut_failed", "timer_fallback")):
        if extra.get(key):
            return reason, str(extra[key])[:500]  # type: ignore[return-value]
    return None


def judge_shape(raw: dict[str, Any], floor_ms: float | None) -> tuple[bool, InvalidReason | None, str | None]:
    """(valid, reason, detail) of one shape's raw record (module docstring); the first failing check in the
    order of the InvalidReason literal wins. floor_ms: the physical floor (roofline at datasheet peaks) of
    the problem on this device, None when unknown (host timing, no byte/FLOP counts)."""
    if raw.get("error"):
        return False, "candidate_error", str(raw["error"])[:500]
    settled = raw.get("settled") or {}
    if settled.get("plain_tensor") is False:
        return False, "output_not_plain_tensor", str(settled.get("detail") or "")[:500] or None
    for key in ("check_probes", "check_sampled"):
        if _failed(raw.get(key)):
            return False, "wrong_output_in_timed_call", f"{key}: {_detail_of(raw[key])}"
    if _failed((raw.get("confirm") or {}).get("check_probes")):
        return False, "wrong_output_in_timed_call", f"confirm: {_detail_of(raw['confirm']['check_probes'])}"
    for key in ("check_timed", "check_fresh"):
        if _failed(raw.get(key)):
            return False, "wrong_output_after_timing", f"{key}: {_detail_of(raw[key])}"
    if _failed(raw.get("check_probe")):
        return False, "below_problem_precision", f"check_probe: {_detail_of(raw['check_probe'])}"
    if settled.get("pending") is True:
        return False, "work_pending_at_return", str(settled.get("detail") or "")[:500] or None
    for bound in (raw.get("runner_bound"), (raw.get("confirm") or {}).get("runner_bound")):
        if _failed(bound) and bound.get("enforced", True):
            return False, "time_below_runner_bound", str(bound.get("detail") or "")[:500]
    cand = raw.get("candidate") or {}
    hit = _timing_reason(cand)
    if hit:
        return False, hit[0], hit[1]
    times = cand.get("times_ms") or []
    if floor_ms and times and not cand.get("host_timing"):
        med = statistics.median(times)
        if med < FLOOR_SLACK * floor_ms:
            return False, "below_physical_floor", (f"median {med:.6g} ms < {FLOOR_SLACK:g} x floor {floor_ms:.6g} ms "
                                                   "(datasheet roofline)")
    if raw.get("confirm_failed"):
        return False, "not_confirmed", str(raw["confirm_failed"])[:500]
    return True, None, None
