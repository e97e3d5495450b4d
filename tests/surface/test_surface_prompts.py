"""Prompt arguments and completions name what exists: port_kernelbench completes to the KernelBench problem
files under the configured task roots (nothing when none is configured, never the shipped task names), and a
prompt given a task, problem, target or language that does not exist is an error naming the valid ones."""

from __future__ import annotations

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, PromptReference

from evokernel_mcp.server import build_server
from evokernel_mcp.surface.completions import complete

PROBLEM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(8)]
"""


@pytest.fixture
def kb_root(tmp_path, monkeypatch):
    level1 = tmp_path / "KernelBench" / "level1"
    level1.mkdir(parents=True)
    for name in ("10_ReLU.py", "2_ReLU.py", "1_ReLU.py"):
        (level1 / name).write_text(PROBLEM)
    (level1 / "helpers.py").write_text("def get_inputs():\n    return []\n")  # no class Model
    task = tmp_path / "my_task"  # a task folder's reference is KernelBench-form but belongs to the task
    task.mkdir()
    (task / "task.yaml").write_text("name: my_task\n")
    (task / "reference.py").write_text(PROBLEM)
    monkeypatch.setenv("EVOKERNEL_TASK_ROOTS", str(tmp_path))
    return level1.resolve()


def test_problem_completes_to_kernelbench_files(kb_root):
    got = complete("problem", "").values
    assert got == [str(kb_root / n) for n in ("1_ReLU.py", "2_ReLU.py", "10_ReLU.py")]
    assert complete("problem", "10_").values == [str(kb_root / "10_ReLU.py")]  # by file name
    assert complete("problem", str(kb_root / "2")).values == [str(kb_root / "2_ReLU.py")]  # by path
    assert complete("task", "vec").values == ["vector_add"]  # optimize_kernel's task: the shipped ones


def test_problem_completes_to_nothing_without_a_kernelbench_folder(monkeypatch):
    monkeypatch.setenv("EVOKERNEL_TASK_ROOTS", "")
    assert complete("problem", "").values == []


def _get_prompt(name: str, args: dict[str, str]):
    """The rendered prompt; an error is raised after the session went on serving (a second call answered)."""
    async def main():
        async with Client(build_server()) as c:
            try:
                return await c.get_prompt(name, args)
            except MCPError as e:
                assert await c.list_prompts()
                return e
    got = anyio.run(main)
    if isinstance(got, MCPError):
        raise got
    return got


@pytest.mark.parametrize(("name", "args", "says"), [
    ("optimize_kernel", {"task": "nope"}, ["no task 'nope'", "vector_add"]),
    ("optimize_kernel", {"task": "vector_add", "target": "gfx1"}, ["target 'gfx1'", "gfx942", "'live'"]),
    ("optimize_kernel", {"task": "vector_add", "language": "cobol"}, ["language 'cobol'", "triton, hip, cuda"]),
    ("port_kernelbench", {"problem": "vector_add"}, ["not a KernelBench problem file", "optimize_kernel"]),
])
def test_prompt_with_what_does_not_exist_is_an_error(name, args, says):
    with pytest.raises(MCPError) as e:
        _get_prompt(name, args)
    assert e.value.code == INVALID_PARAMS and e.value.message.startswith(f"{name}: ")
    for s in says:
        assert s in e.value.message, e.value.message


def test_port_kernelbench_names_the_problems_it_serves(kb_root, use_settings):
    with pytest.raises(MCPError, match=r"no KernelBench problem at 'nope'.*problems this server serves: .*1_ReLU"):
        _get_prompt("port_kernelbench", {"problem": "nope"})
    use_settings(task_roots=())
    with pytest.raises(MCPError, match="No KernelBench folder is configured: start the server with "
                                       "EVOKERNEL_TASK_ROOTS"):
        _get_prompt("port_kernelbench", {"problem": "nope"})


def test_port_kernelbench_renders_and_completes_through_the_client(kb_root):
    path = str(kb_root / "1_ReLU.py")

    async def main():
        async with Client(build_server()) as c:
            done = await c.complete(PromptReference(type="ref/prompt", name="port_kernelbench"),
                                    {"name": "problem", "value": "1_"})
            return done, await c.get_prompt("port_kernelbench", {"problem": path, "target": "gfx942"})
    done, got = anyio.run(main)
    assert done.completion.values == [path]
    assert f'verify_vs_pytorch(task="{path}"' in got.messages[0].content.text
