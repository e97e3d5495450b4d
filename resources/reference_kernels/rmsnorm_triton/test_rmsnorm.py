"""RMSNorm reference kernel vs PyTorch (fp32 math); CPU through the Triton interpreter:
TRITON_INTERPRET=1 python3 -m pytest resources/reference_kernels/rmsnorm_triton -q"""
import importlib.util
import os
import pathlib

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
import torch  # noqa: E402

_spec = importlib.util.spec_from_file_location("rmsnorm_kernel", pathlib.Path(__file__).with_name("kernel.py"))
kernel = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kernel)
_DEVICE = "cuda" if torch.cuda.is_available() and os.environ["TRITON_INTERPRET"] != "1" else "cpu"


@pytest.mark.parametrize("B,N", [(4, 64), (3, 100), (2, 4096)])
def test_matches_pytorch(B, N):
    g = torch.Generator().manual_seed(int.from_bytes(os.urandom(2), "little"))
    x = torch.randn(B, N, generator=g).to(torch.bfloat16).to(_DEVICE)
    w = (0.5 + torch.rand(N, generator=g)).to(torch.bfloat16).to(_DEVICE)
    torch.testing.assert_close(kernel.run(x, w).float(), kernel.reference(x, w).float(), rtol=1.6e-2, atol=1e-2)


def test_rows_are_independent():
    x = torch.randn(2, 64).to(torch.bfloat16)
    x[1] *= 1000
    y = kernel.run(x, torch.ones(64, dtype=torch.bfloat16))
    ref = kernel.reference(x[:1], torch.ones(64, dtype=torch.bfloat16))[0].float()
    torch.testing.assert_close(y[0].float(), ref, rtol=1.6e-2, atol=1e-2)


def test_wrong_weight_length_is_refused():
    with pytest.raises(ValueError, match="entries"):
        kernel.run(torch.zeros(2, 8), torch.zeros(7))
