"""Tasks: a folder tasks/<name>/ with task.md (the problem, for the agent), task.yaml (machine-readable)
and the reference as a KernelBench-form file (class Model, get_inputs, get_init_inputs). A bare
KernelBench problem file (.py) also loads as a task, unchanged, with one shape set "default".

task.yaml:
    name: rmsnorm
    summary: one line
    reference: reference.py            # KernelBench-form file in the folder
    init_inputs: []                    # positional args of Model(...)
    inputs:                            # in forward() order; shapes use the shape-set symbols
      - {name: x, shape: [B, N], dtype: bfloat16, dist: normal, mean: 0, std: 1}
      - {name: w, shape: [N], dtype: bfloat16, dist: uniform, low: 0.5, high: 1.5}
    shape_sets: {small: {B: 4, N: 256}, full: {B: 4096, N: 8192}}   # ordered small -> full
    flops: "4*B*N"                     # expressions in the symbols (+ - * / // ** min max)
    bytes: "2*(2*B*N + N)"             # minimum DRAM traffic: read inputs once, write outputs once
    tolerance: {bfloat16: {atol: 0.02, rtol: 0.016}}   # optional, per output dtype

Loading here never imports torch and never runs task code: the sandboxed children do (candidate.py).
"""

from __future__ import annotations

import ast
import operator
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, ValidationError

from evokernel_mcp.errors import BadInput, NotFound
from evokernel_mcp.models import Model, Provenance
from evokernel_mcp.paths import tasks_dir

DTYPE_ALIASES = {
    "fp32": "float32", "float": "float32", "f32": "float32", "tf32": "float32", "bf16": "bfloat16",
    "fp16": "float16", "half": "float16", "f16": "float16", "fp64": "float64", "fp8": "float8_e4m3fn",
    "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2", "i32": "int32", "i64": "int64",
}
DTYPES = ("float64", "float32", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2", "int32", "int64", "bool")


def canonical_dtype(name: str) -> str:
    d = DTYPE_ALIASES.get(name.lower(), name.lower())
    if d not in DTYPES:
        raise BadInput(f"unknown dtype {name!r}; use one of {', '.join(DTYPES)}")
    return d


class Tolerance(Model):
    atol: float = Field(ge=0, description="Absolute tolerance: |out-ref| <= atol + rtol*|ref| passes.")
    rtol: float = Field(ge=0, description="Relative tolerance.")


class InputSpec(Model):
    name: str
    shape: list[int | str] = Field(description="Dims: ints or shape-set symbols / expressions ('H-2').")
    dtype: str
    dist: Literal["normal", "uniform", "randint"] = "normal"
    mean: float = 0.0
    std: float | str = Field(default=1.0, description="A number or an expression in the symbols ('K**-0.5').")
    low: float | None = None
    high: float | None = None


class ShapeSet(Model):
    name: str
    dims: dict[str, int] = Field(default_factory=dict)
    input_shapes: dict[str, list[int]] = Field(default_factory=dict)
    flops: float | None = Field(default=None, description="Useful floating-point operations (2 per MAC).")
    bytes: float | None = Field(default=None, description="Minimum DRAM bytes moved (inputs read once, outputs written once).")
    arithmetic_intensity: float | None = Field(default=None, description="flops / bytes.")


class Task(Model):
    """A loaded task: what get_task returns, and what the runner receives."""

    name: str
    summary: str = ""
    kind: Literal["task", "kernelbench"] = Field(description="'task' = task.yaml folder; 'kernelbench' = a bare problem file.")
    path: str
    task_md: str = ""
    reference_source: str = Field(description="KernelBench-form Python: class Model, get_inputs(), get_init_inputs().")
    init_inputs: list[Any] = Field(default_factory=list)
    inputs: list[InputSpec] = Field(default_factory=list, description="Empty for a KernelBench file (get_inputs decides).")
    shape_sets: list[ShapeSet]
    flops_expr: str | None = None
    bytes_expr: str | None = None
    compute_unit: Literal["matrix", "vector"] | None = Field(
        default=None, description="Which FLOP peak bounds this task's roofline (task.yaml `compute_unit`).")
    tolerance: dict[str, Tolerance] = Field(default_factory=dict, description="Per output dtype overrides.")
    overrides_applied: dict[str, Any] = Field(default_factory=dict, description="Module-level constants of the "
                                              "reference set by `overrides` (the source was rewritten).")
    provenance: list[Provenance] = Field(default_factory=list)

    def shape_set(self, name: str) -> ShapeSet:
        for s in self.shape_sets:
            if s.name == name:
                return s
        raise BadInput(f"task {self.name!r} has no shape set {name!r}; it has: {', '.join(self.shape_names())}")

    def shape_names(self) -> list[str]:
        return [s.name for s in self.shape_sets]

    def flops(self, shape_set: str) -> float | None:
        return self.shape_set(shape_set).flops

    def bytes(self, shape_set: str) -> float | None:
        return self.shape_set(shape_set).bytes


class TaskSummary(Model):
    name: str
    summary: str
    dtypes: list[str]
    shape_sets: list[str]
    full_flops: float | None = None
    full_bytes: float | None = None


class TaskList(Model):
    tasks: list[TaskSummary]
    tasks_dir: str
    provenance: list[Provenance] = Field(default_factory=list)


# ---- expressions ------------------------------------------------------------------------------
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow, ast.Mod: operator.mod}
_FUNCS = {"min": min, "max": max}


def eval_expr(expr: str | int | float, dims: dict[str, int]) -> float:
    """Evaluate a shape/FLOP expression over the shape-set symbols (no Python eval)."""
    if isinstance(expr, (int, float)):
        return expr

    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in dims:
                raise BadInput(f"unknown symbol {node.id!r} in {expr!r}; defined: {', '.join(dims)}")
            return dims[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS:
            return _FUNCS[node.func.id](*(ev(a) for a in node.args))
        raise BadInput(f"unsupported expression {expr!r} (use numbers, symbols, + - * / // ** % min max)")

    try:
        return ev(ast.parse(str(expr), mode="eval"))
    except SyntaxError as e:
        raise BadInput(f"bad expression {expr!r}: {e.msg}") from None


# ---- loading ----------------------------------------------------------------------------------
def _shape_sets(raw: dict, inputs: list[InputSpec], flops: str | None, nbytes: str | None) -> list[ShapeSet]:
    out = []
    for name, dims in (raw or {}).items():
        dims = {k: int(v) for k, v in (dims or {}).items()}
        shapes = {i.name: [int(eval_expr(d, dims)) for d in i.shape] for i in inputs}
        f = float(eval_expr(flops, dims)) if flops else None
        b = float(eval_expr(nbytes, dims)) if nbytes else None
        out.append(ShapeSet(name=name, dims=dims, input_shapes=shapes, flops=f, bytes=b,
                            arithmetic_intensity=(f / b) if f and b else None))
    if not out:
        raise BadInput("task.yaml has no shape_sets")
    return out


def load_task_dir(d: Path) -> Task:
    yml = d / "task.yaml"
    try:
        raw = yaml.safe_load(yml.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise BadInput(f"cannot read {yml}: {e}") from None
    try:
        inputs = [InputSpec(**{**i, "dtype": canonical_dtype(i["dtype"])}) for i in raw.get("inputs", [])]
        ref_path = _inside(d, raw.get("reference", "reference.py"), "reference")
        md = d / "task.md"
        task = Task(
            name=raw.get("name", d.name), summary=raw.get("summary", ""), kind="task", path=str(d),
            task_md=md.read_text() if md.is_file() else "", reference_source=ref_path.read_text(),
            init_inputs=raw.get("init_inputs", []), inputs=inputs,
            shape_sets=_shape_sets(raw.get("shape_sets"), inputs, raw.get("flops"), raw.get("bytes")),
            flops_expr=raw.get("flops"), bytes_expr=raw.get("bytes"), compute_unit=raw.get("compute_unit"),
            tolerance={canonical_dtype(k): Tolerance(**v) for k, v in (raw.get("tolerance") or {}).items()},
            provenance=[Provenance(field="shape_sets[].flops", source=str(yml), detail=raw.get("flops")),
                        Provenance(field="shape_sets[].bytes", source=str(yml), detail=raw.get("bytes"))])
    except (KeyError, TypeError, ValidationError, OSError) as e:
        raise BadInput(f"malformed task {d}: {e}") from None
    return task


def _inside(folder: Path, name: str, what: str) -> Path:
    """A file a task.yaml names: it must lie inside the task's own folder (no absolute paths, no ..)."""
    base = folder.resolve()
    p = (base / str(name)).resolve()
    if not p.is_relative_to(base):
        raise BadInput(f"task.yaml's {what} {name!r} points outside the task folder; name a file inside it")
    return p


def task_roots() -> list[Path]:
    """Folders a task may be loaded from by path: the shipped tasks, plus the task_roots setting (`serve
    --task-root DIR`, EVOKERNEL_TASK_ROOTS, os.pathsep-separated), e.g. a KernelBench checkout. Anything else is
    refused (no file disclosure)."""
    from evokernel_mcp import settings

    roots = [tasks_dir(), *settings.get().task_roots]
    return [r.expanduser().resolve() for r in roots]


def _check_root(p: Path) -> None:
    rp = p.resolve()
    if not any(rp.is_relative_to(r) for r in task_roots()):
        raise BadInput(f"{str(p)!r} is outside the task folders this server serves "
                       f"({', '.join(str(r) for r in task_roots())}); pass a shipped task name, or the problem's "
                       "source as `reference`, or start the server with --task-root DIR (EVOKERNEL_TASK_ROOTS)")


def load_kernelbench_file(p: Path, source: str | None = None) -> Task:
    """A KernelBench problem (class Model, get_inputs, optional get_init_inputs) as a task, unchanged."""
    src = source if source is not None else p.read_text()
    check_reference_source(src)
    return Task(name=p.stem, summary="KernelBench-style problem file", kind="kernelbench", path=str(p),
                reference_source=src, shape_sets=[ShapeSet(name="default")])


def _top_level_names(src: str, what: str) -> set[str]:
    """Names a module source defines at top level (classes, functions, assignments); syntax only, nothing runs."""
    try:
        tree = ast.parse(src)
    except SyntaxError as e:
        raise BadInput(f"{what} does not parse: line {e.lineno}: {e.msg}") from None
    names = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))}
    names |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    return names


MAX_SOURCE_CHARS = 1_000_000


def _check_size(src: str, what: str) -> None:
    if len(src) > MAX_SOURCE_CHARS:
        raise BadInput(f"{what} is {len(src)} characters; the limit is {MAX_SOURCE_CHARS}")


def check_reference_source(src: str) -> None:
    """Refuse a reference that is not KernelBench-form (syntax only; nothing is run here)."""
    _check_size(src, "reference source")
    missing = {"Model", "get_inputs"} - _top_level_names(src, "reference source")
    if missing:
        raise BadInput(f"reference must define class Model(nn.Module) and get_inputs() (KernelBench form); "
                       f"missing: {', '.join(sorted(missing))}")


def check_candidate_source(src: str) -> None:
    """Refuse a candidate that defines neither run(*inputs) nor class ModelNew (syntax only)."""
    _check_size(src, "candidate source")
    if not _top_level_names(src, "candidate") & {"run", "ModelNew"}:
        raise BadInput("candidate must define run(*inputs) (same inputs as the reference's forward) or "
                       "class ModelNew(nn.Module)")


def load_task(name_or_path: str) -> Task:
    """A shipped task by name, a task folder, or a KernelBench .py file."""
    p = Path(name_or_path).expanduser()
    if "/" not in name_or_path and not name_or_path.endswith(".py"):
        d = tasks_dir() / name_or_path
        if (d / "task.yaml").is_file():
            return load_task_dir(d)
        raise NotFound(f"no task {name_or_path!r}; call list_tasks for the shipped ones "
                       f"({', '.join(task_names())}) or pass a task folder / KernelBench .py path")
    _check_root(p)
    if p.is_dir() and (p / "task.yaml").is_file():
        return load_task_dir(p)
    if p.is_file() and p.suffix == ".py":
        return load_kernelbench_file(p)
    raise NotFound(f"{name_or_path!r} is neither a task folder with task.yaml nor a KernelBench .py file")


def with_overrides(task: Task, overrides: dict[str, Any] | None) -> Task:
    """The task with the KernelBench reference's module-level constants set (overrides.apply_overrides: an
    AST rewrite of the source, nothing runs), before get_inputs/get_init_inputs ever run. The rewritten
    source is the reference the children load, so the reference cache key follows it. BadInput for a
    shipped task (its sizes are shape sets) and for a name or value the reference cannot take."""
    if not overrides:
        return task
    if task.kind != "kernelbench":
        raise BadInput(f"overrides set module-level constants of a KernelBench reference; task {task.name!r} is a "
                       f"shipped task whose sizes are its shape sets ({', '.join(task.shape_names())}): pass shapes")
    from evokernel_mcp.overrides import apply_overrides

    source, applied = apply_overrides(task.reference_source, dict(overrides))
    return task.model_copy(update={"reference_source": source,
                                   "overrides_applied": {**task.overrides_applied, **applied}})


def task_from_reference(source: str) -> Task:
    return load_kernelbench_file(Path("reference.py"), source)


def task_names() -> list[str]:
    d = tasks_dir()
    return sorted(p.name for p in d.iterdir() if (p / "task.yaml").is_file()) if d.is_dir() else []


def list_tasks() -> TaskList:
    """List the shipped tasks (name, summary, dtypes, shape sets, FLOPs at full size). Call get_task next."""
    out = []
    for name in task_names():
        t = load_task_dir(tasks_dir() / name)
        full = t.shape_sets[-1]
        out.append(TaskSummary(name=t.name, summary=t.summary, dtypes=sorted({i.dtype for i in t.inputs}),
                               shape_sets=t.shape_names(), full_flops=full.flops, full_bytes=full.bytes))
    return TaskList(tasks=out, tasks_dir=str(tasks_dir()),
                    provenance=[Provenance(field="tasks[].full_flops", source="task.yaml flops expressions")])


def get_task(
    task: Annotated[str, Field(description="Task name from list_tasks, a task folder, or a KernelBench .py file path.")],
) -> Task:
    """Read one task: the problem text (task_md), the PyTorch reference source, input specs, shape sets
    (small -> full) with FLOP and byte counts, and tolerances. Call before writing a candidate."""
    return load_task(task)
