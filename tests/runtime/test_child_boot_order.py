"""A sandboxed GPU child's start: everything CPU-only (a cold child's meta warm-up among it) comes before the device
gate, so a spare held there by a big job or a benchmark's timing has no device work left but its context. Run on
the CPU host with the GPU path asked for (torch then finds no device after the gate)."""

from __future__ import annotations

from evokernel_mcp.runtime.child import _info


def test_a_cold_gpu_childs_meta_warm_up_comes_before_the_device_gate():
    seen: list[str] = []
    info = _info("cuda:0", warm=False, gate=lambda: seen.append("gate"))
    phases = list(info["boot_s"])
    assert seen == ["gate"] and "meta" in phases and phases.index("meta") < phases.index("gate"), phases


def test_a_warm_child_makes_no_meta_warm_up():
    info = _info("cuda:0", warm=True, gate=lambda: None)
    assert "meta" not in info["boot_s"]
