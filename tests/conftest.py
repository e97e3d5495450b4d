"""Shared test set-up: an isolated state dir, fixture paths, GPU markers."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

# pytest keeps its rewritten test modules as bytecode only where bytecode may be written; with
# PYTHONDONTWRITEBYTECODE set (it is on the 2-core VM) every worker and every pass rewrote all of them (7 s each)
sys.dont_write_bytecode = False

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
ROCM_FIXTURES = FIXTURES / "rocm"  # verbatim copy of shared/fixtures/rocm (see its SOURCES.md)


def pytest_configure(config):
    """Under pytest-xdist, each worker keeps to CPUs of its own (and so do the processes its tests start): a
    CPU benchmark's arms then share their CPU with nothing of another worker, as on a machine of that size."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    cpus = sorted(os.sched_getaffinity(0))
    n = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    if worker.startswith("gw") and n > 1 and len(cpus) >= n:
        i = int(worker[2:])
        os.sched_setaffinity(0, cpus[i::n])


@pytest.fixture(scope="session", autouse=True)
def _isolated_state(tmp_path_factory):
    home = tmp_path_factory.mktemp("evokernel_home")
    os.environ["EVOKERNEL_HOME"] = str(home)
    # tests load task folders and KernelBench files by path from the repo's tests and from tmp dirs
    os.environ["EVOKERNEL_TASK_ROOTS"] = os.pathsep.join([str(REPO / "tests"), str(home.parent.parent)])
    from evokernel_mcp import settings

    settings.reset()
    yield home
    import anyio

    from evokernel_mcp.app import close_app

    anyio.run(close_app)  # stop the job manager's loop thread and the runners before the interpreter exits


@pytest.fixture(autouse=True)
def _fresh_settings():
    """Each test reads the settings from the environment it starts with (settings.py reads them once)."""
    from evokernel_mcp import settings

    settings.reset()
    yield
    settings.reset()


@pytest.fixture
def use_settings(monkeypatch):
    """Change this process's settings for one test: use_settings(journal=path, ...) -> the new Settings."""
    from evokernel_mcp import settings

    def use(**changes):
        new = settings.Settings.model_validate({**settings.get().model_dump(), **changes})
        monkeypatch.setattr(settings, "_current", new)
        return new
    return use


def _have_cuda() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        import torch

        return torch.cuda.is_available() and torch.version.cuda is not None
    except Exception:  # noqa: BLE001
        return False


def _have_rocm() -> bool:
    if not (os.path.exists("/dev/kfd") or shutil.which("rocminfo")):
        return False
    try:
        import torch

        return torch.cuda.is_available() and torch.version.hip is not None
    except Exception:  # noqa: BLE001
        return False


def pytest_collection_modifyitems(config, items):
    # the tests that run for minutes start first: pytest-xdist hands tests out in this order, and a long one
    # handed out last would keep one worker busy while the other has nothing left
    items.sort(key=lambda item: "long" not in item.keywords)
    cuda, rocm = _have_cuda(), _have_rocm()
    for item in items:
        if "gpu" in item.keywords and not (cuda or rocm):
            item.add_marker(pytest.mark.skip(reason="needs a GPU (run on the device machine)"))
        if "cuda" in item.keywords and not cuda:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))
        if "rocm" in item.keywords and not rocm:
            item.add_marker(pytest.mark.skip(reason="needs a ROCm GPU"))


@pytest.fixture
def rocm_fixtures() -> Path:
    return ROCM_FIXTURES
