"""Tests of the conv3d_depthwise reference steps, runnable on a CPU host.

- Triton steps (1, 2): the task's small shape set through the Triton interpreter, vs F.conv3d in float64
  on fresh random inputs, with the task's tolerance (|y - ref| <= 0.02 + 0.016 |ref|).
- C++ steps (3, 4, 5, 6): compile-only for gfx942 and gfx950 with our compile_kernel (offline HIP); skipped
  where no HIP compiler is installed. Their numerics are checked on a GPU by bench/conv3d_steps.py and
  tools/journey.py.
- Step 6's fragment maps, rolling window, H chunks and clamped planes, lane by lane in float64, for the NVIDIA and
  AMD layouts, vs F.conv3d.
- Step 7's whole kernel emulated lane by lane (step7_mma_tiles/emulate.py: its #defines, shared-memory ring and
  output tile, copy and flush maps, fragment maps, pair loop) for both layouts and several variants, vs F.conv3d;
  its launcher's shared-memory size equals the emulation's; it refuses a W its variant cannot cover; every variant
  of bench/conv3d_step7_search.py takes the full shape with conflict-free B reads (bank count of its layout).
- The Toeplitz formulation of step 4, index for index (rows over flattened (d, h), k = w0 - 2 + 0..15,
  the banded T), emulated in torch and compared with F.conv3d.
Run:  TRITON_INTERPRET=1 python3 -m pytest resources/reference_kernels/conv3d_depthwise -q
"""
import importlib.util
import os
import pathlib

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton.jit runs

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
_DEVICE = "cuda" if torch.cuda.is_available() and os.environ["TRITON_INTERPRET"] != "1" else "cpu"
CXX_STEPS = {"step3_lds_tile": ("conv3d_dw_lds_tile", 128), "step4_tensor_core": ("conv3d_dw_tensor_core", 256),
             "step5_scheduled": ("conv3d_dw_scheduled", 128), "step6_mma_stream": ("conv3d_dw_mma_stream", 256),
             "step7_mma_tiles": ("conv3d_dw_mma_tiles", 256)}


def _load(step):
    spec = importlib.util.spec_from_file_location(f"conv3d_{step}", HERE / step / "kernel.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _inputs(seed, C=4, D=5, H=6, W=8):  # the task's small shape set
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((1, C, D, H, W), generator=g).to(torch.bfloat16)
    w = (0.2 * torch.randn((C, 1, 3, 5, 5), generator=g)).to(torch.bfloat16)
    return x, w


def _check(y, x, w):
    ref = F.conv3d(x.double(), w.double(), padding=(0, 2, 2), groups=x.shape[1])
    assert y.shape == ref.shape and y.dtype == torch.bfloat16
    bad = ((y.double().cpu() - ref).abs() > 0.02 + 0.016 * ref.abs()).sum().item()
    assert bad == 0, f"{bad} of {ref.numel()} outputs out of tolerance"


@pytest.mark.parametrize("step", ["step1_naive", "step2_ndhwc"])
def test_triton_step_matches_pytorch(step):
    x, w = _inputs(seed=int.from_bytes(os.urandom(2), "little"))
    _check(_load(step).run(x.to(_DEVICE), w.to(_DEVICE)), x, w)


def test_triton_step_refuses_a_wrong_filter():
    x, _ = _inputs(0)
    with pytest.raises(ValueError, match="filter"):
        _load("step1_naive").run(x, torch.zeros(4, 1, 3, 3, 3, dtype=torch.bfloat16))


def test_toeplitz_formulation_of_step4_matches_conv3d():
    x, w = _inputs(seed=5, C=2, D=4, H=5, W=16)
    C, D, H, W = x.shape[1:]
    xf, wf = x.double()[0], w.double()[:, 0]
    y = torch.zeros(C, D - 2, H, W, dtype=torch.float64)
    k, n = torch.arange(16)[:, None], torch.arange(8)[None, :]
    for c in range(C):
        for q in range(15):
            kd, kh = divmod(q, 5)
            T = torch.where((k - n >= 0) & (k - n < 5), wf[c, kd, kh][(k - n).clamp(0, 4)], 0.0)  # [16, 8]
            for w0 in range(0, W, 8):
                A = torch.zeros((D - 2) * H, 16, dtype=torch.float64)
                for r in range((D - 2) * H):
                    d, h = divmod(r, H)
                    ih = h + kh - 2
                    for kk in range(16):
                        col = w0 - 2 + kk
                        if 0 <= ih < H and 0 <= col < W:
                            A[r, kk] = xf[c, d + kd, ih, col]
                y[c, :, :, w0:w0 + 8] += (A @ T).reshape(D - 2, H, 8)
    ref = F.conv3d(x.double(), w.double(), padding=(0, 2, 2), groups=C)[0]
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)
    assert (T != 0).sum().item() == 40  # 40 useful MACs of 16 x 8 = 128 per MMA


def _step6_emulated(x, w, target, NP, HC):
    """Step 6's kernel, lane by lane in float64: its fragment maps (A = Toeplitz band, B = W segments of
    one input row, C -> output columns), its rolling 5-slot window, H chunks and clamped planes."""
    SEG, NSEG, LANES = (10, 8, 32) if target == "nvidia" else (12, 16, 64)
    C, D, H, W = x.shape[1:]
    xf, wf = x.double()[0], w.double()[:, 0].reshape(C, 15, 5)
    Dout = D - 2
    y = torch.full((C, Dout, H, W), float("nan"), dtype=torch.float64)

    def pos(m):  # output position of A/C row m (NVIDIA: rows 0..4 -> 0..4, rows 8..12 -> 5..9)
        if target == "amd":
            return m if m < SEG else None
        return m if m < 5 else (m - 3 if 8 <= m < 13 else None)

    def a_frag(c, q):  # the 16 x 16 A of tap q as the lanes build it
        A = torch.zeros(16, 16, dtype=torch.float64)
        for lane in range(LANES):
            if target == "nvidia":
                g, t = lane >> 2, lane & 3
                cells = [(g + 8 * (r & 1), 2 * t + 8 * (r >> 1) + e) for r in range(4) for e in range(2)]
            else:
                g, t = lane & 15, lane >> 4
                cells = [(g, 4 * t + i) for i in range(4)]
            for m, k in cells:
                if pos(m) is not None and 0 <= k - pos(m) < 5:
                    A[m, k] = wf[c, q, k - pos(m)]
        return A

    def b_frag(c, p, ih, wt0):  # the 16 x N B of input plane p, row ih, as the lanes load it
        B = torch.zeros(16, 8 if target == "nvidia" else 16, dtype=torch.float64)
        if not 0 <= ih < H:
            return B
        for lane in range(LANES):
            if target == "nvidia":
                g, t = lane >> 2, lane & 3
                o0 = wt0 + SEG * g - 2 + 2 * t
                pairs = [(2 * t, o0), (2 * t + 8, o0 + 8)]
            else:
                g, t = lane & 15, lane >> 4
                o0 = wt0 + SEG * g - 2 + 4 * t
                pairs = [(4 * t, o0), (4 * t + 2, o0 + 2)]
            for k, o in pairs:
                if 0 <= o < W:  # a pair is all in or all out (W and o even)
                    B[k, g], B[k + 1, g] = xf[c, p, ih, o], xf[c, p, ih, o + 1]
        return B

    for c in range(C):
        A = [a_frag(c, q) for q in range(15)]
        for d0 in range(0, Dout, NP):
            for wt0 in range(0, W, SEG * NSEG):
                for h0 in range(0, H, HC):
                    hn = min(HC, H - h0)
                    acc = torch.zeros(NP, 5, 16, B_N := (8 if target == "nvidia" else 16), dtype=torch.float64)
                    for t in range(hn + 4):
                        ih = h0 - 2 + t
                        Bs = [b_frag(c, min(d0 + p, D - 1), ih, wt0) for p in range(NP + 2)]
                        for p in range(NP + 2):
                            for kd in range(3):
                                j = p - kd
                                if 0 <= j < NP:
                                    for kh in range(5):
                                        acc[j, (t - kh) % 5] += A[kd * 5 + kh] @ Bs[p]
                        done = (t + 1) % 5
                        for j in range(NP):
                            if t >= 4 and d0 + j < Dout:
                                for n in range(B_N):
                                    for m in range(16):
                                        if pos(m) is not None and wt0 + SEG * n + pos(m) < W:
                                            y[c, d0 + j, h0 + t - 4, wt0 + SEG * n + pos(m)] = acc[j, done, m, n]
                            acc[j, done] = 0
    return y


@pytest.mark.parametrize("target,NP,HC,W", [("nvidia", 1, 6, 8), ("nvidia", 2, 4, 24), ("nvidia", 3, 6, 96),
                                            ("amd", 1, 6, 24), ("amd", 2, 5, 8)])
def test_step6_fragment_formulation_matches_conv3d(target, NP, HC, W):
    x, w = _inputs(seed=11, C=2, D=5, H=6, W=W)
    y = _step6_emulated(x, w, target, NP, HC)
    ref = F.conv3d(x.double(), w.double(), padding=(0, 2, 2), groups=x.shape[1])[0]
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)


def test_candidate_source_is_self_contained():
    spec = importlib.util.spec_from_file_location("conv3d_cxx", HERE / "_cxx.py")
    cxx = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cxx)
    for step, (kernel, _) in CXX_STEPS.items():
        src = cxx.candidate_source(HERE / step)
        ns = {}
        exec(compile(src, f"<{step}>", "exec"), ns)  # defines only; nothing is built until run()
        assert callable(ns["run"]) and ns["KERNEL"] == kernel and f'"C" __global__' in ns["CUDA_SRC"]


@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
@pytest.mark.parametrize("step", sorted(CXX_STEPS))
def test_cxx_step_compiles_offline_for_amd(step, target):
    import anyio

    from evokernel_mcp.compile.api import compile_kernel
    from evokernel_mcp.errors import ToolNotFound

    kernel, workgroup = CXX_STEPS[step]
    src = (HERE / step / "kernel.cu").read_text()
    try:
        res = anyio.run(lambda: compile_kernel(source=src, language="hip", kernel=kernel, target=target,
                                               options={"workgroup_size": workgroup}))
    except ToolNotFound as e:
        pytest.skip(f"no HIP compiler here: {e}")
    assert res.ok, [d.message for d in res.diagnostics]
    (k,) = [k for k in res.kernels if k.name == kernel]
    assert k.vgpr_count and k.vgpr_count > 0 and k.occupancy is not None and k.occupancy.limiter


def _step7():
    spec = importlib.util.spec_from_file_location("step7_emulate", HERE / "step7_mma_tiles" / "emulate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, (HERE / "step7_mma_tiles" / "kernel.cu").read_text()


def _step7_variant(src, defines):
    import re
    for k, v in defines.items():
        src, n = re.subn(rf"#define {k} \d+", f"#define {k} {v}", src)
        assert n == 1, k
    return src


# (C, D, H, W): H not a multiple of 4 and D - 2 not a multiple of the planes per block; W below the variant's
# widest (the columns past W are the zero halo) and W at its widest (80 on NVIDIA)
@pytest.mark.parametrize("target", ["nvidia", "amd"])
@pytest.mark.parametrize("defines", [{}, {"STAGES": 6}, {"WARPS": 2, "NPB": 4, "NPN": 4, "NT": 5, "MINB": 6},
                                     {"WARPS": 8, "NPB": 16, "MINB": 1}, {"WARPS": 10, "NT": 2, "MINB": 2},
                                     {"PPS": 2, "STAGES": 4}, {"PPS": 2, "STAGES": 6, "NPN": 4}, {"OSWZ": 0},
                                     {"WARPS": 2, "NPB": 4, "NPN": 4, "NT": 5, "MINB": 6, "TMA": 1},
                                     {"WARPS": 2, "NPB": 4, "NPN": 4, "NT": 5, "MINB": 6, "TMA": 2}])
def test_step7_emulated_kernel_matches_conv3d(target, defines):
    emu, src = _step7()
    src = _step7_variant(src, defines)
    cf = emu.config(src, target)
    widths = [W for W in (8, 24, 48) if W % cf["TILEW"] == 0 and W < cf["WMAX"]] + [cf["WMAX"]]
    shapes = [(1, 5, 6, widths[0]), (2, 13, 9, widths[min(1, len(widths) - 1)]), (1, 4, 5, widths[-1])]
    for C, D, H, W in shapes:
        x, w = _inputs(seed=C * 100 + W, C=C, D=D, H=H, W=W)
        y = emu.emulate(x.double().numpy(), w.double().numpy(), src, target)
        ref = F.conv3d(x.double(), w.double(), padding=(0, 2, 2), groups=C)[0].numpy()
        assert not np.isnan(y).any(), f"{int(np.isnan(y).sum())} outputs unwritten or read from unwritten shared memory"
        np.testing.assert_allclose(y, ref, rtol=1e-12, atol=1e-12)


def test_step7_emulation_catches_a_wrong_fragment_map(monkeypatch):
    emu, src = _step7()
    x, w = _inputs(seed=3, C=1, D=5, H=6, W=16)
    k0 = emu.b_k0
    monkeypatch.setattr(emu, "b_k0", lambda target, lane: k0(target, lane) + 2)  # B one column pair off
    y = emu.emulate(x.double().numpy(), w.double().numpy(), src, "nvidia")
    ref = F.conv3d(x.double(), w.double(), padding=(0, 2, 2), groups=1)[0].numpy()
    assert np.abs(y - ref).max() > 1e-3


def test_step7_launcher_shared_memory_and_width_limits():
    emu, src = _step7()
    step = _load("step7_mma_tiles")
    for hip, target in ((False, "nvidia"), (True, "amd")):
        threads, npb, wmax, tilew, smem = step._config(src, hip)
        cf = emu.config(src, target)
        assert (threads, npb, wmax, tilew, smem) == (cf["THREADS"], cf["NPB"], cf["WMAX"], cf["TILEW"], cf["SMEM_BYTES"])
    x, w = _inputs(seed=1, C=1, D=5, H=6, W=88)  # wider than the 80 columns one NVIDIA block covers
    with pytest.raises(ValueError, match="W <= 80"):
        step.run(x, w)


def test_step7_search_variants_cover_the_full_shape():
    """Every variant bench/conv3d_step7_search.py runs on the GPU takes the task's full shape (W = 80) on both
    vendors, fits the launcher's 48 KiB of shared memory, and its emulation agrees with F.conv3d at W = 80."""
    spec = importlib.util.spec_from_file_location("step7_search", HERE.parents[2] / "bench" / "conv3d_step7_search.py")
    search = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(search)
    emu, _ = _step7()
    assert set(search.DEFAULT) <= set(search.VARIANTS)
    for name, defines in search.VARIANTS.items():
        src = search.variant_source(defines)
        for target in ("nvidia", "amd"):
            cf = emu.config(src, target)
            assert cf["WMAX"] >= 80 and 80 % cf["TILEW"] == 0 and cf["SMEM_BYTES"] <= 48 * 1024, (name, target, cf)
        x, w = _inputs(seed=5, C=1, D=5, H=5, W=80)
        y = emu.emulate(x.double().numpy(), w.double().numpy(), src, "nvidia")
        np.testing.assert_allclose(y, F.conv3d(x.double(), w.double(), padding=(0, 2, 2), groups=1)[0].numpy(),
                                   rtol=1e-12, atol=1e-12, err_msg=name)
        ways = emu.bank_conflicts(src, 80)  # NVIDIA: B reads conflict-free; output-tile writes and reads at most 2-way
        assert ways["b_read"] == 1 and ways["c_write"] <= 2 and ways["flush_read"] <= 2, (name, ways)


def test_step7_search_lessons_name_only_labels_the_run_made():
    """record_note refuses a label the journal does not hold: a lesson about a variant the run did not verify goes
    to the task, named in its text; one about a verified variant keeps its label."""
    spec = importlib.util.spec_from_file_location("step7_search", HERE.parents[2] / "bench" / "conv3d_step7_search.py")
    search = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(search)
    notes = [search.lesson_note(lesson, {"v23"}) for lesson in search.LESSONS]
    assert len(notes) == len(search.LESSONS)
    for lesson, note in zip(search.LESSONS, notes):
        assert note["task"] == "conv3d_depthwise" and note["evidence"]["value"] == lesson["ms"]
        if lesson["variant"] == "v23":
            assert note["experiment"] == "conv3d/step7/v23" and note["text"] == lesson["text"]
        else:
            assert "experiment" not in note and note["text"].startswith(f"step 7 {lesson['variant']}: ")


def test_step7_emulation_catches_a_shared_output_tile_with_two_pairs_a_barrier(monkeypatch):
    """With 2 pairs a barrier, a block's flush and the next block's writes share an interval: the emulation runs
    them in the worst order, so one output tile for both shows (the kernel has two)."""
    emu, src = _step7()
    src = _step7_variant(src, {"PPS": 2, "STAGES": 4})
    x, w = _inputs(seed=4, C=1, D=5, H=9, W=16)
    ref = F.conv3d(x.double(), w.double(), padding=(0, 2, 2), groups=1)[0].numpy()
    np.testing.assert_allclose(emu.emulate(x.double().numpy(), w.double().numpy(), src), ref, rtol=1e-12, atol=1e-12)
    monkeypatch.setattr(emu, "_tile", lambda b, cf: 0)  # every block into the first output tile
    y = emu.emulate(x.double().numpy(), w.double().numpy(), src)
    assert np.abs(y - ref).max() > 1e-3


def test_step7_bank_conflict_count_sees_a_bad_plane_stride(monkeypatch):
    emu, src = _step7()
    cf = emu.config(src)
    assert emu.bank_conflicts(src, 80)["b_read"] == 1
    # without the padding, a plane is 2 rows of 96 elements = 96 words = 0 mod 32: the 8 planes of a B read share banks
    monkeypatch.setattr(emu, "config", lambda s, target="nvidia": dict(cf, PLANEE=2 * cf["ROWE"]))
    assert emu.bank_conflicts(src, 80)["b_read"] >= 4


def test_step7_swizzled_output_tile_is_conflict_free():
    """kernel.cu's defaults: the C-fragment writes and the flush's 16-byte reads of the swizzled output tile each hit
    every bank once; the padded tile (OSWZ 0) is 2-way for both."""
    emu, src = _step7()
    assert emu.config(src)["OSW"] == 1
    assert emu.bank_conflicts(src, 80) == {"b_read": 1, "c_write": 1, "flush_read": 1}
    assert emu.bank_conflicts(_step7_variant(src, {"OSWZ": 0}), 80) == {"b_read": 1, "c_write": 2, "flush_read": 2}


def test_step7_emulation_catches_a_flush_that_does_not_undo_the_swizzle(monkeypatch):
    emu, src = _step7()
    x, w = _inputs(seed=6, C=1, D=5, H=6, W=16)
    ref = F.conv3d(x.double(), w.double(), padding=(0, 2, 2), groups=1)[0].numpy()
    np.testing.assert_allclose(emu.emulate(x.double().numpy(), w.double().numpy(), src), ref, rtol=1e-12, atol=1e-12)
    fo = emu.flush_offset
    monkeypatch.setattr(emu, "flush_offset", lambda tid, cf: (fo(tid, cf)[0], False))  # the halves left swapped
    y = emu.emulate(x.double().numpy(), w.double().numpy(), src)
    assert np.abs(y - ref).max() > 1e-3


def test_step7_search_never_overwrites_an_earlier_runs_results(tmp_path):
    """A second run of the search on the same date writes beside the first run's files (which a README cites),
    and keeps one name for the whole run."""
    spec = importlib.util.spec_from_file_location("step7_search", HERE.parents[2] / "bench" / "conv3d_step7_search.py")
    search = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(search)
    base = tmp_path / "conv3d_step7_search_cpu_2026-11-27"
    assert search.fresh_stem(base, (".json", ".md")) == base  # nothing there yet
    search._STEMS.clear()
    base.with_suffix(".md").write_text("cited")
    (tmp_path / "conv3d_step7_search_cpu_2026-11-27_run2.json").write_text("{}")
    stem = search.fresh_stem(base, (".json", ".md"))
    assert stem.name == "conv3d_step7_search_cpu_2026-11-27_run3"
    stem.with_suffix(".md").write_text("this run")
    assert search.fresh_stem(base, (".json", ".md")) == stem  # the same run keeps its name
    assert base.with_suffix(".md").read_text() == "cited"
