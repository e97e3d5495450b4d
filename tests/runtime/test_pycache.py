"""Children read the runner's bytecode where the installed packages ship none (runtime/pycache.py): on the lent
H200 host torch has no __pycache__, and every sandboxed child compiled it again (4.2-5.4 s, 8-9 s of CPU each).
The prefix must reach the child read-only: a candidate that could write there would run its code in every later
child."""

from __future__ import annotations

import json
import os
import py_compile
import subprocess
import sys
from pathlib import Path

import pytest

from evokernel_mcp.runtime import pycache, sandbox

CHECK = """
import json, os, sys
import pkgx
try:
    with open(os.path.join(sys.pycache_prefix or os.getcwd(), "planted.pyc"), "w") as f:
        f.write("x")
    wrote = True
except OSError:
    wrote = False
print(json.dumps({"prefix": sys.pycache_prefix, "value": pkgx.VALUE, "wrote": wrote}))
"""


def _package(tmp_path):
    lib = tmp_path / "lib"
    (lib / "pkgx").mkdir(parents=True)
    src = lib / "pkgx" / "__init__.py"
    src.write_text("VALUE = 1\n")
    return lib, src


def _run_child(tmp_path, level: str, lib, use_prefix: bool) -> dict:
    scratch = tmp_path / f"scratch-{level}-{use_prefix}"
    sandbox.prepare_scratch(scratch, level)
    extra = pycache.child_env(level) if use_prefix else {}
    env = sandbox.base_env({"HOME": str(scratch), "PYTHONPATH": f"{lib}{os.pathsep}{sandbox.python_path()}", **extra})
    binds = [str(lib), *(pycache.child_binds(level) if use_prefix else [])]
    spec = sandbox.Spec(argv=[sys.executable, "-c", CHECK], scratch=scratch, env=env, ro_binds=binds)
    p = subprocess.run(sandbox.argv_for(spec, level), env=env, cwd=scratch, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    return json.loads(p.stdout.decode().strip().splitlines()[-1])


@pytest.mark.parametrize("level", [lv for lv in sandbox.level_candidates() if lv.startswith("bwrap")] or
                         [pytest.param("bwrap", marks=pytest.mark.skip(reason="no bubblewrap here"))])
def test_a_sandboxed_child_reads_the_runners_bytecode_and_cannot_write_it(tmp_path, monkeypatch, level):
    lib, src = _package(tmp_path)
    monkeypatch.syspath_prepend(str(lib))
    assert pycache.has_bytecode("pkgx") is False
    monkeypatch.setattr(pycache, "wanted", lambda: True)
    with pycache.active(None):
        root = pycache.prepare(("pkgx",), env={"PYTHONPATH": str(lib)})
        assert root is not None and pycache.ACTIVE == root
        assert any("pkgx" in str(p) for p in Path(root).rglob("*.pyc"))
        # the source changes, same size and mtime: only a child that reads our bytecode still sees VALUE = 1
        st = src.stat()
        src.write_text("VALUE = 2\n")
        os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
        got = _run_child(tmp_path, level, lib, use_prefix=True)
        assert got == {"prefix": root, "value": 1, "wrote": False}, got
        assert not os.path.exists(os.path.join(root, "planted.pyc"))
        plain = _run_child(tmp_path, level, lib, use_prefix=False)  # the control: it compiles the source
        assert plain["value"] == 2 and plain["prefix"] is None


def test_only_where_torch_has_none_unless_told(monkeypatch, tmp_path):
    lib, src = _package(tmp_path)
    monkeypatch.syspath_prepend(str(lib))
    assert pycache.has_bytecode("pkgx") is False
    py_compile.compile(str(src), doraise=True)  # bytecode beside the source, as a normal install has
    assert pycache.has_bytecode("pkgx") is True
    assert pycache.has_bytecode("no_such_module_here") is None
    for torch_has, want in ((False, True), (True, False), (None, False)):
        monkeypatch.setattr(pycache, "has_bytecode", lambda m, v=torch_has: v)
        assert pycache.wanted() is want, torch_has
    with pycache.active(None):
        assert pycache.prepare(("pkgx",)) is None and pycache.ACTIVE is None


def test_a_child_with_our_own_uid_gets_no_prefix(monkeypatch):
    """At the process level without a uid switch the child could write the files: it compiles for itself."""
    with pycache.active("/some/prefix"):
        monkeypatch.setattr(sandbox, "scratch_owner", lambda level: None)
        assert pycache.child_env("process") == {} and pycache.child_binds("process") == []
        monkeypatch.setattr(sandbox, "scratch_owner", lambda level: sandbox.NOBODY)
        assert pycache.child_env("process") == {"PYTHONPYCACHEPREFIX": "/some/prefix"}
        assert pycache.child_binds("process") == []  # nothing is hidden at that level: nothing to bind
        assert pycache.child_env("bwrap") == {"PYTHONPYCACHEPREFIX": "/some/prefix"}
        assert pycache.child_binds("bwrap+uid") == ["/some/prefix"]
    assert pycache.child_env("bwrap") == {}


def test_the_runners_child_starts_with_the_prefix(tmp_path, monkeypatch):
    """What spares.py starts (child_proc.Child) gets it: the child's ready info names the prefix it read."""
    from evokernel_mcp.runtime.child_proc import Child

    monkeypatch.setattr(pycache, "wanted", lambda: True)
    with pycache.active(None):
        root = pycache.prepare(())  # nothing imported: the test is about the path, not the bytecode
        level = sandbox.level_candidates()[0]
        expected = root if pycache.child_env(level) else None
        kid = Child("cpu", level, warm=False)
        try:
            info = kid.wait_ready()
        finally:
            kid.discard()
    assert root is not None and info.get("pycache_prefix") == expected


def test_the_runners_import_run_also_takes_the_meta_tensor_path(tmp_path, monkeypatch):
    """A reference child's first op on meta tensors imports modules torch itself does not (torch._dynamo, sympy):
    their bytecode is written too. A stand-in torch whose meta add imports a module of its own shows it."""
    lib = tmp_path / "lib"
    (lib / "torch").mkdir(parents=True)
    (lib / "torch" / "__init__.py").write_text(
        "class _T:\n    def __add__(self, other):\n        import torch.on_meta_path  # noqa: F401\n        return self\n"
        "def empty(*shape, device=None):\n    assert device == 'meta'\n    return _T()\n")
    (lib / "torch" / "on_meta_path.py").write_text("X = 1\n")
    monkeypatch.setattr(pycache, "wanted", lambda: True)
    with pycache.active(None):
        root = pycache.prepare(("torch",), env={"PYTHONPATH": str(lib)})
        assert root is not None
        assert any(p.name.startswith("on_meta_path.") for p in Path(root).rglob("*.pyc"))


def test_wanted_where_torch_has_bytecode_but_the_meta_path_has_none(monkeypatch, tmp_path):
    """The server, importing torch where torch's directory is writable, leaves torch's bytecode behind but not
    that of what only a child's meta op imports (torch._dynamo, sympy)."""
    monkeypatch.setattr(pycache, "has_bytecode", lambda m: m != "sympy")
    assert pycache.wanted() is True
    monkeypatch.setattr(pycache, "has_bytecode", lambda m: m != "torch._dynamo")
    assert pycache.wanted() is True
    monkeypatch.setattr(pycache, "has_bytecode", lambda m: True)
    assert pycache.wanted() is False


def test_a_dotted_module_is_looked_up_under_its_package_without_importing_it(tmp_path, monkeypatch):
    lib = tmp_path / "lib"
    (lib / "pkgy" / "sub").mkdir(parents=True)
    (lib / "pkgy" / "__init__.py").write_text("raise RuntimeError('imported')\n")
    (lib / "pkgy" / "sub" / "__init__.py").write_text("")
    (lib / "pkgy" / "mod.py").write_text("")
    monkeypatch.syspath_prepend(str(lib))
    assert pycache.has_bytecode("pkgy.sub") is False and pycache.has_bytecode("pkgy.mod") is False
    py_compile.compile(str(lib / "pkgy" / "mod.py"), doraise=True)
    assert pycache.has_bytecode("pkgy.mod") is True and pycache.has_bytecode("pkgy.none") is None
