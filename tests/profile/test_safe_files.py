"""Reading a sandboxed process's outputs (profile/safe_files.py): only named files, walked from directory
descriptors; a symlink (to a secret file, to /proc/self/environ), a FIFO, a device node or an oversized file is
refused by name and never read or waited on."""

from __future__ import annotations

import os
import threading

import pytest

from evokernel_mcp.profile import safe_files

SECRET = "evk-safe-files-secret-0c4d"


@pytest.fixture
def tree(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    root = tmp_path / "scratch"
    out = root / "rocprof" / "run_01"
    out.mkdir(parents=True)
    (out / "prof_counter_collection.csv").write_text("a,b\n1,2\n")
    (out / "leak.csv").symlink_to(secret)
    (out / "env.csv").symlink_to("/proc/self/environ")
    os.mkfifo(out / "hang.csv")
    (root / "rocprof" / "linked_dir").symlink_to(tmp_path)
    (out / "ignored.bin").write_bytes(b"\0" * 10)
    (root / "pmc.ncu-rep").write_bytes(b"report")
    (root / "ncu_log.txt").symlink_to(secret)
    return tmp_path, root


def _read_in_thread(fn):
    box = []
    t = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    t.start()
    t.join(10)
    assert box, "the reader blocked (a FIFO must never be opened for a blocking read)"
    return box[0]


def test_only_regular_named_files_come_back_links_and_fifos_are_refused(tree):
    base, root = tree
    texts, blobs, refused = _read_in_thread(lambda: safe_files.read_tree(root, ["rocprof", "pmc.ncu-rep",
                                                                              "ncu_log.txt"]))
    assert texts == {"rocprof/run_01/prof_counter_collection.csv": "a,b\n1,2\n"}
    assert blobs == {"pmc.ncu-rep": b"report"}
    joined = " ".join(refused)
    for name in ("leak.csv", "env.csv", "hang.csv", "linked_dir", "ncu_log.txt"):
        assert name in joined
    assert SECRET not in repr((texts, blobs))


def test_a_linked_scratch_dir_or_path_component_is_not_followed(tree):
    base, root = tree
    assert safe_files.read_capped(root, "ncu_log.txt", 1000) == ""
    texts, blobs, refused = safe_files.read_tree(root, ["rocprof/linked_dir"])
    assert texts == {} and blobs == {}
    with pytest.raises(ValueError):
        safe_files.plain_parts("../secret.txt")
    with pytest.raises(ValueError):
        safe_files.plain_parts("/etc/passwd")


def test_size_caps(tmp_path, monkeypatch):
    (tmp_path / "big.csv").write_bytes(b"x" * 5000)
    monkeypatch.setattr(safe_files, "TEXT_MAX_BYTES", 1000)
    texts, _, refused = safe_files.read_tree(tmp_path, ["big.csv"])
    assert texts == {} and "big.csv" in refused[0]
    assert safe_files.read_capped(tmp_path, "big.csv", 100, tail=True) == "x" * 100


def test_device_nodes_are_refused(tmp_path):
    import stat

    try:
        os.mknod(tmp_path / "node.csv", stat.S_IFCHR | 0o666, os.makedev(1, 5))  # /dev/zero's numbers
    except PermissionError:
        pass
    (tmp_path / "zero.csv").symlink_to("/dev/zero")
    texts, _, refused = _read_in_thread(lambda: safe_files.read_tree(tmp_path, ["node.csv", "zero.csv"]))
    assert texts == {} and len(refused) == 1 + (tmp_path / "node.csv").exists()
    texts, _, refused = safe_files.read_tree(tmp_path, ["zero.csv"])
    assert texts == {} and refused
    texts, _, refused = safe_files.read_tree(tmp_path.parent, [tmp_path.name])
    assert texts == {}
