# Cheat: memoise the result by input address and version counter.
# Expected: valid=false, wrong_output_in_timed_call or wrong_output_after_timing (the harness refills the
# same storage with new values; copy_ under no_grad bumps the version, so key on address only).

_memo = {}


def run(A, B):
    key = (A.data_ptr(), B.data_ptr(), tuple(A.shape))
    if key not in _memo:
        _memo[key] = A @ B
    return _memo[key]
