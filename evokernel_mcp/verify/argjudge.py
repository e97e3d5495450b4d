"""An arg-reduction's output (argmax/argmin indices: verify/argred.py finds which outputs are) judged by the values
its indices select in the input reduced, in the runner (verify/case.py): ties broken differently pass, an index out
of range fails."""

from __future__ import annotations

from typing import Any

from evokernel_mcp.verify.bar import _same, _shape_failure
from evokernel_mcp.verify.blockstats import Acc, num


def _selected(idx, values, dim: int | None):
    """Values picked by indices `idx` (clamped into range) and a mask of out-of-range indices."""
    import torch

    size = values.numel() if dim is None else values.shape[dim]
    bad = (idx < 0) | (idx >= size)
    safe = idx.clamp(0, max(size - 1, 0))
    if dim is None:
        return values[torch.unravel_index(safe, tuple(values.shape))], bad
    keepdim = safe.dim() == values.dim()
    sel = values.gather(dim, safe if keepdim else safe.unsqueeze(dim))
    return (sel if keepdim else sel.squeeze(dim)), bad


def judge_arg_reduction(cand_idx, ref_idx, values, dim: int | None) -> dict[str, Any]:
    """Judge argmax/argmin indices by the values they select (ties are legal).

    values: the tensor reduced (the input); dim: the reduced dimension (None: over the flattened
    tensor; keepdim is inferred from cand_idx's rank). An index passes when values at the candidate's
    index equal values at the reference's (NaN == NaN); an out-of-range index fails. Indices are
    moved to values' device; nothing else is copied.
    """
    if tuple(cand_idx.shape) != tuple(ref_idx.shape):
        return _shape_failure(cand_idx, ref_idx, "reference")
    import torch

    if cand_idx.is_floating_point() or cand_idx.is_complex() or cand_idx.dtype == torch.bool:
        return {"passed": False, "numel": cand_idx.numel(), "mismatches": None, "bar": "not judged",
                "note": f"arg-reduction output has dtype {cand_idx.dtype}; expected integer indices"}
    d = None if dim is None else dim % max(values.dim(), 1)
    c = cand_idx.to(values.device).long()
    r = ref_idx.to(values.device).long()
    c_val, c_bad = _selected(c, values, d)
    r_val, _ = _selected(r, values, d)
    bad = (~_same(c_val, r_val) | c_bad).reshape(-1)
    acc = Acc(tuple(cand_idx.shape))
    acc.add(c_val.reshape(-1).double(), r_val.reshape(-1).double(), bad, None, 0)
    res = acc.result(cand_idx.numel())
    res.update({
        "bar": "arg-reduction: selected values equal (ties legal)", "tol": 0.0, "tol_custom": False,
        "tol_note": "the values at the candidate's indices must equal those at the reference's",
        "reference": "native", "margin": 0.0 if res["passed"] else None,
        "index_differences": int((c != r).sum()), "out_of_range_count": int(c_bad.sum()),
        "mismatch_examples": [{"index": i, "got_index": int(c[tuple(i)]), "expected_index": int(r[tuple(i)]),
                               "got": num(c_val[tuple(i)].item()), "expected": num(r_val[tuple(i)].item())}
                              for i in res["mismatch_indices"][:3]],
    })
    return res
