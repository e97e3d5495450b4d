"""Between cases the runner hands cached device memory back only when there is enough of it to matter: each
empty_cache means cudaFree now and cudaMalloc on the next case (driver calls a second GPU's processes slow
down), while a big case's gigabytes must still go back for the next child."""

from __future__ import annotations

import sys
import types

from evokernel_mcp.runtime import devmem


def _fake_torch(reserved: int, allocated: int, total: int):
    calls = []
    cuda = types.SimpleNamespace(
        is_initialized=lambda: True, current_device=lambda: 0,
        get_device_properties=lambda i: types.SimpleNamespace(total_memory=total),
        memory_reserved=lambda: reserved, memory_allocated=lambda: allocated,
        empty_cache=lambda: calls.append("empty"))
    return types.SimpleNamespace(cuda=cuda), calls


def test_small_idle_cache_stays_big_one_goes(monkeypatch):
    gib = 1 << 30
    mib = 1 << 20
    for reserved, allocated, total, emptied in ((400 * mib, 0, 141 * gib, False),  # 400 MiB idle on an H200
                                                (gib, 0, 141 * gib, True),  # over the 512 MiB cap
                                                (3 * gib, 2600 * mib, 141 * gib, False),  # 472 MiB idle
                                                (600 * mib, 0, 8 * gib, True)):  # over 5 % of an 8 GiB device
        torch, calls = _fake_torch(reserved, allocated, total)
        monkeypatch.setitem(sys.modules, "torch", torch)
        devmem.trim_between_cases()
        assert (calls == ["empty"]) is emptied, (reserved, allocated, total)


def test_host_staging_is_pageable_without_cuda_and_releasing_it_is_a_no_op():
    import torch

    from evokernel_mcp.runtime.devmem import host_empty, release_host

    t = host_empty((4, 2), torch.float32)
    assert t.shape == (4, 2) and t.device.type == "cpu" and not t.is_pinned()
    release_host()


def test_runner_allocator_never_splits_big_blocks_unless_the_user_set_it():
    env: dict[str, str] = {}
    devmem.runner_alloc_env(env)
    assert env == {"PYTORCH_CUDA_ALLOC_CONF": f"max_split_size_mb:{devmem.RUNNER_MAX_SPLIT_MB}"}
    for var in devmem.ALLOC_CONF_VARS:  # the user's settings stand, under any of the names torch reads
        mine = {var: "expandable_segments:True"}
        devmem.runner_alloc_env(mine)
        assert mine == {var: "expandable_segments:True"}


def test_the_runner_applies_it_before_torch_and_children_never_get_it():
    import inspect

    from evokernel_mcp.runtime import envs, runner

    src = inspect.getsource(runner.main)
    assert src.index("runner_alloc_env(os.environ)") < src.index("serve(")
    assert not any(k.startswith("PYTORCH_") for k in envs.ENV_ALLOW)  # a sandboxed child's allow-list
