"""Fused MLP reference kernel vs a float64 PyTorch reference; CPU through the Triton interpreter:
TRITON_INTERPRET=1 python3 -m pytest resources/reference_kernels/fused_mlp -q"""
import importlib.util
import os
import pathlib

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

_spec = importlib.util.spec_from_file_location("fused_mlp_kernel", pathlib.Path(__file__).with_name("kernel.py"))
kernel = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kernel)
_DEVICE = "cuda" if torch.cuda.is_available() and os.environ["TRITON_INTERPRET"] != "1" else "cpu"


@pytest.mark.parametrize("M,K,H", [(16, 32, 64), (20, 48, 80)])  # the task's small set, and ragged tiles
def test_matches_float64_reference(M, K, H):
    g = torch.Generator().manual_seed(int.from_bytes(os.urandom(2), "little"))
    x = torch.randn(M, K, generator=g).to(torch.bfloat16)
    w1 = (torch.randn(K, H, generator=g) * K ** -0.5).to(torch.bfloat16)
    b1 = (0.1 * torch.randn(H, generator=g)).to(torch.bfloat16)
    w2 = (torch.randn(H, K, generator=g) * H ** -0.5).to(torch.bfloat16)
    y = kernel.run(*(t.to(_DEVICE) for t in (x, w1, b1, w2))).double().cpu()
    ref = F.gelu(x.double() @ w1.double() + b1.double(), approximate="tanh") @ w2.double()
    rel = ((y - ref).norm() / ref.norm()).item()
    assert y.shape == (M, K) and rel < 1e-2, rel  # bf16 operands and a bf16 hidden activation


def test_unchained_shapes_are_refused():
    z = torch.zeros
    with pytest.raises(ValueError, match="do not chain"):
        kernel.run(z(4, 8), z(9, 16), z(16), z(16, 8))
