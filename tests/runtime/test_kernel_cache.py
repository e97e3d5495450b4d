"""Triton's driver module kept for later spares (runtime/kernel_cache.py), and nothing else: what a job
compiled never reaches a later job, and the copy never follows a link or blocks on what it finds."""

from __future__ import annotations

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


def test_no_per_source_cache_is_left_to_carry_a_jobs_files():
    """What a job's process wrote (its kernels, or its outputs dressed as a cubin) has no way to a later job."""
    assert not hasattr(kernel_cache, "save") and not hasattr(kernel_cache, "restore")


def test_the_driver_copy_follows_no_link_and_reads_no_fifo_or_device(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("evk-root-only-secret")
    s = tmp_path / "spare"
    (s / ".triton" / "entry").mkdir(parents=True)
    (s / ".triton" / "entry" / "ok.so").write_bytes(b"fine")
    os.symlink(secret, s / ".triton" / "entry" / "link.json")
    os.link(secret, s / ".triton" / "entry" / "hard.json")  # a second name of a foreign file
    os.mkfifo(s / ".triton" / "entry" / "fifo.json")
    os.symlink("/dev/zero", s / ".triton" / "entry" / "zero.cubin")
    os.symlink(tmp_path, s / ".triton" / "linked_dir")  # a directory link: never walked
    kernel_cache.save_driver(s)
    kept = kernel_cache._root() / kernel_cache.DRIVER
    assert sorted(p.name for p in kept.rglob("*")) == ["entry", "ok.so"]


def test_a_linked_cache_dir_is_not_walked(tmp_path):
    other = _scratch(tmp_path, "someone_else")
    s = tmp_path / "spare"
    s.mkdir()
    os.symlink(other / ".triton", s / ".triton")
    kernel_cache.save_driver(s)
    assert not (kernel_cache._root() / kernel_cache.DRIVER).exists()

