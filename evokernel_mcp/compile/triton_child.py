"""Child process of the Triton backend: `python -m evokernel_mcp.compile.triton_child SPEC.json`.

Imports the user's module from a file in its own workdir (never in the server), runs
`triton.compile(ASTSource(...), target=GPUTarget(...), options=...)` and writes `result.json` plus
one file per compiler stage (`kernel.ttir`, `kernel.amdgcn`, `kernel.hsaco`, `kernel.ptx`, ...)
into the spec's out_dir. Errors become diagnostics with the user's line/column. The spec and the result are
child_messages.py's models (validated here on receipt and before writing); besides them only stdlib and triton
are imported, so the child starts fast.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import sys
import traceback
from pathlib import Path
from typing import Any

MODULE_NAME = "evokernel_user_kernels"


def _diag(message: str, line: int | None = None, column: int | None = None, severity: str = "error") -> dict:
    return {"line": line, "column": column, "severity": severity, "message": message.strip()[:4000]}


def _user_frame_line(exc: BaseException, module_path: str) -> int | None:
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == module_path:
            line = frame.lineno
    return line


def _import_module(module_path: str):
    spec = importlib.util.spec_from_file_location(MODULE_NAME, module_path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[MODULE_NAME] = mod
    spec.loader.exec_module(mod)
    return mod


def _jit_functions(mod) -> dict[str, Any]:
    from triton.runtime.jit import JITFunction

    return {name: obj for name, obj in vars(mod).items() if isinstance(obj, JITFunction)}


def _innermost_compilation_error(exc: BaseException):
    from triton.compiler.errors import CompilationError

    found, seen, cur = None, set(), exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, CompilationError):
            found = cur
        cur = cur.__cause__ or cur.__context__
    return found


def _compilation_diag(err, jit_fns: dict[str, Any]) -> dict:
    """Map a triton CompilationError (line relative to the function's `def`) to the user's file."""
    node = err.node
    msg = err.error_message or (str(err.__cause__) if err.__cause__ else "") or type(err).__name__
    for fn in jit_fns.values():
        if getattr(fn, "src", None) == err.src and hasattr(node, "lineno"):
            line = fn.def_file_line_number + node.lineno - 1
            col = node.col_offset + getattr(fn, "def_file_col_number", 1)
            return _diag(msg, line, col)
    return _diag(str(err))


def _constexpr_value(v: Any) -> Any:
    if isinstance(v, str) and v.startswith("tl."):
        import triton.language as tl

        return getattr(tl, v[3:])
    return v


def _attrs(target, specialization: dict[str, str], arg_names: list[str]) -> dict:
    """tt.divisibility=16 on the arguments the launch would mark (the JIT's 'D'), in the backend's own form."""
    try:
        from triton.compiler.compiler import make_backend

        divisible = make_backend(target).parse_attr("D")
    except Exception:  # noqa: BLE001 - older Triton: the attribute as 3.x spells it
        divisible = [["tt.divisibility", 16]]
    return {(arg_names.index(a),): divisible for a, s in specialization.items() if s == "divisible_by_16"}


def _build_source(fn, signature: dict[str, str], constexprs: dict[str, Any],
                  specialization: dict[str, str] | None = None, target=None):
    from triton.compiler import ASTSource

    missing = [a for a in fn.arg_names if a not in signature and a not in constexprs]
    unknown = [a for a in list(signature) + list(constexprs) if a not in fn.arg_names]
    if missing or unknown:
        raise ValueError(f"signature/constexprs do not match {fn.__name__}({', '.join(fn.arg_names)}): "
                         f"missing {missing}, unknown {unknown}. Give each runtime argument a type "
                         "('*fp32', '*bf16', 'i32', 'fp32', ...) in signature and each tl.constexpr a value "
                         "in constexprs.")
    specialization = specialization or {}
    consts = {a: _constexpr_value(v) for a, v in constexprs.items()}
    consts.update({a: 1 for a, s in specialization.items() if s == "equal_to_1"})  # as the JIT: an int equal to 1
    sig = {a: ("constexpr" if a in consts else signature[a]) for a in fn.arg_names}
    attrs = _attrs(target, specialization, list(fn.arg_names)) if target is not None else {}
    return ASTSource(fn, sig, constexprs=consts, attrs=attrs)


def _metadata(kernel) -> dict[str, Any]:
    md = kernel.metadata._asdict()
    keep = ("name", "shared", "num_warps", "num_stages", "waves_per_eu", "warp_size", "triton_version",
            "global_scratch_size", "matrix_instr_nonkdim", "kpack", "arch", "num_ctas", "maxnreg")
    out = {k: md[k] for k in keep if k in md and isinstance(md[k], (int, str, float, bool, type(None)))}
    tgt = md.get("target")
    out["target"] = {"backend": tgt.backend, "arch": tgt.arch, "warp_size": tgt.warp_size} if tgt else None
    return out


def _versions(backend: str) -> dict[str, str]:
    import triton

    out = {"triton": triton.__version__}
    try:
        if backend == "hip":
            from triton.backends.amd.compiler import get_amd_codegen_revision

            out["amd_llvm"] = get_amd_codegen_revision()
        else:
            from triton.backends.nvidia.compiler import get_ptxas

            ptxas = get_ptxas(90)
            out["ptxas"] = str(ptxas.version)
            out["ptxas_path"] = str(ptxas.path)
    except Exception as e:  # noqa: BLE001 - a version string must not fail the compile
        out["version_error"] = repr(e)
    return out


def _write_stages(kernel, out_dir: Path) -> dict[str, str]:
    files = {}
    for ext, data in kernel.asm.items():
        name = f"kernel.{ext}"
        if isinstance(data, bytes):
            (out_dir / name).write_bytes(data)
        else:
            (out_dir / name).write_text(data, encoding="utf-8")
        files[ext] = name
    return files


def compile_spec(spec: dict[str, Any]) -> dict[str, Any]:
    out_dir = Path(spec["out_dir"])
    module_path = spec["module_path"]
    result: dict[str, Any] = {"ok": False, "diagnostics": [], "files": {}, "metadata": {}, "log": ""}
    try:
        mod = _import_module(module_path)
    except SyntaxError as e:
        result["diagnostics"].append(_diag(f"SyntaxError: {e.msg}", e.lineno, e.offset))
        return result
    except Exception as e:  # noqa: BLE001 - user module errors become diagnostics
        result["diagnostics"].append(_diag(f"{type(e).__name__} while importing the module: {e}",
                                           _user_frame_line(e, module_path)))
        return result
    jit_fns = _jit_functions(mod)
    fn = jit_fns.get(spec["kernel"])
    if fn is None:
        names = ", ".join(jit_fns) or "none"
        result["diagnostics"].append(_diag(f"no @triton.jit function named {spec['kernel']!r}; found: {names}"))
        return result
    import triton
    import triton.runtime.cache as triton_cache
    from triton import knobs
    from triton.backends.compiler import GPUTarget

    # Triton's own cache lives in this one-shot workdir (TRITON_CACHE_DIR), so its key need not fingerprint
    # libtriton.so (hashing it costs ~5 s per process); our cache keys on the triton version instead.
    triton_cache.triton_key = lambda: f"{triton.__version__}-evokernel-private-cache"

    t = spec["target"]
    target = GPUTarget(t["backend"], t["arch"], t["warp_size"])
    result["versions"] = _versions(t["backend"])
    log = io.StringIO()
    try:
        src = _build_source(fn, spec.get("signature") or {}, spec.get("constexprs") or {},
                            spec.get("specialization") or {}, target)
        knobs.nvidia.dump_ptxas_log = t["backend"] == "cuda"
        with contextlib.redirect_stdout(log):
            kernel = triton.compile(src, target=target, options=spec.get("options") or {})
    except Exception as e:  # noqa: BLE001 - compile errors become diagnostics
        ce = _innermost_compilation_error(e)
        if ce is not None:
            result["diagnostics"].append(_compilation_diag(ce, jit_fns))
        else:
            result["diagnostics"].append(_diag(f"{type(e).__name__}: {e}", _user_frame_line(e, module_path)))
        result["log"] = log.getvalue()[-20000:]
        return result
    result["log"] = log.getvalue()[-20000:]
    result["files"] = _write_stages(kernel, out_dir)
    result["metadata"] = _metadata(kernel)
    result["ok"] = True
    return result


def main(argv: list[str]) -> int:
    from evokernel_mcp.compile.child_messages import ChildResult, CompileSpec

    spec = CompileSpec.model_validate_json(Path(argv[1]).read_text(encoding="utf-8"))
    result = ChildResult.model_validate(json.loads(json.dumps(compile_spec(spec.model_dump()), default=str)))
    Path(spec.out_dir, "result.json").write_text(result.model_dump_json(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
