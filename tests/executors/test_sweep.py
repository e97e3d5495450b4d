"""sweep: a kernel's configurations expanded, each run as a candidate of one batch, ranked with verdicts."""

from __future__ import annotations

import anyio
import pytest

from evokernel_mcp.batch.sweep import check_names_used, config_name, config_source, expand
from evokernel_mcp.errors import BadInput

CAND = '''\
import torch
CHUNK = 1024
SCALE = 1.0


def run(x, y):
    out = torch.empty_like(x)
    fx, fy, fo = x.view(-1), y.view(-1), out.view(-1)
    for i in range(0, fx.numel(), CHUNK):
        fo[i:i + CHUNK] = (fx[i:i + CHUNK] + fy[i:i + CHUNK]) * SCALE
    return out
'''


def test_expand_is_the_product_in_order_and_checked():
    cfgs = expand({"CHUNK": [256, 1024], "SCALE": [1.0]}, None)
    assert cfgs == [{"CHUNK": 256, "SCALE": 1.0}, {"CHUNK": 1024, "SCALE": 1.0}]
    assert expand({}, [{"CHUNK": 8}]) == [{"CHUNK": 8}]
    for bad in ({"CHUNK": []}, {"not a name": [1]}, {"X": list(range(65))}):
        with pytest.raises(BadInput):
            expand(bad, None)
    with pytest.raises(BadInput):
        expand({}, [{"A": 1}, {"A": 1}])
    with pytest.raises(BadInput):
        expand({}, None)


def test_config_source_reassigns_the_names_at_the_end():
    src = config_source(CAND, {"CHUNK": 256, "SCALE": 2.0})
    ns: dict = {}
    exec(compile(src, "c", "exec"), ns)
    assert ns["CHUNK"] == 256 and ns["SCALE"] == 2.0
    assert config_name({"CHUNK": 256, "SCALE": 2.0}) == "CHUNK=256,SCALE=2.0"
    with pytest.raises(BadInput, match="never names"):
        check_names_used(CAND, {"BLOCK_M": 64})


def test_sweep_ranks_every_configuration_with_its_verdict():
    from evokernel_mcp.batch.sweep import sweep

    res = anyio.run(lambda: sweep(CAND, space={"CHUNK": [4096, 65536], "SCALE": [1.0, 2.0]}, task="vector_add",
                                  stages=["verify"], shapes=["small"], wait_s=300))
    assert res.state == "done", res
    by = {r.name: r for r in res.ranked}
    assert set(by) == {"CHUNK=4096,SCALE=1.0", "CHUNK=65536,SCALE=1.0", "CHUNK=4096,SCALE=2.0",
                       "CHUNK=65536,SCALE=2.0"}
    assert by["CHUNK=4096,SCALE=1.0"].valid and by["CHUNK=65536,SCALE=1.0"].valid
    assert not by["CHUNK=4096,SCALE=2.0"].valid and by["CHUNK=4096,SCALE=2.0"].failed_stage == "verify"
    assert "mismatch" in (by["CHUNK=4096,SCALE=2.0"].reason or "") or by["CHUNK=4096,SCALE=2.0"].reason
    assert [r.valid for r in res.ranked] == [True, True, False, False]
