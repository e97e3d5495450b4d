"""Triton's compile cache per candidate source (runtime/kernel_cache.py): a source's later jobs get what its
earlier ones compiled; no other source ever does; agent-written files are copied defensively."""

from __future__ import annotations

import json
import os

import pytest

from evokernel_mcp.runtime import kernel_cache


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("EVOKERNEL_HOME", str(tmp_path / "home"))


def _scratch(tmp_path, name: str):
    s = tmp_path / name
    (s / ".triton" / "driverhash").mkdir(parents=True)
    (s / ".triton" / "driverhash" / "cuda_utils.so").write_bytes(b"made before the source loaded")
    return s


def test_a_source_gets_back_what_it_compiled_and_another_source_gets_nothing(tmp_path):
    a = _scratch(tmp_path, "job1")
    before = kernel_cache.restore("SOURCE A", a)
    assert before == {"driverhash"}
    (a / ".triton" / "KERNELHASH").mkdir()
    (a / ".triton" / "KERNELHASH" / "add_kernel.cubin").write_bytes(b"\x7fELF cubin")
    grp = {"child_paths": {"add_kernel.cubin": str(a / ".triton" / "KERNELHASH" / "add_kernel.cubin")}}
    (a / ".triton" / "KERNELHASH" / "__grp__add_kernel.json").write_text(json.dumps(grp))
    (a / ".triton" / "BROKEN").mkdir()
    (a / ".triton" / "BROKEN" / "__grp__x.json").write_text("{not json")
    assert kernel_cache.save("SOURCE A", a, before) == 3

    b = _scratch(tmp_path, "job2")
    kernel_cache.restore("SOURCE A", b)
    assert (b / ".triton" / "KERNELHASH" / "add_kernel.cubin").read_bytes() == b"\x7fELF cubin"
    # Triton's group file lists absolute paths: they now name this job's copy, not the old scratch
    moved = json.loads((b / ".triton" / "KERNELHASH" / "__grp__add_kernel.json").read_text())
    assert moved == {"child_paths": {"add_kernel.cubin": str(b / ".triton" / "KERNELHASH" / "add_kernel.cubin")}}
    assert not (b / ".triton" / "BROKEN" / "__grp__x.json").exists()  # unreadable: dropped (a recompile)
    # the entry made before the source loaded was neither saved nor overwritten
    assert (b / ".triton" / "driverhash" / "cuda_utils.so").read_bytes() == b"made before the source loaded"
    assert not (kernel_cache._root() / kernel_cache.key("SOURCE A") / "driverhash").exists()

    c = _scratch(tmp_path, "job3")
    assert kernel_cache.restore("SOURCE A ", c) == {"driverhash"}  # one byte more: another source
    assert sorted(os.listdir(c / ".triton")) == ["driverhash"]


def test_links_odd_names_and_oversized_caches_are_not_kept(tmp_path, monkeypatch):
    secret = tmp_path / "server_secret"
    secret.write_text("TOKEN")
    a = _scratch(tmp_path, "job")
    before = kernel_cache.restore("S", a)
    d = a / ".triton" / "K"
    d.mkdir()
    (d / "link.cubin").symlink_to(secret)
    os.link(secret, d / "hard.cubin")
    (d / "bad name;rm").write_text("x")
    (d / "sub").mkdir()
    (d / "ok.cubin").write_bytes(b"ok")
    (a / ".triton" / "L").symlink_to(tmp_path)  # a symlinked entry
    assert kernel_cache.save("S", a, before) == 1
    kept = kernel_cache._root() / kernel_cache.key("S")
    assert sorted(p.name for p in kept.rglob("*")) == ["K", "ok.cubin"]

    monkeypatch.setattr(kernel_cache, "MAX_BYTES", 10)
    b = _scratch(tmp_path, "job2")
    (b / ".triton" / "M").mkdir()
    (b / ".triton" / "M" / "big.cubin").write_bytes(b"x" * 11)
    assert kernel_cache.save("T", b, set()) == 0


def test_pruned_to_the_most_recent_sources(tmp_path, monkeypatch):
    monkeypatch.setattr(kernel_cache, "MAX_SOURCES", 2)
    for i in range(4):
        s = _scratch(tmp_path, f"j{i}")
        (s / ".triton" / "K").mkdir()
        (s / ".triton" / "K" / "k.cubin").write_bytes(b"k")
        assert kernel_cache.save(f"src {i}", s, {"driverhash"}) == 1
        kept = kernel_cache._root() / kernel_cache.key(f"src {i}")
        os.utime(kept, (1000 + i, 1000 + i))
    # pruned to MAX_SOURCES at each save, least recently used first
    kept = {p.name for p in kernel_cache._root().iterdir() if not p.name.startswith(".")}
    assert kept == {kernel_cache.key("src 3"), kernel_cache.key("src 2")}


def test_spares_start_with_the_driver_module_the_first_spare_built(tmp_path):
    first = _scratch(tmp_path, "spare1")  # its driverhash entry: built before any agent code ran
    kernel_cache.save_driver(first)
    second = tmp_path / "spare2"
    second.mkdir()
    kernel_cache.restore_driver(second)
    assert (second / ".triton" / "driverhash" / "cuda_utils.so").read_bytes() == b"made before the source loaded"
    # saved once: a later spare's cache (which could differ) does not replace it
    later = _scratch(tmp_path, "spare3")
    (later / ".triton" / "driverhash" / "cuda_utils.so").write_bytes(b"other")
    kernel_cache.save_driver(later)
    third = tmp_path / "spare4"
    third.mkdir()
    kernel_cache.restore_driver(third)
    assert (third / ".triton" / "driverhash" / "cuda_utils.so").read_bytes() == b"made before the source loaded"
    # a source's restore leaves the driver entry alone and never saves it under the source
    before = kernel_cache.restore("SRC", third)
    assert "driverhash" in before


def test_a_restore_never_sees_a_save_half_done(tmp_path, monkeypatch):
    """A retired child's save runs in the background (spares.retire) while the next job of the same source may
    restore: the restore waits for the save, so it gets every file of an entry or none of them."""
    import threading

    job = _scratch(tmp_path, "job1")
    before = kernel_cache.restore("SRC", job)
    (job / ".triton" / "K").mkdir()
    for n in ("a.cubin", "b.json"):
        (job / ".triton" / "K" / n).write_bytes(b"x")
    real_copy, started, go = kernel_cache._copy_out, threading.Event(), threading.Event()

    def slow_copy(cache, names, dest):  # one file out, then a pause in the middle of the entry
        started.set()
        go.wait(5)
        return real_copy(cache, names, dest)
    monkeypatch.setattr(kernel_cache, "_copy_out", slow_copy)
    saver = threading.Thread(target=kernel_cache.save, args=("SRC", job, before))
    saver.start()
    assert started.wait(5)
    (kernel_cache._root() / kernel_cache.key("SRC") / "K").mkdir(parents=True)  # as a half-done save leaves it
    (kernel_cache._root() / kernel_cache.key("SRC") / "K" / "a.cubin").write_bytes(b"x")
    got = []
    reader = threading.Thread(target=lambda: got.append(kernel_cache.restore("SRC", _scratch(tmp_path, "job2"))))
    reader.start()
    reader.join(0.5)
    assert reader.is_alive(), "the restore went ahead while a save held the cache"
    go.set()
    saver.join(5), reader.join(5)
    assert sorted(p.name for p in (tmp_path / "job2" / ".triton" / "K").iterdir()) == ["a.cubin", "b.json"]
