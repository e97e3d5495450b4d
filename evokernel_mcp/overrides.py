"""Size overrides for a KernelBench reference without editing the file: module-level constants
(`batch_size = 16`, `dim = 393216`, `input_shape = (32768,)`) rewritten in the source via `ast`.

Pure source transforms, no I/O, nothing executed. An overridable constant is a module-level
`NAME = <literal>` (or `NAME: T = <literal>`) bound exactly once at module level and never declared
`global`, whose value is an int/float/bool/str/None, a tuple/list of those, or simple arithmetic of
numeric literals (`2048 * 2`). Dependent assignments (`groups = in_channels`) are not overridable;
they follow the constant they name. Only the value's characters are replaced; everything else in
the source (comments, spacing) stays byte-identical.
"""

from __future__ import annotations

import ast
import difflib
import math
import operator
import re
from typing import Any

from evokernel_mcp.errors import BadInput

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
           ast.Div: operator.truediv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_MAX_REPR = 1000
_MAX_ITEMS = 1000
_NOT_SIZES = re.compile(r"kernel|stride|pad|dilation|group|axis", re.IGNORECASE)
_BATCH = re.compile(r"batch|^b$", re.IGNORECASE)
_CHANNELS = re.compile(r"channel|feature|head", re.IGNORECASE)
SCALE_MIN = 17  # ints below this (axes, kernel sizes, small channel counts) are never scaled


class OverrideError(BadInput):
    """An override the reference cannot take: unknown name, unsafe or incompatible value."""


class _NotLiteral(Exception):
    pass


def _eval(node: ast.AST) -> Any:
    """Value of a literal or of simple arithmetic of numeric literals; _NotLiteral otherwise."""
    if isinstance(node, ast.Constant) and (node.value is None or type(node.value) in (int, float, bool, str)):
        return node.value
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [_eval(e) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _eval(node.operand)
        if type(v) in (int, float):
            return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        a, b = _eval(node.left), _eval(node.right)
        if type(a) in (int, float) and type(b) in (int, float):
            if isinstance(node.op, ast.Pow) and (abs(b) > 64 or abs(a) > 2**16):
                raise _NotLiteral
            try:
                v = _BINOPS[type(node.op)](a, b)
            except (ZeroDivisionError, OverflowError) as e:
                raise _NotLiteral from e
            if type(v) in (int, float) and (type(v) is float or abs(v) < 2**63):
                return v
    raise _NotLiteral


def _rebound_names(tree: ast.Module) -> set[str]:
    """Names bound more than once at module level, or declared global/nonlocal anywhere."""
    counts: dict[str, int] = {}
    for stmt in tree.body:
        targets: list[ast.AST] = []
        if isinstance(stmt, ast.Assign):
            targets = stmt.targets
        elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
            targets = [stmt.target]
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            targets = [stmt.target]
        names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(stmt.name)
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            names += [(a.asname or a.name).split(".")[0] for a in stmt.names]
        for n in names:
            counts[n] = counts.get(n, 0) + 1
    declared = {n for node in ast.walk(tree) if isinstance(node, (ast.Global, ast.Nonlocal)) for n in node.names}
    return {n for n, c in counts.items() if c > 1} | declared


def _parse(source: str) -> ast.Module:
    try:
        return ast.parse(source)
    except SyntaxError as e:
        raise OverrideError(f"the reference does not parse (line {e.lineno}: {e.msg}); overrides need valid "
                            f"Python source") from e


def _constant_nodes(tree: ast.Module) -> dict[str, tuple[ast.AST, Any]]:
    rebound = _rebound_names(tree)
    found: dict[str, tuple[ast.AST, Any]] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            name, value = stmt.targets[0].id, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            name, value = stmt.target.id, stmt.value
        else:
            continue
        if name in rebound:
            continue
        try:
            found[name] = (value, _eval(value))
        except _NotLiteral:
            continue
    return found


def overridable_constants(source: str) -> dict[str, Any]:
    """Module-level constants of a KernelBench source that `apply_overrides` can set, with their values."""
    return {name: v for name, (_, v) in _constant_nodes(_parse(source)).items()}


def _check_safe(value: Any, name: str, depth: int = 0) -> int:
    """Raise unless value is int/float/bool/str or (nested) tuples/lists of those; returns item count."""
    t = type(value)
    if t in (int, bool, str):
        return 1
    if t is float:
        if not math.isfinite(value):
            raise OverrideError(f"override {name}={value!r}: only finite numbers")
        return 1
    if t in (list, tuple) and depth < 4:
        return 1 + sum(_check_safe(v, name, depth + 1) for v in value)
    raise OverrideError(f"override {name}: {t.__name__} values are not allowed; use int, float, bool, str, "
                        f"or lists/tuples of those")


def _positive_ints(v: Any) -> bool:
    return type(v) is int and v > 0


def _coerce(name: str, old: Any, new: Any) -> Any:
    """The new value in the original's type, or OverrideError when it does not fit the constant."""
    if old is None:
        return new
    if type(old) is bool or type(old) is str:
        if type(new) is not type(old):
            raise OverrideError(f"override {name}: expected {type(old).__name__} like {old!r}, got {new!r}")
        return new
    if type(old) is int:
        if type(new) is not int:
            raise OverrideError(f"override {name}: expected an int like {old!r}, got {new!r}")
        if old > 0 and new <= 0:
            raise OverrideError(f"override {name}={new}: a size must stay positive (was {old})")
        return new
    if type(old) is float:
        if type(new) not in (int, float):
            raise OverrideError(f"override {name}: expected a number like {old!r}, got {new!r}")
        return new
    if type(new) not in (list, tuple):
        raise OverrideError(f"override {name}: expected a {type(old).__name__} like {old!r}, got {new!r}")
    if old and all(_positive_ints(v) for v in old) and not all(_positive_ints(v) for v in new):
        raise OverrideError(f"override {name}={new!r}: sizes must stay positive ints (was {old!r})")
    return type(old)(new)


def _unknown(name: str, known: dict[str, Any]) -> OverrideError:
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    listing = ", ".join(f"{k}={v!r}" for k, v in known.items()) or "none"
    return OverrideError(f"override {name!r} is not a module-level constant of the reference{hint} "
                         f"Overridable: {listing}")


def _byte_offsets(source_bytes: bytes) -> list[int]:
    starts = [0]
    for i, b in enumerate(source_bytes):
        if b == 0x0A:
            starts.append(i + 1)
    return starts


def _render(name: str, value: Any) -> str:
    text = repr(value)
    if len(text) > _MAX_REPR:
        raise OverrideError(f"override {name}: value too long ({len(text)} characters, at most {_MAX_REPR})")
    if ast.literal_eval(text) != value:
        raise OverrideError(f"override {name}={value!r} does not round-trip as a Python literal")
    return text


def apply_overrides(source: str, overrides: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Rewrite the named module-level constants; returns (new_source, applied {name: new value}).

    Raises OverrideError for an unknown name (listing the overridable ones, with did-you-mean), a value
    of another type than int/float/bool/str/lists/tuples of those, a non-finite float, a size that
    was a positive int and would become <= 0, or a value that does not fit the original's type.
    """
    tree = _parse(source)
    nodes = _constant_nodes(tree)
    known = {n: v for n, (_, v) in nodes.items()}
    edits: list[tuple[int, int, int, int, str]] = []
    applied: dict[str, Any] = {}
    for name, new in overrides.items():
        if name not in nodes:
            raise _unknown(str(name), known)
        if _check_safe(new, name) > _MAX_ITEMS:
            raise OverrideError(f"override {name}: more than {_MAX_ITEMS} items")
        node, old = nodes[name]
        value = _coerce(name, old, new)
        edits.append((node.lineno, node.col_offset, node.end_lineno, node.end_col_offset, _render(name, value)))
        applied[name] = value
    data = source.encode("utf-8")
    starts = _byte_offsets(data)
    for line, col, end_line, end_col, text in sorted(edits, reverse=True):
        a, b = starts[line - 1] + col, starts[end_line - 1] + end_col
        data = data[:a] + text.encode("utf-8") + data[b:]
    new_source = data.decode("utf-8")
    check = overridable_constants(new_source)
    bad = [n for n, v in applied.items() if check.get(n) != v or type(check.get(n)) is not type(v)]
    if bad:
        raise OverrideError(f"internal: rewriting {bad} did not give the requested values; report this")
    return new_source, applied


def _lcm_of_groups(consts: dict[str, Any]) -> int:
    g = 1
    for name, v in consts.items():
        if "group" in name.lower() and _positive_ints(v):
            g = math.lcm(g, v)
    return g


def _spatial_floor(consts: dict[str, Any]) -> int:
    """Smallest spatial size that keeps every (dilated) kernel of the problem valid, at least 16."""
    def ints(v: Any) -> list[int]:
        return [x for x in (v if isinstance(v, (list, tuple)) else [v]) if _positive_ints(x)]

    kernel = max([x for n, v in consts.items() if "kernel" in n.lower() for x in ints(v)], default=1)
    dil = max([x for n, v in consts.items() if "dilation" in n.lower() for x in ints(v)], default=1)
    return max(16, (kernel - 1) * dil + 1 + 2)


def _size_groups(consts: dict[str, Any]) -> tuple[dict[int, dict], list[tuple[str, Any]]]:
    """Scalable sizes grouped by original value (equal sizes shrink together, so a square input stays
    square and sizes a problem broadcasts against each other stay equal), and the slots (name,
    position or None) of every size. A group: {"value", "floor", "multiple", "members"}."""
    groups_lcm, spatial = _lcm_of_groups(consts), _spatial_floor(consts)
    groups: dict[int, dict] = {}
    slots: list[tuple[str, Any]] = []
    for name, v in consts.items():
        if _NOT_SIZES.search(name):
            continue
        values = [(None, v)] if _positive_ints(v) else \
            list(enumerate(v)) if isinstance(v, tuple) and v and all(_positive_ints(x) for x in v) else []
        batch = bool(_BATCH.search(name))
        floor, multiple = (2, 1) if batch else (max(4, groups_lcm), groups_lcm) if _CHANNELS.search(name) \
            else (spatial, 1)
        for pos, x in values:
            slots.append((name, pos))
            if (x >= SCALE_MIN or batch) and x > floor:
                g = groups.setdefault(x, {"value": x, "floor": 1, "multiple": 1, "members": []})
                g["floor"] = max(g["floor"], floor)
                g["multiple"] = math.lcm(g["multiple"], multiple)
                g["members"].append((name, pos))
    return groups, slots


def _with_groups(consts: dict[str, Any], groups: dict[int, dict]) -> dict[str, Any]:
    out = {n: (list(v) if isinstance(v, tuple) else v) for n, v in consts.items()}
    for g in groups.values():
        for name, pos in g["members"]:
            if pos is None:
                out[name] = g["value"]
            else:
                out[name][pos] = g["value"]
    return {n: (tuple(v) if isinstance(consts[n], tuple) else v) for n, v in out.items()}


def _eval_env(node: ast.AST, env: dict[str, Any]) -> Any:
    """_eval plus names from env and starred tuples (for shapes in get_inputs)."""
    if isinstance(node, ast.Name) and node.id in env:
        return env[node.id]
    if isinstance(node, (ast.Tuple, ast.List)):
        items: list[Any] = []
        for e in node.elts:
            items += list(_eval_env(e.value, env)) if isinstance(e, ast.Starred) else [_eval_env(e, env)]
        return tuple(items)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        a, b = _eval_env(node.left, env), _eval_env(node.right, env)
        if type(a) in (int, float) and type(b) in (int, float):
            return _BINOPS[type(node.op)](a, b)
        raise _NotLiteral
    return _eval(node)


_FACTORIES = {"rand", "randn", "zeros", "ones", "empty", "full", "randint"}


def _call_numel(call: ast.Call, env: dict[str, Any]) -> int | None:
    name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)
    if name not in _FACTORIES:
        return None
    size = next((k.value for k in call.keywords if k.arg == "size"), None)
    try:
        if name == "randint":
            dims = _eval_env(size or call.args[min(2, len(call.args) - 1)], env)
        elif name == "full":
            dims = _eval_env(size or call.args[0], env)
        else:
            dims = _eval_env(ast.Tuple(elts=list(call.args), ctx=ast.Load()), env) if size is None \
                else _eval_env(size, env)
            dims = dims[0] if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims
        dims = (dims,) if type(dims) is int else dims
        return math.prod(int(d) for d in dims) if all(type(d) is int for d in dims) else None
    except (_NotLiteral, IndexError, TypeError):
        return None


def _input_elems(tree: ast.Module, consts: dict[str, Any]) -> int | None:
    """Elements get_inputs allocates through torch factories, read from its AST (None: unknown)."""
    env: dict[str, Any] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            name = stmt.targets[0].id
            try:
                env[name] = consts[name] if name in consts else _eval_env(stmt.value, env)
            except _NotLiteral:
                pass
    fn = next((s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == "get_inputs"), None)
    sizes = [_call_numel(c, env) for c in ast.walk(fn) if isinstance(c, ast.Call)] if fn else []
    known = [n for n in sizes if n is not None]
    return sum(known) if known else None


def _shrink_once(groups: dict[int, dict]) -> bool:
    for g in sorted(groups.values(), key=lambda g: g["value"] / g["floor"], reverse=True):
        new = (g["value"] // 2) // g["multiple"] * g["multiple"]
        if g["floor"] <= new < g["value"]:
            g["value"] = new
            return True
    return False


def scaled_overrides(source: str, max_elems: int = 2**18) -> dict[str, Any]:
    """Propose overrides that shrink a KernelBench problem's sizes so a CPU can run it.

    Heuristic, from the source alone (nothing is executed). Sizes: int constants (and tuples of them)
    except names about kernels, strides, padding, dilation, groups and axes. Sizes >= SCALE_MIN (and
    batch sizes) are halved, the largest relative to its floor first, equal sizes together, while the
    elements get_inputs allocates (read from its torch.rand/randn/randint/... calls) exceed
    `max_elems`, or while the product of all sizes does (when get_inputs cannot be read). Floors: 2
    for batch sizes; a multiple of the groups (>= 4) for channels/features/heads; 16 and every
    dilated kernel's extent for other sizes. Returns {name: new value} for the constants that changed
    (feed it to apply_overrides).
    """
    tree = _parse(source)
    consts = overridable_constants(source)
    groups, slots = _size_groups(consts)

    def cost() -> int:
        current = _with_groups(consts, groups)
        elems = _input_elems(tree, current)
        if elems is not None:
            return elems
        return math.prod(current[n] if p is None else current[n][p] for n, p in slots)

    while cost() > max_elems and _shrink_once(groups):
        pass
    current = _with_groups(consts, groups)
    return {n: v for n, v in current.items() if v != consts[n]}
