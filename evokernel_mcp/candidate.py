"""Loading references and candidates, and making inputs. Runs INSIDE a sandboxed child
(runtime/child.py), or in the profiler's small runner script (profile/runner.py): it imports user code.
Never imported by the server at tool-call time.

- A reference is KernelBench-form source (class Model, get_inputs, optional get_init_inputs); a
  shipped task carries it as reference_source plus input specs per shape set (tasks.py).
- A candidate is source defining `run(*inputs)` or `class ModelNew(nn.Module)` (built with the
  reference's init inputs, same seed, and the reference's weights copied when the names match).
Sources are written to a file in the scratch dir and imported from there (Triton's @jit needs a file).
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from evokernel_mcp.tasks import Task, eval_expr


class CandidateError(Exception):
    """The candidate source cannot be loaded (syntax error, missing entry point, import failure)."""


class MissingModule(Exception):
    """The candidate imports a module this process's Python does not have (kind "missing_module", its name in the
    message). Not a CandidateError: the child reports an exception's own `kind`, and a CandidateError is
    always reported as "bad_candidate"."""

    kind = "missing_module"


def torch_dtype(name: str):
    import torch

    return getattr(torch, name)


def load_module(source: str, stem: str, directory: str | Path) -> ModuleType:
    """Write source to <directory>/<stem>_<hash>.py and import it as a fresh module."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:10]
    name = f"evk_{stem}_{digest}"
    path = Path(directory) / f"{name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return mod


def load_candidate_module(source: str, directory: str | Path) -> ModuleType:
    try:
        mod = load_module(source, "candidate", directory)
    except SyntaxError as e:
        raise CandidateError(f"candidate has a syntax error at line {e.lineno}: {e.msg}") from e
    except ImportError as e:  # ModuleNotFoundError included
        name = getattr(e, "name", None) or str(e)
        raise MissingModule(f"the candidate imports {name!r}, which the sandboxed Python does not have "
                            f"({type(e).__name__}: {e}); use torch, triton, numpy, einops or the standard "
                            "library") from e
    except Exception as e:  # noqa: BLE001 - import-time failure of user code
        raise CandidateError(f"importing the candidate failed: {type(e).__name__}: {e}") from e
    if not (callable(getattr(mod, "run", None)) or isinstance(getattr(mod, "ModelNew", None), type)):
        raise CandidateError("candidate must define run(*inputs) or class ModelNew(nn.Module)")
    return mod


def init_inputs(task: Task, ref_mod: ModuleType) -> list[Any]:
    if task.kind == "task":
        return list(task.init_inputs)
    fn = getattr(ref_mod, "get_init_inputs", None)
    return list(fn()) if fn is not None else []


def _spec_tensor(spec, shape: list[int], dims: dict[str, int], gen, dtype):
    import torch

    if spec.dist == "randint":
        lo, hi = int(spec.low if spec.low is not None else 0), int(spec.high if spec.high is not None else 100)
        return torch.randint(lo, hi, shape, generator=gen, dtype=dtype)
    # in place: the same numbers as `draw * scale + shift`, without two more full-size temporaries (drawing the
    # flagship's 225 MB input on the host took 0.8 s a draw on the H200's host, five draws per benchmark)
    if spec.dist == "uniform":
        lo = spec.low if spec.low is not None else -1.0
        hi = spec.high if spec.high is not None else 1.0
        t = torch.rand(shape, generator=gen, dtype=torch.float32).mul_(hi - lo).add_(lo)
    else:
        std = float(eval_expr(spec.std, dims))
        t = torch.randn(shape, generator=gen, dtype=torch.float32)
        if std != 1.0:
            t.mul_(std)
        if spec.mean:
            t.add_(spec.mean)
    return t.to(dtype)


def make_inputs(task: Task, shape_set: str, seed: int, device: str, ref_mod: ModuleType | None = None) -> list[Any]:
    """Fresh random inputs for one shape set and seed (never zeros), on `device`.

    Spec tasks: drawn on the CPU from a generator seeded with (seed, input index), so the inputs are
    the same on every device. KernelBench files: torch.manual_seed(seed), then the file's get_inputs()
    with `device` as torch's default device, so torch.rand & co. draw on the GPU (6 GB of inputs drawn
    on the host took 10-20 s on the H200's host; on the device, well under a second): the same inputs
    for a seed on every run of one device type. A get_inputs() that cannot run there runs on the host."""
    import torch

    if not is_spec_task(task):
        if ref_mod is None:
            raise ValueError("a KernelBench task needs its loaded reference module to make inputs")
        raw = None
        if device != "cpu":
            try:
                torch.manual_seed(seed)
                with torch.device(device):
                    raw = list(ref_mod.get_inputs())
            except Exception:  # noqa: BLE001 - host-only code in get_inputs: draw them as KernelBench does
                raw = None
        if raw is None:
            torch.manual_seed(seed)
            raw = list(ref_mod.get_inputs())
    else:
        raw = spec_draws(task, shape_set, seed)
    return [t.to(device) if isinstance(t, torch.Tensor) else t for t in raw]


def is_spec_task(task: Task) -> bool:
    """Inputs drawn by the harness from the task's input specs (not by a KernelBench get_inputs)."""
    return task.kind != "kernelbench" and bool(task.inputs)


def spec_draws(task: Task, shape_set: str, seed: int) -> list[Any]:
    """A spec task's inputs for (shape set, seed) on the host: a pure function of the task's input specs, the
    shape set and the seed (one generator per input, seeded with (seed, input index))."""
    import torch

    ss = task.shape_set(shape_set)
    raw = []
    for i, spec in enumerate(task.inputs):
        gen = torch.Generator().manual_seed(seed * 1009 + i)
        raw.append(_spec_tensor(spec, ss.input_shapes[spec.name], ss.dims, gen, torch_dtype(spec.dtype)))
    return raw


def build_reference(task: Task, ref_mod: ModuleType, seed: int, device: str):
    """Model(*init_inputs) as KernelBench runs it: in its default (training) mode, never put in .eval()
    here (a problem that wants eval mode calls it itself), so BatchNorm uses batch statistics."""
    import torch

    torch.manual_seed(seed)
    model = ref_mod.Model(*init_inputs(task, ref_mod))
    return model.to(device)


def build_candidate(cand_mod: ModuleType, task: Task, ref_mod: ModuleType, ref_model, seed: int,
                    device: str) -> Callable[..., Any]:
    """The candidate as a callable taking the reference's inputs."""
    import torch

    if callable(getattr(cand_mod, "run", None)):
        return cand_mod.run
    torch.manual_seed(seed)
    try:
        model = cand_mod.ModelNew(*init_inputs(task, ref_mod))
    except Exception as e:  # noqa: BLE001
        raise CandidateError(f"ModelNew(*init_inputs) failed: {type(e).__name__}: {e}") from e
    ref_state = ref_model.state_dict()
    if ref_state and set(ref_state) == set(model.state_dict()):
        model.load_state_dict(ref_state)
    return model.to(device)  # the mode the reference runs in (no .eval(), see build_reference)
