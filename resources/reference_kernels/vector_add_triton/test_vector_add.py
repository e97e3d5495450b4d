"""Correctness test of the vector_add_triton reference kernel.

Runs on CPU through the Triton interpreter (no GPU needed); on a GPU host it
also runs on the GPU. Collect it with:
    TRITON_INTERPRET=1 python3 -m pytest resources/reference_kernels/vector_add_triton -q
"""

import importlib.util
import os
import pathlib

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")  # must be set before triton.jit runs

import torch  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "vector_add_triton_kernel", pathlib.Path(__file__).with_name("kernel.py")
)
kernel = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kernel)

_DEVICE = "cuda" if torch.cuda.is_available() and os.environ["TRITON_INTERPRET"] != "1" else "cpu"


@pytest.mark.parametrize("n", [1, 1000, 1024, 4097])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_matches_pytorch(n, dtype):
    g = torch.Generator().manual_seed(n)
    x = torch.randn(n, generator=g).to(dtype=dtype, device=_DEVICE)
    y = torch.randn(n, generator=g).to(dtype=dtype, device=_DEVICE)
    torch.testing.assert_close(kernel.run(x, y), kernel.reference(x, y), rtol=0, atol=0)


def test_2d_non_contiguous_input():
    x = torch.randn(64, 33)[:, :32]
    y = torch.randn(64, 32)
    out = kernel.run(x.to(_DEVICE), y.to(_DEVICE))
    assert out.shape == (64, 32)
    torch.testing.assert_close(out.cpu(), x + y, rtol=0, atol=0)


def test_empty_input():
    x = torch.empty(0, device=_DEVICE)
    assert kernel.run(x, x).numel() == 0


def test_mismatched_inputs_are_refused():
    with pytest.raises(ValueError, match="must match"):
        kernel.run(torch.zeros(4), torch.zeros(5))
