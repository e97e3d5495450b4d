"""Every kind of output a reference (or a candidate) returns, flattened to named tensor leaves.

Pure torch, no I/O. The runner flattens the reference's and the candidate's outputs, pairs the leaves
with `match_structure`, then judges each pair (verify/bar.py).

Accepted: plain tensors (floating, integer, bool, complex dtypes; 0-d included; on any device),
tuples / lists / named tuples / torch.return_types (by position), dicts with str or int keys (by key,
so their order does not matter), nested to `MAX_DEPTH`, and Python bool / int / float / complex
scalars (as 0-d tensors: bool, int64, float64, complex128). Anything else (None, a string, an object,
a tensor subclass or lazy wrapper, a sparse or quantized tensor) raises `OutputError` naming the
path and the type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

MAX_DEPTH = 16
MAX_LEAVES = 4096


class OutputError(ValueError):
    """An output cannot be compared: `path` says where (e.g. "out[1]['logits']"), `type_name` what it was."""

    def __init__(self, path: str, type_name: str, reason: str):
        super().__init__(f"output {path}: {reason} (got {type_name}); return tensors, Python numbers, or "
                         f"tuples/lists/dicts of them")
        self.path = path
        self.type_name = type_name
        self.reason = reason


@dataclass(frozen=True)
class Leaf:
    """One output tensor and where it sits in the returned structure."""

    path: str
    tensor: Any  # torch.Tensor (kept untyped so this module imports without torch)


def _type_name(obj: Any) -> str:
    t = type(obj)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _check_tensor(t: Any, path: str, allow_meta: bool) -> None:
    import torch

    if type(t) not in (torch.Tensor, torch.nn.Parameter):
        raise OutputError(path, _type_name(t), "not a plain tensor (a subclass or lazy wrapper); return "
                                               "a torch.Tensor")
    if t.layout != torch.strided:
        raise OutputError(path, f"tensor with layout {t.layout}", "only dense (strided) tensors are compared")
    if t.is_quantized:
        raise OutputError(path, f"tensor of dtype {t.dtype}", "quantized tensors are not compared")
    if t.device.type == "meta" and not allow_meta:
        raise OutputError(path, "tensor on the meta device", "the output holds no data")


def _scalar_leaf(obj: Any, path: str) -> Leaf:
    import torch

    if isinstance(obj, bool):
        return Leaf(path, torch.tensor(obj, dtype=torch.bool))
    if isinstance(obj, int):
        if not -(2**63) <= obj < 2**63:
            raise OutputError(path, "int", f"integer {obj} does not fit in int64")
        return Leaf(path, torch.tensor(obj, dtype=torch.int64))
    if isinstance(obj, float):
        return Leaf(path, torch.tensor(obj, dtype=torch.float64))
    return Leaf(path, torch.tensor(obj, dtype=torch.complex128))


def _walk(obj: Any, path: str, depth: int, leaves: list[Leaf], allow_meta: bool) -> None:
    import torch

    if depth > MAX_DEPTH:
        raise OutputError(path, _type_name(obj), f"nested deeper than {MAX_DEPTH} levels")
    if len(leaves) >= MAX_LEAVES:
        raise OutputError(path, _type_name(obj), f"more than {MAX_LEAVES} output tensors")
    if isinstance(obj, torch.Tensor):
        _check_tensor(obj, path, allow_meta)
        leaves.append(Leaf(path, obj))
    elif type(obj) in (bool, int, float, complex):
        leaves.append(_scalar_leaf(obj, path))
    elif isinstance(obj, (tuple, list)):
        for i, item in enumerate(obj):
            _walk(item, f"{path}[{i}]", depth + 1, leaves, allow_meta)
    elif isinstance(obj, dict):
        for key, item in obj.items():
            if type(key) not in (str, int):
                raise OutputError(f"{path}[{key!r}]", _type_name(key), "dict keys must be str or int")
            _walk(item, f"{path}[{key!r}]", depth + 1, leaves, allow_meta)
    else:
        what = "None is not an output" if obj is None else "not a tensor, number, tuple, list or dict"
        raise OutputError(path, _type_name(obj), what)


def flatten_outputs(obj: Any, *, root: str = "out", allow_meta: bool = False) -> list[Leaf]:
    """Flatten a forward's return value to leaves in a stable order (positions, then dict order).

    A single tensor gives one leaf at path `root`; `(a, {"b": c})` gives "out[0]" and "out[1]['b']".
    Raises OutputError for anything that is not comparable. `allow_meta` accepts meta tensors (for
    shape inference, verify/memory.py).
    """
    leaves: list[Leaf] = []
    _walk(obj, root, 0, leaves, allow_meta)
    return leaves


class ShapeMismatch(BaseModel):
    path: str
    candidate_shape: list[int]
    reference_shape: list[int]


class DtypeMismatch(BaseModel):
    path: str
    candidate_dtype: str
    reference_dtype: str


class StructureMismatch(BaseModel):
    """Why a candidate's outputs cannot be paired with the reference's."""

    candidate_count: int = Field(description="Number of output tensors the candidate returned.")
    reference_count: int = Field(description="Number of output tensors the reference returned.")
    missing_paths: list[str] = Field(default_factory=list, description="In the reference, not the candidate.")
    extra_paths: list[str] = Field(default_factory=list, description="In the candidate, not the reference.")
    shapes: list[ShapeMismatch] = Field(default_factory=list)
    dtypes: list[DtypeMismatch] = Field(default_factory=list)
    message: str


def _dtype_name(t: Any) -> str:
    return str(t.dtype).removeprefix("torch.")


def _message(cand_n: int, ref_n: int, missing: list[str], extra: list[str],
             shapes: list[ShapeMismatch], dtypes: list[DtypeMismatch]) -> str:
    parts = []
    if missing or extra:
        parts.append(f"the candidate returned {cand_n} output tensor(s), the reference {ref_n}")
    if missing:
        parts.append(f"missing {', '.join(missing[:5])}")
    if extra:
        parts.append(f"unexpected {', '.join(extra[:5])}")
    for s in shapes[:3]:
        parts.append(f"{s.path}: shape {s.candidate_shape} != reference {s.reference_shape}")
    for d in dtypes[:3]:
        parts.append(f"{d.path}: dtype {d.candidate_dtype} != reference {d.reference_dtype}")
    return "; ".join(parts)


def match_structure(cand_leaves: list[Leaf], ref_leaves: list[Leaf]) -> list[tuple[Leaf, Leaf]] | StructureMismatch:
    """Pair candidate and reference leaves by path, in the reference's order.

    Returns the (candidate, reference) pairs when every path matches and each pair has the same shape
    and dtype; otherwise a StructureMismatch listing all differences (counts, paths, shapes, dtypes).
    """
    cand = {leaf.path: leaf for leaf in cand_leaves}
    ref = {leaf.path: leaf for leaf in ref_leaves}
    missing = [p for p in ref if p not in cand]
    extra = [p for p in cand if p not in ref]
    shapes, dtypes, pairs = [], [], []
    for path, r in ref.items():
        c = cand.get(path)
        if c is None:
            continue
        if tuple(c.tensor.shape) != tuple(r.tensor.shape):
            shapes.append(ShapeMismatch(path=path, candidate_shape=list(c.tensor.shape),
                                        reference_shape=list(r.tensor.shape)))
        if c.tensor.dtype != r.tensor.dtype:
            dtypes.append(DtypeMismatch(path=path, candidate_dtype=_dtype_name(c.tensor),
                                        reference_dtype=_dtype_name(r.tensor)))
        pairs.append((c, r))
    if missing or extra or shapes or dtypes:
        return StructureMismatch(candidate_count=len(cand_leaves), reference_count=len(ref_leaves),
                                 missing_paths=missing, extra_paths=extra, shapes=shapes, dtypes=dtypes,
                                 message=_message(len(cand_leaves), len(ref_leaves), missing, extra, shapes, dtypes))
    return pairs
