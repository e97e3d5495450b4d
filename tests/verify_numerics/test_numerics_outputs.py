"""flatten_outputs / match_structure: every kind of output a reference returns."""

from __future__ import annotations

import collections

import pytest
import torch

from evokernel_mcp.verify.outputs import OutputError, StructureMismatch, flatten_outputs, match_structure


def _paths(obj):
    return [leaf.path for leaf in flatten_outputs(obj)]


def test_single_tensor_and_nested_structures():
    t = torch.ones(2, 3)
    assert _paths(t) == ["out"]
    obj = (t, [t.int(), {"logits": t, 3: t.bool()}], torch.tensor(1.5))
    assert _paths(obj) == ["out[0]", "out[1][0]", "out[1][1]['logits']", "out[1][1][3]", "out[2]"]
    leaves = flatten_outputs(obj)
    assert leaves[1].tensor.dtype == torch.int32 and leaves[3].tensor.dtype == torch.bool
    assert leaves[4].tensor.dim() == 0


def test_named_tuples_and_return_types_are_positional():
    vals = torch.max(torch.arange(6.0).reshape(2, 3), dim=1)  # torch.return_types.max
    assert _paths(vals) == ["out[0]", "out[1]"]
    P = collections.namedtuple("P", "a b")
    assert _paths(P(torch.zeros(1), torch.zeros(1))) == ["out[0]", "out[1]"]


def test_python_scalars_become_0d_tensors():
    leaves = flatten_outputs([True, 3, 2.5, 1 + 2j])
    assert [leaf.tensor.dtype for leaf in leaves] == [torch.bool, torch.int64, torch.float64, torch.complex128]
    assert all(leaf.tensor.dim() == 0 for leaf in leaves)
    assert float(leaves[2].tensor) == 2.5


def test_parameter_is_a_plain_tensor():
    p = torch.nn.Parameter(torch.ones(2))
    assert flatten_outputs(p)[0].tensor is p


@pytest.mark.parametrize("bad, path, type_name", [
    (None, "out", "NoneType"),
    ("text", "out", "str"),
    ((torch.ones(1), None), "out[1]", "NoneType"),
    ({"a": [torch.ones(1), object()]}, "out['a'][1]", "object"),
    (2**70, "out", "int"),
])
def test_other_values_raise_with_path_and_type(bad, path, type_name):
    with pytest.raises(OutputError) as e:
        flatten_outputs(bad)
    assert e.value.path == path and e.value.type_name == type_name
    assert path in str(e.value)


def test_tensor_subclass_is_not_a_plain_tensor():
    class Lazy(torch.Tensor):
        pass

    t = torch.ones(3).as_subclass(Lazy)
    with pytest.raises(OutputError, match="not a plain tensor"):
        flatten_outputs((torch.ones(1), t))


def test_sparse_and_meta_tensors_are_refused():
    with pytest.raises(OutputError, match="strided"):
        flatten_outputs(torch.eye(3).to_sparse())
    with pytest.raises(OutputError, match="meta"):
        flatten_outputs(torch.empty(2, device="meta"))
    assert flatten_outputs(torch.empty(2, device="meta"), allow_meta=True)[0].tensor.shape == (2,)


def test_dict_keys_must_be_str_or_int():
    with pytest.raises(OutputError, match="keys"):
        flatten_outputs({(1, 2): torch.ones(1)})


def test_match_structure_pairs_by_path_in_reference_order():
    ref = flatten_outputs({"a": torch.ones(2), "b": torch.zeros(3, dtype=torch.int64)})
    cand = flatten_outputs({"b": torch.ones(3, dtype=torch.int64), "a": torch.zeros(2)})
    pairs = match_structure(cand, ref)
    assert not isinstance(pairs, StructureMismatch)
    assert [(c.path, r.path) for c, r in pairs] == [("out['a']", "out['a']"), ("out['b']", "out['b']")]
    assert pairs[1][0].tensor.dtype == torch.int64


def test_match_structure_reports_count_paths_shapes_and_dtypes():
    ref = flatten_outputs((torch.ones(2, 3), torch.ones(4), torch.ones(5)))
    cand = flatten_outputs((torch.ones(3, 2), torch.ones(4, dtype=torch.float16)))
    m = match_structure(cand, ref)
    assert isinstance(m, StructureMismatch)
    assert (m.candidate_count, m.reference_count) == (2, 3)
    assert m.missing_paths == ["out[2]"] and m.extra_paths == []
    assert m.shapes[0].path == "out[0]" and m.shapes[0].candidate_shape == [3, 2]
    assert m.dtypes[0].candidate_dtype == "float16" and m.dtypes[0].reference_dtype == "float32"
    assert "out[2]" in m.message and "[3, 2]" in m.message and "float16" in m.message


def test_match_structure_single_tensor_vs_tuple_is_a_mismatch():
    m = match_structure(flatten_outputs((torch.ones(2),)), flatten_outputs(torch.ones(2)))
    assert isinstance(m, StructureMismatch)
    assert m.missing_paths == ["out"] and m.extra_paths == ["out[0]"]
