"""compile_kernel options: a frozen, validated object with a stable hash, plus target checks.

Extra compiler flags are checked against a per-language allow-list and normalized to one canonical
form (one flag per list item); nothing here or downstream ever goes through a shell.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from evokernel_mcp.errors import BadInput

Language = Literal["triton", "hip", "cuda"]

AMD_TARGETS = ("gfx90a", "gfx942", "gfx950")
NVIDIA_TARGETS = ("sm_90", "sm_90a", "sm_80")
TARGETS = AMD_TARGETS + NVIDIA_TARGETS
DEFAULT_AMD_TARGET = "gfx942"
DEFAULT_NVIDIA_TARGET = "sm_90"

TRITON_ONLY = ("num_warps", "num_stages", "waves_per_eu", "matrix_instr_nonkdim", "kpack", "enable_fp_fusion",
               "maxnreg")

_MACRO = r"-D[A-Za-z_][A-Za-z0-9_]{0,63}(=[A-Za-z0-9_.+\-]{0,64})?"
_COMMON_FLAGS = [r"-O[0-3]", _MACRO, r"-std=c\+\+(17|20)", r"-lineinfo"]
_FLAG_PATTERNS: dict[str, list[str]] = {
    "hip": _COMMON_FLAGS + [
        r"-ffast-math", r"-fno-fast-math", r"-ffp-contract=(fast|on|off)", r"-munsafe-fp-atomics",
        r"-mno-unsafe-fp-atomics", r"-mcumode", r"-mno-cumode", r"-fgpu-flush-denormals-to-zero",
        r"-fno-gpu-flush-denormals-to-zero", r"-Rpass-analysis=kernel-resource-usage",
    ],
    "cuda": _COMMON_FLAGS + [
        r"--use_fast_math", r"-use_fast_math", r"-maxrregcount=[1-9][0-9]{0,2}", r"--extra-device-vectorization",
        r"-ftz=(true|false)", r"-prec-div=(true|false)", r"-prec-sqrt=(true|false)", r"-fmad=(true|false)",
        r"--restrict",
    ],
    "triton": [],
}
_FLAG_RE = {lang: re.compile("^(" + "|".join(p) + ")$") if p else None for lang, p in _FLAG_PATTERNS.items()}


def allowed_flags_help(language: str) -> str:
    pats = _FLAG_PATTERNS.get(language) or []
    return ", ".join(p.replace("\\", "") for p in pats) or "none (Triton takes options, not flags)"


def normalize_flags(flags: list[str]) -> list[str]:
    """One flag per item: '-D NAME=1' and ['-D', 'NAME=1'] both become '-DNAME=1'."""
    out: list[str] = []
    pending_d = False
    for raw in flags:
        f = raw.strip()
        if pending_d:
            out.append("-D" + f)
            pending_d = False
        elif f == "-D":
            pending_d = True
        elif f.startswith("-D "):
            out.append("-D" + f[3:].strip())
        else:
            out.append(f)
    if pending_d:
        raise ValueError("flag '-D' needs a macro name after it (e.g. '-DBLOCK=256')")
    return out


class CompileOptions(BaseModel):
    """Validated compile options; frozen so they can key the cache (stable_hash)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_warps: int | None = Field(default=None, ge=1, le=32, description="Triton: warps (waves) per program.")
    num_stages: int | None = Field(default=None, ge=0, le=8, description="Triton: software pipelining stages.")
    waves_per_eu: int | None = Field(default=None, ge=0, le=16, description="Triton AMD: occupancy hint.")
    matrix_instr_nonkdim: Literal[0, 16, 32] | None = Field(default=None, description="Triton AMD: MFMA size.")
    kpack: Literal[1, 2] | None = Field(default=None, description="Triton AMD (gfx942): MFMA k-packing.")
    enable_fp_fusion: bool | None = Field(default=None, description="Triton: fuse mul+add into FMA.")
    maxnreg: int | None = Field(default=None, ge=16, le=255, description="Triton NVIDIA: max registers/thread.")
    workgroup_size: int | None = Field(
        default=None, ge=1, le=1024,
        description="Threads per workgroup/block used for occupancy (HIP/CUDA). Triton: num_warps*wavefront.")
    flags: tuple[str, ...] = Field(default=(), description="Extra HIP/CUDA compiler flags (allow-listed).")
    timeout_s: float = Field(default=120.0, ge=0.1, le=600.0, description="Hard limit for the compile.")

    @field_validator("num_warps")
    @classmethod
    def _pow2(cls, v: int | None) -> int | None:
        if v is not None and v & (v - 1):
            raise ValueError(f"num_warps must be a power of two (1, 2, 4, 8, 16, 32), got {v}")
        return v

    @field_validator("flags", mode="before")
    @classmethod
    def _norm_flags(cls, v: Any) -> Any:
        if isinstance(v, str):
            raise ValueError("flags must be a list of strings, one flag per item, e.g. ['-O3', '-DBLOCK=256']")
        return tuple(normalize_flags([str(x) for x in v])) if v is not None else ()

    def stable_dict(self) -> dict[str, Any]:
        """Canonical content (timeout excluded: it does not change the code produced)."""
        return self.model_dump(exclude={"timeout_s"}, exclude_none=True, mode="json")

    def stable_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.stable_dict(), sort_keys=True).encode()).hexdigest()

    def triton_options(self) -> dict[str, Any]:
        return self.model_dump(include=set(TRITON_ONLY), exclude_none=True)


def parse_options(options: dict[str, Any] | CompileOptions | None, language: str) -> CompileOptions:
    """Validate the agent's options dict for `language`; BadInput saying what to fix."""
    if isinstance(options, CompileOptions):
        opts = options
    else:
        try:
            opts = CompileOptions.model_validate(options or {})
        except ValidationError as e:
            msgs = "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'options'}: {err['msg']}" for err in e.errors())
            raise BadInput(f"bad options: {msgs}. Known options: {', '.join(CompileOptions.model_fields)}.") from None
    _check_language_fit(opts, language)
    return opts


def _check_language_fit(opts: CompileOptions, language: str) -> None:
    if language != "triton":
        given = [k for k in TRITON_ONLY if getattr(opts, k) is not None]
        if given:
            raise BadInput(f"options {given} apply to language='triton' only; for {language} set "
                           f"options.workgroup_size (threads per block) and options.flags.")
    elif opts.workgroup_size is not None:
        raise BadInput("options.workgroup_size is for HIP/CUDA; a Triton program's size is num_warps x wavefront.")
    regex = _FLAG_RE[language]
    bad = [f for f in opts.flags if regex is None or not regex.match(f)]
    if bad:
        raise BadInput(f"flags not allowed for language={language!r}: {bad}. Allowed: {allowed_flags_help(language)}.")


def check_target(target: str, language: str) -> str:
    """Canonical target name for language, or BadInput listing the supported ones."""
    t = target.strip().lower()
    if t not in TARGETS:
        raise BadInput(f"unsupported target {target!r}; supported: {', '.join(TARGETS)} "
                       f"(AMD: {', '.join(AMD_TARGETS)}; NVIDIA: {', '.join(NVIDIA_TARGETS)}).")
    if language == "hip" and t not in AMD_TARGETS:
        raise BadInput(f"language='hip' compiles for AMD targets ({', '.join(AMD_TARGETS)}), not {target!r}; "
                       "use language='cuda' for NVIDIA.")
    if language == "cuda" and t in AMD_TARGETS:
        raise BadInput(f"language='cuda' compiles for NVIDIA targets ({', '.join(NVIDIA_TARGETS)}), not {target!r}; "
                       "use language='hip' for AMD.")
    return t


def is_amd(target: str) -> bool:
    return target in AMD_TARGETS
