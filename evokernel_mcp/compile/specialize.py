"""The specialization Triton's JIT applies at launch, for compile_kernel to compile the kernel that will run.

At a launch the JIT marks every pointer whose address is a multiple of 16 and every integer that is a multiple
of 16 as `tt.divisibility = 16`, and turns an integer equal to 1 into the constant 1. Those facts decide
vector widths, async copies and the software pipeline, so a compile without them reports another kernel.
compile_kernel applies the same rules: by default to what a launch with fresh torch tensors and sizes that are
multiples of 16 gets (every pointer aligned, every integer divisible by 16); `specialize` gives example values
where a launch differs (e.g. {"n": 1000, "stride_k": 1, "x_ptr": "unaligned"}).
"""

from __future__ import annotations

from typing import Literal

from evokernel_mcp.errors import BadInput

Spec = Literal["divisible_by_16", "equal_to_1", "none"]


def _int_spec(arg: str, value: int | str) -> Spec:
    if isinstance(value, bool):
        raise BadInput(f"specialize[{arg!r}]: give an example integer value, 'divisible_by_16' or 'none'")
    if isinstance(value, int):
        return "equal_to_1" if value == 1 else ("divisible_by_16" if value % 16 == 0 else "none")
    if value in ("divisible_by_16", "none", "equal_to_1"):
        return value  # type: ignore[return-value]
    raise BadInput(f"specialize[{arg!r}] = {value!r}: an integer argument takes an example value (e.g. 1000), "
                   "'divisible_by_16' or 'none'")


def _ptr_spec(arg: str, value: int | str) -> Spec:
    if isinstance(value, int) and not isinstance(value, bool):
        return "divisible_by_16" if value % 16 == 0 else "none"  # a byte offset from an aligned allocation
    if value in ("aligned", "divisible_by_16"):
        return "divisible_by_16"
    if value in ("unaligned", "none"):
        return "none"
    raise BadInput(f"specialize[{arg!r}] = {value!r}: a pointer argument takes 'aligned', 'unaligned' or a byte "
                   "offset from an aligned allocation")


def resolve(signature: dict[str, str], specialize: dict[str, int | str] | None) -> dict[str, Spec]:
    """Per runtime argument of the signature, the specialization the compile applies (floats: none)."""
    specialize = dict(specialize or {})
    unknown = sorted(set(specialize) - set(signature))
    if unknown:
        raise BadInput(f"specialize names {unknown}, which are not runtime arguments of the signature "
                       f"({', '.join(signature) or 'none'}); constexprs are already constants.")
    out: dict[str, Spec] = {}
    for arg, ty in signature.items():
        ty = ty.strip()
        if ty.startswith("*"):
            out[arg] = _ptr_spec(arg, specialize.get(arg, "aligned"))
        elif ty.lstrip("u").startswith("i") and ty not in ("i1",):
            out[arg] = _int_spec(arg, specialize.get(arg, "divisible_by_16"))
        else:
            if arg in specialize:
                raise BadInput(f"specialize[{arg!r}]: {ty} arguments are not specialized by the JIT")
            out[arg] = "none"
    return out
