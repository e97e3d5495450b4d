"""task.yaml declares which FLOP peak bounds its roofline; benchmark defaults to it."""

from evokernel_mcp.tasks import load_task


def test_shipped_tasks_declare_their_compute_unit():
    assert load_task("conv3d_depthwise").compute_unit == "vector"  # depthwise: no matrix units (see mfma.md)
    assert load_task("vector_add").compute_unit == "vector"
    assert load_task("fused_mlp").compute_unit == "matrix"
