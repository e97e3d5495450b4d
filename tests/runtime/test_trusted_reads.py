"""Trusted code reading what agent code could have touched (runtime/safefs.py, protocol.read_tail), the runner's
and the sandbox's environment (sandbox.py), and frames a child could forge (frames.py): unit level, no runner."""

from __future__ import annotations

import io
import os
import threading

import pytest

from evokernel_mcp.runtime import envs, frames, safefs, sandbox
from evokernel_mcp.runtime.protocol import read_tail


@pytest.fixture
def scratch(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("evk-secret-in-a-file")
    d = tmp_path / "scratch"
    d.mkdir()
    (d / "plain.txt").write_text("hello")
    os.symlink(secret, d / "link.txt")
    os.symlink("/proc/self/environ", d / "environ.txt")
    os.symlink("/dev/zero", d / "zero.txt")
    os.mkfifo(d / "fifo.txt")
    return d


def _in_time(fn, *a):
    """fn(*a) on a thread; a reader that blocks (a FIFO) or never ends (/dev/zero) fails the test instead of hanging."""
    out: list = []

    def call() -> None:
        try:
            out.append((True, fn(*a)))
        except BaseException as e:  # noqa: BLE001 - handed to the test's thread
            out.append((False, e))
    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(20)
    assert not t.is_alive(), "the read blocked"
    ok, val = out[0]
    if not ok:
        raise val
    return val


def test_read_tail_reads_only_a_plain_regular_file(scratch):
    assert _in_time(read_tail, scratch / "plain.txt") == "hello"
    for name in ("link.txt", "environ.txt", "zero.txt", "fifo.txt", "missing.txt"):
        assert _in_time(read_tail, scratch / name) == "", name


def test_read_under_takes_plain_names_and_regular_files_within_the_cap(scratch):
    assert safefs.read_under(scratch, "plain.txt", 100) == b"hello"
    for name in ("link.txt", "environ.txt", "zero.txt", "fifo.txt", "/etc/hostname", "../secret.txt", "..", "",
                 None, 7):
        with pytest.raises(safefs.UnsafeFile):
            _in_time(safefs.read_under, scratch, name, 100)
    with pytest.raises(safefs.UnsafeFile, match="more than"):
        safefs.read_under(scratch, "plain.txt", 3)
    with pytest.raises(safefs.Missing):
        safefs.read_under(scratch, "missing.txt", 100)


def test_a_linked_directory_is_not_opened(tmp_path, scratch):
    os.symlink(scratch, tmp_path / "linked")
    with pytest.raises(safefs.UnsafeFile):
        safefs.read_under(tmp_path / "linked", "plain.txt", 100)


def test_tail_fd_keeps_reading_the_file_it_opened_whatever_the_name_becomes(scratch):
    fd = os.open(scratch / "plain.txt", os.O_RDWR)
    try:
        os.unlink(scratch / "plain.txt")
        os.symlink("/proc/self/environ", scratch / "plain.txt")
        os.write(fd, b"HELLO, more")
        assert safefs.tail_fd(fd) == "HELLO, more"
        assert safefs.tail_fd(fd, 4).endswith("more") and "cut" in safefs.tail_fd(fd, 4)
    finally:
        os.close(fd)


def test_the_runner_gets_an_allow_listed_environment_without_secrets(monkeypatch, tmp_path, use_settings):
    monkeypatch.setenv("ZZ_PLANTED_VALUE", "planted")  # a name no allow-list knows
    monkeypatch.setenv("EVOKERNEL_HTTP_TOKEN", "tok")
    monkeypatch.setenv("EVOKERNEL_DB_PASSWORD", "pw")  # under an allowed prefix, but a credential's name
    use_settings(secret_env=("TRITON_MY_KEYRING",))  # serve --secret-env TRITON_MY_KEYRING
    monkeypatch.setenv("TRITON_MY_KEYRING", "marked by the user")
    monkeypatch.setenv("EVOKERNEL_DEVICES", "cpu")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    token = tmp_path / "token"
    token.write_text("tok")
    monkeypatch.setattr(envs, "_HIDDEN_FILES", [])
    envs.hide_file(token)
    from evokernel_mcp.runtime.pool import runner_env_for

    env = runner_env_for("cpu")
    assert env["EVOKERNEL_DEVICES"] == "cpu" and env["TRITON_INTERPRET"] == "1" and "PATH" in env
    for k in ("ZZ_PLANTED_VALUE", "EVOKERNEL_HTTP_TOKEN", "EVOKERNEL_DB_PASSWORD", "TRITON_MY_KEYRING"):
        assert k not in env, k
    values = [v for k, v in env.items() if k != envs.SECRET_FILES_VAR]
    assert "planted" not in values and "tok" not in values
    assert env[envs.SECRET_FILES_VAR] == str(token.resolve())  # a runner hides it from its children too
    child = sandbox.base_env()
    assert not {"ZZ_PLANTED_VALUE", "EVOKERNEL_HTTP_TOKEN", envs.SECRET_FILES_VAR} & set(child)


def test_a_secret_file_inside_any_bind_is_hidden_even_behind_a_later_bind(monkeypatch, tmp_path):
    bound = tmp_path / "tools"
    bound.mkdir()
    token = bound / "token"
    token.write_text("tok")
    monkeypatch.setattr(envs, "_HIDDEN_FILES", [])
    envs.hide_file(token)
    spec = sandbox.Spec(argv=["/bin/true"], scratch=tmp_path / "scratch", ro_binds=[str(bound)])
    args = sandbox.bwrap_argv(spec, "/usr/bin/bwrap", drop_uid=False)
    last_bind = max(i for i, a in enumerate(args) if a == str(bound) and args[i - 1] == "--ro-bind")
    hide = [i for i in range(len(args) - 2) if args[i:i + 3] == ["--ro-bind", "/dev/null", str(token)]]
    assert hide and hide[-1] > last_bind, "the token file is bound over after the dir that holds it"


def _read(line: bytes):
    return frames.read(io.BytesIO(line), max_bytes=1 << 20)


@pytest.mark.parametrize("line", [
    b'{"msg":' + b"[" * 200_000 + b"]" * 200_000 + b',"tensors":[]}\n',
    b'{"msg":{"a":' + b'{"b":' * 100 + b"1" + b"}" * 100 + b'},"tensors":[]}\n',
    b'{"msg":{},"tensors":[{"dtype":"float32","shape":[1e30],"nbytes":4}]}\n',
    b'{"msg":{},"tensors":[{"dtype":"float32","shape":[0,281474976710656,281474976710656],"nbytes":0}]}\n',
    b'{"msg":{},"tensors":[{"dtype":"float32","shape":[' + b"1," * 40 + b'1],"nbytes":4}]}\n',
    b'{"msg":{},"tensors":[{"dtype":"float32","shape":[true],"nbytes":4}]}\n',
    b'{"msg":{},"tensors":[{"dtype":{"x":1},"shape":[1],"nbytes":4}]}\n',
    b'{"msg":{"__t__":5},"tensors":[]}\n',
], ids=["deep_list", "deep_dict", "shape_1e30", "shape_overflow", "many_dims", "bool_dim", "dict_dtype", "bad_ref"])
def test_a_malformed_frame_is_a_frame_error(line):
    with pytest.raises(frames.FrameError):
        _read(line)


def test_brackets_inside_strings_do_not_count_as_depth():
    assert _read(b'{"msg":{"text":"' + b"[" * 1000 + b'"},"tensors":[]}\n') == {"text": "[" * 1000}
