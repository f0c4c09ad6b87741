"""llmm.moe_ffn (NumPy and torch), torch.ops.llmm.moe_ffn (eager and torch.compile) and the vLLM-style
fused_experts drop-in, against a float64 reference written here; refusals. CUDA tests skip without
a GPU (fail under LLMM_REQUIRE_GPU=1)."""
import math

import numpy as np
import pytest

import llmm
from conftest import need_cuda_torch, need_torch


def case(m=5, hidden=48, inter=24, top_k=3, experts=6, dtype=np.float32, seed=0, oor=True):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, hidden)).astype(dtype)
    wgu = (rng.standard_normal((experts, 2 * inter, hidden)) * 0.5 / math.sqrt(hidden)).astype(dtype)
    wd = (rng.standard_normal((experts, hidden, inter)) * 0.5 / math.sqrt(inter)).astype(dtype)
    ids = rng.integers(0, experts, (m, top_k)).astype(np.int32)
    if oor:
        ids[min(1, m - 1), 0] = experts  # out of range: contributes nothing
        ids[-1, -1] = -1
    tw = rng.random((m, top_k)).astype(np.float32)
    return x, wgu, wd, ids, tw


def act64(name, g, u):
    if name == "silu":
        return g / (1 + np.exp(-g)) * u
    if name == "gelu_tanh":
        return 0.5 * g * (1 + np.tanh(math.sqrt(2 / math.pi) * (g + 0.044715 * g ** 3))) * u
    erf = np.vectorize(math.erf)
    return 0.5 * g * (1 + erf(g / math.sqrt(2))) * u


def ref64(x, wgu, wd, ids, tw, activation="silu"):
    x, wgu, wd, tw = (np.asarray(a, np.float64) for a in (x, wgu, wd, tw))
    m, top_k = ids.shape
    e_count, two_i, _ = wgu.shape
    inter = two_i // 2
    out = np.zeros((m, wd.shape[1]))
    for t in range(m):
        for s in range(top_k):
            e = int(ids[t, s])
            if not 0 <= e < e_count:
                continue
            h = wgu[e] @ x[t]
            out[t] += tw[t, s] * (wd[e] @ act64(activation, h[:inter], h[inter:]))
    return out


@pytest.mark.parametrize("activation", ["silu", "gelu_tanh", "gelu"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_numpy_matches_float64(activation, dtype):
    x, wgu, wd, ids, tw = case(dtype=dtype, seed=3)
    got = llmm.moe_ffn(x, wgu, wd, ids, tw, activation=activation)
    assert got.dtype == dtype and got.shape == x.shape
    want = ref64(x, wgu, wd, ids, tw, activation)
    tol = 1e-6 if dtype == np.float32 else 2e-3  # the output's one rounding (CPU: float64 inside)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


def test_numpy_out_ids_dtypes_and_weights_dtypes():
    x, wgu, wd, ids, tw = case(seed=4)
    want = ref64(x, wgu, wd, ids, tw)
    for ids_d in (ids.astype(np.int64), ids.astype(np.uint32)):
        for tw_d in (tw, tw.astype(np.float16)):
            out = np.full(x.shape, np.nan, np.float32)
            assert llmm.moe_ffn(x, wgu, wd, ids_d, tw_d, out=out) is out
            np.testing.assert_allclose(out, ref64(x, wgu, wd, ids_d, tw_d), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(llmm.moe_ffn(x, wgu, wd, ids, tw), want, rtol=1e-6, atol=1e-6)


def test_refusals_name_the_values_and_write_nothing():
    x, wgu, wd, ids, tw = case()
    out = np.full(x.shape, np.nan, np.float32)
    for kw, match in (
        (dict(w_down=wd[:, :, :-1]), r"w_down must be \[n_experts, hidden, inter\] = \[6, 48, 24\]"),
        (dict(topk_weights=tw[:, :2]), r"topk_weights must be \[m, top_k\] = \[5, 3\] like ids"),
        (dict(topk_ids=ids.astype(np.float32)), "ids must be u32, i32 or i64, got f32"),
        (dict(w_gate_up=wgu[:, :-1]), r"w_gate_up must be \[n_experts, 2 \* inter, hidden\]"),
        (dict(activation="relu"), "activation must be 'silu', 'gelu_tanh' or 'gelu', got 'relu'"),
        (dict(route="fast"), "route must be 'direct', 'grouped' or 'auto', got 'fast'"),
    ):
        args = dict(x=x, w_gate_up=wgu, w_down=wd, topk_ids=ids, topk_weights=tw)
        opts = {k: kw.pop(k) for k in ("activation", "route") if k in kw}
        args.update(kw)
        with pytest.raises(llmm.Error, match=match):
            llmm.moe_ffn(args["x"], args["w_gate_up"], args["w_down"], args["topk_ids"], args["topk_weights"], out=out,
                         **opts)
        assert np.isnan(out).all()
    with pytest.raises(llmm.Error, match="x must be"):
        llmm.moe_ffn(x[0], wgu, wd, ids, tw)


def test_torch_op_eager_compile_and_fused_experts():
    torch = need_torch()
    import llmm.torch_ops as T

    x, wgu, wd, ids, tw = case(seed=5)
    tx, twgu, twd, tids, ttw = (torch.from_numpy(a) for a in (x, wgu, wd, ids, tw))
    want = ref64(x, wgu, wd, ids, tw)
    got = torch.ops.llmm.moe_ffn(tx, twgu, twd, tids.long(), ttw)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6)
    f = torch.compile(lambda *a: T.moe_ffn(*a, activation="gelu"), fullgraph=True, backend="eager")
    np.testing.assert_allclose(f(tx, twgu, twd, tids, ttw).numpy(), ref64(x, wgu, wd, ids, tw, "gelu"), rtol=1e-6,
                               atol=1e-6)
    # vLLM's fused_experts semantics: w1 = [E, 2I, H] gate-then-up, w2 = [E, H, I]; inplace writes hidden_states
    np.testing.assert_allclose(T.fused_experts(tx, twgu, twd, ttw, tids).numpy(), want, rtol=1e-6, atol=1e-6)
    h = tx.clone()
    assert T.fused_experts(h, twgu, twd, ttw, tids, inplace=True) is h
    np.testing.assert_allclose(h.numpy(), want, rtol=1e-6, atol=1e-6)
    for kw, match in ((dict(activation="swigluoai"), "activation must be one of"),
                      (dict(apply_router_weight_on_input=True), "apply_router_weight_on_input"),
                      (dict(expert_map=torch.arange(6)), "expert_map"),
                      (dict(global_num_experts=12), "global_num_experts 12"),
                      (dict(use_fp8_w8a8=True, w1_bias=None), "quantized or biased experts are not supported "
                                                              r"\(given: use_fp8_w8a8\)")):
        with pytest.raises(llmm.Error, match=match):
            T.fused_experts(tx, twgu, twd, ttw, tids, **kw)
    assert T.fused_experts(tx, twgu, twd, ttw, tids, use_fp8_w8a8=False, w1_scale=None).shape == tx.shape


@pytest.mark.cuda
@pytest.mark.parametrize("m", [1, 4, 16, 100, 1000])
def test_cuda_bf16_matches_float64(m):
    torch = need_cuda_torch()
    x, wgu, wd, ids, tw = case(m=m, hidden=256, inter=128, top_k=4, experts=16, seed=m)
    dev = dict(device="cuda", dtype=torch.bfloat16)
    tx, twgu, twd = (torch.from_numpy(a).to(**dev) for a in (x, wgu, wd))
    tids, ttw = torch.from_numpy(ids).cuda(), torch.from_numpy(tw).cuda()
    got = llmm.moe_ffn(tx, twgu, twd, tids, ttw)
    assert got.dtype == torch.bfloat16
    want = ref64(tx.float().cpu().numpy(), twgu.float().cpu().numpy(), twd.float().cpu().numpy(), ids, tw)
    scale = np.abs(want).max()
    np.testing.assert_allclose(got.float().cpu().numpy(), want, rtol=3e-2, atol=3e-2 * scale)
    assert torch.equal(got, torch.ops.llmm.moe_ffn(tx, twgu, twd, tids, ttw))  # deterministic


@pytest.mark.cuda
def test_cuda_graph_capture_after_warm_up():
    torch = need_cuda_torch()
    x, wgu, wd, ids, tw = case(m=32, hidden=128, inter=64, top_k=4, experts=8, seed=9)
    dev = dict(device="cuda", dtype=torch.bfloat16)
    tx, twgu, twd = (torch.from_numpy(a).to(**dev) for a in (x, wgu, wd))
    tids, ttw = torch.from_numpy(ids).cuda(), torch.from_numpy(tw).cuda()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        eager = llmm.moe_ffn(tx, twgu, twd, tids, ttw)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        out = llmm.moe_ffn(tx, twgu, twd, tids, ttw)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)


def test_ternary_experts_equal_the_dense_reference_of_their_values():
    x, wgu, wd, ids, tw = case(hidden=256, inter=128, experts=4, seed=8)
    e, hidden, inter = 4, 256, 128
    gu_aos = llmm.quantize_tq2(wgu.reshape(e * 2 * inter, hidden), "absmax")
    dn_aos = llmm.quantize_tq2(wd.reshape(e * hidden, inter), "absmax")
    gu = llmm.upload_tq2_experts(gu_aos, e, 2 * inter, hidden)
    dn = llmm.upload_tq2_experts(dn_aos, e, hidden, inter)
    gu_dense = llmm.dequantize_tq2(gu_aos, e * 2 * inter, hidden).reshape(e, 2 * inter, hidden)
    dn_dense = llmm.dequantize_tq2(dn_aos, e * hidden, inter).reshape(e, hidden, inter)
    got = llmm.moe_ffn(x, gu, dn, ids, tw)
    np.testing.assert_array_equal(got, llmm.moe_ffn(x, gu_dense, dn_dense, ids, tw))  # both float64 references
    np.testing.assert_allclose(got, ref64(x, gu_dense, dn_dense, ids, tw), rtol=1e-6, atol=1e-6)
    with pytest.raises(TypeError, match="must both be arrays or both llmm.TernaryWeight"):
        llmm.moe_ffn(x, gu, dn_dense, ids, tw)
    with pytest.raises(llmm.Error, match="ternary experts take route auto"):
        llmm.moe_ffn(x, gu, dn, ids, tw, route="direct")
