"""llmm.distributed.ExpertParallelMoE on the CPU over torch.distributed's gloo backend (issue 51):
2 and 4 processes, experts split contiguously (unevenly over 4 ranks), against the same layer in
one process bitwise and llmm.moe_ffn over all experts within the rounding of the slot rows; ids
outside [0, E), a NaN weight on one, a rank without tokens, hot routing; the refusals."""
import os
import sys

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

import llmm  # noqa: E402
import llmm.distributed as ld  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
import _ep_worker as W  # noqa: E402


def run_ranks(world, dtype_name, tmp_path):
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    init_file = str(tmp_path / "init")
    procs = [ctx.Process(target=W.work, args=(r, world, init_file, str(tmp_path), dtype_name)) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=180)
    for p in procs:
        if p.is_alive():
            p.terminate()
    codes = [p.exitcode for p in procs]
    assert codes == [0] * world, "ranks exited with %s" % codes
    return [torch.load(str(tmp_path / ("out%d.pt" % r))) for r in range(world)]


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("dtype_name", ["bfloat16", "float32"])
def test_ranks_match_one_process_bitwise(world, dtype_name, tmp_path):
    outs = run_ranks(world, dtype_name, tmp_path)
    dtype = getattr(torch, dtype_name)
    w13, w2 = W.model(dtype)
    one = ld.ExpertParallelMoE(w13, w2, W.E)  # torch.distributed not initialized here: one process
    for rank, out in enumerate(outs):
        x, ids, wts = W.tokens(rank, dtype)
        ref = one(x, ids, wts)
        assert out.dtype == dtype and out.shape == x.shape
        assert torch.equal(out.isnan(), ref.isnan()), rank
        assert torch.equal(torch.nan_to_num(out), torch.nan_to_num(ref)), "rank %d of %d differs" % (rank, world)
        full = llmm.moe_ffn(x, w13, w2, ids, wts)  # all experts in one call: rounding differs only
        assert torch.equal(out.isnan(), full.isnan()), rank
        if x.shape[0]:
            a, b = torch.nan_to_num(out).double(), torch.nan_to_num(full).double()
            tol = 2 ** -6 if dtype == torch.bfloat16 else 1e-5
            assert float((a - b).abs().max()) <= tol * float(b.abs().max()), rank


def test_fp8_experts_over_two_ranks(tmp_path):
    outs = run_ranks(2, "fp8", tmp_path)
    c13, s13, c2, s2 = W.fp8_model()
    one = ld.ExpertParallelMoE(c13, c2, W.E, w_gate_up_scale=s13, w_down_scale=s2)
    for rank, out in enumerate(outs):
        x, ids, wts = W.tokens(rank, torch.bfloat16)
        ref = one(x, ids, wts)
        assert torch.equal(torch.nan_to_num(out), torch.nan_to_num(ref)) and torch.equal(out.isnan(), ref.isnan())
        full = llmm.moe_ffn(x, c13, c2, ids, wts, w_gate_up_scale=s13, w_down_scale=s2)
        if x.shape[0]:
            a, b = torch.nan_to_num(out).double(), torch.nan_to_num(full).double()
            assert float((a - b).abs().max()) <= 2 ** -6 * float(b.abs().max()), rank


def test_a_nan_weight_on_a_dropped_id_still_propagates():
    dtype = torch.float32
    w13, w2 = W.model(dtype)
    x, ids, wts = W.tokens(1, dtype)
    out = ld.ExpertParallelMoE(w13, w2, W.E)(x, ids, wts)
    assert out[3].isnan().all() and not out[0].isnan().any()
    assert torch.equal(out.isnan(), llmm.moe_ffn(x, w13, w2, ids, wts).isnan())


def test_refusals():
    w13, w2 = W.model(torch.float32)
    with pytest.raises(llmm.Error, match=r"hold \[6\] experts \(6 in all\) but n_experts is 8"):
        ld.ExpertParallelMoE(w13, w2, 8)
    with pytest.raises(llmm.Error, match="w_gate_up holds 6 experts but w_down 5"):
        ld.ExpertParallelMoE(w13, w2[:5], 6)
    moe = ld.ExpertParallelMoE(w13, w2, 6)
    x, ids, wts = W.tokens(0, torch.float32)
    with pytest.raises(llmm.Error, match="must be integers"):
        moe(x, ids.float(), wts)
    with pytest.raises(llmm.Error, match=r"x must be \[m, hidden\]"):
        moe(x[:-1], ids, wts)


def test_split_and_environment():
    assert [ld.local_expert_range(6, 4, r) for r in range(4)] == [(0, 2), (2, 4), (4, 5), (5, 6)]
    assert [ld.local_expert_range(8, 2, r) for r in range(2)] == [(0, 4), (4, 8)]
    for k, v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
        assert os.environ[k] == v


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_masked_layout_rows_match_one_slot_ffn(dtype):
    w13, w2 = W.model(dtype)
    g = torch.Generator().manual_seed(5)
    max_m = 7
    x = torch.randn(W.E, max_m, W.HIDDEN, generator=g).to(dtype)
    counts = torch.tensor([0, 7, 3, 9, -2, 1])  # empty, full, partial, above max_m, negative, one
    out = ld.masked_experts_ffn(x, counts, w13, w2)
    assert out.shape == x.shape and out.dtype == dtype
    for e in range(W.E):
        n = max(0, min(int(counts[e]), max_m))
        assert torch.count_nonzero(out[e, n:]) == 0, e
        if n:
            ids = torch.full((n, 1), e, dtype=torch.int64)
            ref = llmm.moe_ffn(x[e, :n].contiguous(), w13, w2, ids, torch.ones(n, 1))
            assert torch.equal(out[e, :n], ref), e
    with pytest.raises(llmm.Error, match=r"x must be \[E_local, max_m, hidden\]"):
        ld.masked_experts_ffn(x[0], counts, w13, w2)
    with pytest.raises(llmm.Error, match="counts must be integers"):
        ld.masked_experts_ffn(x, counts.float(), w13, w2)
