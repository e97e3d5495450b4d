"""The pieces of the offline HIP toolchain (no ROCm installed): clang-19, a fake ROCm root holding the
HIP headers shipped in the Triton wheel, and the AMD device libraries (Debian package rocm-device-libs).

clang-19 and ld.lld as executables.find finds them (EVOKERNEL_CLANG > install dirs / PATH >
/usr/lib/llvm-19/bin/clang); device libraries: $ROCM_PATH/amdgcn/bitcode > /usr/lib/<multiarch>/amdgcn/bitcode >
the LLVM 19 resource dir.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import os
import re
import shutil
from pathlib import Path

from evokernel_mcp import executables
from evokernel_mcp.errors import ToolNotFound
from evokernel_mcp.paths import sub_state_dir

# Targets the installed clang-19 does not know, and the closest target it does (a feature subset).
_FRONTEND_FOR = {"gfx950": "gfx942"}
# oclc_isa_version_<n>.bc to link per target; first existing wins (rocm-device-libs 5.2 has 940, not 942).
_ISA_LIBS = {"gfx90a": ("90a",), "gfx942": ("942", "940"), "gfx950": ("950", "942", "940")}
_CONTROL_LIBS = ("oclc_daz_opt_off", "oclc_unsafe_math_off", "oclc_finite_only_off",
                 "oclc_correctly_rounded_sqrt_on", "oclc_wavefrontsize64_on", "oclc_abi_version_500")


def frontend_target(target: str) -> str:
    return _FRONTEND_FOR.get(target, target)


def resolve_clang19() -> str:
    return executables.require("clang", hint="Install ROCm (hipcc) or Debian's clang-19 + lld-19 + "
                               "rocm-device-libs to compile HIP without a GPU.")


def resolve_lld19() -> str | None:
    return executables.find("ld.lld")


def _triton_hip_include() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("triton")
    if spec is None or not spec.origin:
        raise ToolNotFound("triton (for its HIP headers)", hint="pip install triton, or install ROCm.")
    inc = Path(spec.origin).parent / "backends" / "amd" / "include"
    if not (inc / "hip" / "hip_runtime.h").is_file():
        raise ToolNotFound("HIP headers", searched=[str(inc)], hint="This Triton wheel ships no HIP headers; "
                           "install ROCm.")
    return inc


def _hip_version_file(include: Path) -> str:
    text = (include / "hip" / "hip_version.h").read_text(errors="replace")
    parts = {k: re.search(rf"#define HIP_VERSION_{k} (\d+)", text) for k in ("MAJOR", "MINOR", "PATCH")}
    return "".join(f"HIP_VERSION_{k}={m.group(1) if m else 0}\n" for k, m in parts.items())


def offline_rocm_root() -> Path:
    """state_dir/hip_rocm_root/<hash of the header dir>: include -> triton's HIP headers, bin/.hipVersion
    (clang-19 reads it to accept the root and pre-include its HIP runtime wrapper). Built once per state dir,
    atomically; looked up on every call (a stat), never cached in the process: the state dir can change
    (EVOKERNEL_HOME) and a cached path into an earlier one may be gone."""
    include = _triton_hip_include()
    root = sub_state_dir("hip_rocm_root") / hashlib.sha256(str(include.resolve()).encode()).hexdigest()[:12]
    if (root / "bin" / ".hipVersion").is_file():
        return root
    tmp = root.with_name(f"{root.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "bin").mkdir(parents=True)
    (tmp / "include").symlink_to(include, target_is_directory=True)
    (tmp / "bin" / ".hipVersion").write_text(_hip_version_file(include))
    try:
        os.rename(tmp, root)
    except OSError:  # another process built it first; theirs is identical
        shutil.rmtree(tmp, ignore_errors=True)
    return root


@functools.lru_cache(maxsize=1)
def device_lib_dir() -> Path:
    cands = [os.environ.get("ROCM_PATH", "/opt/rocm") + "/amdgcn/bitcode"]
    cands += sorted(glob.glob("/usr/lib/*/amdgcn/bitcode")) + ["/usr/lib/llvm-19/lib/clang/19/lib/amdgcn/bitcode",
                                                               "/usr/share/amdgcn/bitcode"]
    for c in cands:
        if c and (Path(c) / "ockl.bc").is_file():
            return Path(c)
    raise ToolNotFound("AMD device libraries (ockl.bc)", searched=[c for c in cands if c],
                       env_var="ROCM_PATH", hint="apt-get install rocm-device-libs.")


def device_lib_args(target: str) -> list[str]:
    """-Xclang -mlink-builtin-bitcode for ocml, ockl and the oclc control libraries matching `target`."""
    d = device_lib_dir()
    isa = next((f"oclc_isa_version_{v}" for v in _ISA_LIBS.get(frontend_target(target), ())
                if (d / f"oclc_isa_version_{v}.bc").is_file()), None)
    names = ["ocml", "ockl", *_CONTROL_LIBS] + ([isa] if isa else [])
    args: list[str] = []
    for n in names:
        if (d / f"{n}.bc").is_file():
            args += ["-Xclang", "-mlink-builtin-bitcode", "-Xclang", str(d / f"{n}.bc")]
    return args
