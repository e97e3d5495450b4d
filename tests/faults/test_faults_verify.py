"""Fault suite, CPU path, through the real MCP client: arguments that must not loosen the bar or reach outside
a task. The bad candidates themselves (crashes, hangs, patches, forged frames, escapes) are exploits of the
shipped corpus (evokernel_mcp/integrity/corpus/), replayed with the same after-checks by
tests/integrity/test_integrity_replay_cpu.py.
"""

from __future__ import annotations

import pytest
from faultkit import WRONG, assert_next_jobs_right, call, verify

pytestmark = pytest.mark.slow


def test_fault_huge_tolerance_cannot_loosen_the_bar(server):
    r = verify(server, WRONG, tolerance={"atol": 1e308, "rtol": 1e308})
    assert not r.is_error and r.structured_content["passed"] is False
    assert_next_jobs_right(server)


def test_fault_empty_shapes_is_an_error(server):
    r = verify(server, WRONG, shapes=[])
    assert r.is_error and "shapes" in r.content[0].text


def test_fault_task_yaml_naming_a_file_outside_its_folder(server, tmp_path):
    d = tmp_path / "evil_task"
    d.mkdir()
    (d / "task.yaml").write_text("name: evil\nreference: /etc/hostname\nshape_sets: {small: {}}\n")
    r = call(server, "get_task", {"task": str(d)})
    assert r.is_error and "outside the task folder" in r.content[0].text
