"""Which integer outputs of a reference are arg-reductions, found by behaviour in the reference child (the indices
select the max or min of a floating input along a dim: argmax/argmin, torch.max(x, dim).indices ...). Such an output
is judged by the values its indices select (verify/argjudge.judge_arg_reduction), since ties are legal."""

from __future__ import annotations

from typing import Any


def _is_arg_reduction(idx, x, dim: int | None) -> str | None:
    """'max' or 'min' when the integer tensor idx holds indices of x's max (min) along dim (None: flat)."""
    import torch

    try:
        if dim is None:
            if idx.numel() != 1:
                return None
            flat = x.reshape(-1)
            if not flat.numel():
                return None
            v = flat[int(idx.reshape(-1)[0])]
            fin = flat[~torch.isnan(flat)]
            if not fin.numel():
                return None
            return "max" if v == fin.max() else "min" if v == fin.min() else None
        keep = idx.dim() == x.dim()
        want = list(x.shape)
        if keep:
            want[dim] = 1
        else:
            del want[dim]
        if list(idx.shape) != want or x.shape[dim] == 0 or x.numel() == 0:
            return None
        ii = idx.long() if keep else idx.long().unsqueeze(dim)
        if bool((ii < 0).any()) or bool((ii >= x.shape[dim]).any()):
            return None
        sel = x.gather(dim, ii)
        for name, ref in (("max", x.amax(dim, keepdim=True)), ("min", x.amin(dim, keepdim=True))):
            if bool(((sel == ref) | torch.isnan(sel)).all()):
                return name
    except (RuntimeError, IndexError, ValueError):
        return None
    return None


def arg_reductions(native: Any, inputs: list[Any]) -> dict[str, dict[str, Any]]:
    """{output path: {input, dim, op}} for every integer output leaf that selects the max/min of a
    floating input along a dim (argmax/argmin, torch.max(x, dim).indices ...): judged by the values
    the indices select, since ties are legal."""
    import torch

    from evokernel_mcp.verify.outputs import flatten_outputs

    try:
        leaves = flatten_outputs(native)
    except ValueError:
        return {}
    found: dict[str, dict[str, Any]] = {}
    for leaf in leaves:
        t = leaf.tensor
        if t.dtype not in (torch.int64, torch.int32):
            continue
        for i, x in enumerate(inputs):
            if not (isinstance(x, torch.Tensor) and x.is_floating_point()):
                continue
            for dim in [None, *range(x.dim())]:
                op = _is_arg_reduction(t, x, dim)
                if op:
                    found[leaf.path] = {"input": i, "dim": dim, "op": op}
                    break
            if leaf.path in found:
                break
    return found
