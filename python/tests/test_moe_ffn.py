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


def f64(name, g):
    if name == "silu":
        return g / (1 + np.exp(-g))
    if name == "gelu_tanh":
        return 0.5 * g * (1 + np.tanh(math.sqrt(2 / math.pi) * (g + 0.044715 * g ** 3)))
    if name == "relu2":
        return np.where(g > 0, g, 0.0) ** 2
    erf = np.vectorize(math.erf)
    return 0.5 * g * (1 + erf(g / math.sqrt(2)))


def act64(name, h, alpha=1.702, limit=7.0):
    """vLLM's activations on one row h of w_gate_up @ x (+ bias), written from vLLM's definitions."""
    if name.endswith("_no_mul"):
        return f64(name[:-7], h)
    if name.startswith("swigluoai"):
        g, u = (h[::2], h[1::2]) if name == "swigluoai" else np.split(h, 2)
        g = np.minimum(g, limit)
        u = np.clip(u, -limit, limit)
        return (u + 1) * g / (1 + np.exp(-alpha * g))
    g, u = np.split(h, 2)
    return f64(name, g) * u


def ref64(x, wgu, wd, ids, tw, activation="silu", b1=None, b2=None, alpha=1.702, limit=7.0):
    x, wgu, wd, tw = (np.asarray(a, np.float64) for a in (x, wgu, wd, tw))
    m, top_k = ids.shape
    e_count = wgu.shape[0]
    out = np.zeros((m, wd.shape[1]))
    for t in range(m):
        for s in range(top_k):
            e = int(ids[t, s])
            if not 0 <= e < e_count:
                continue
            h = wgu[e] @ x[t] + (0 if b1 is None else np.asarray(b1[e], np.float64))
            y = wd[e] @ act64(activation, h, alpha, limit) + (0 if b2 is None else np.asarray(b2[e], np.float64))
            out[t] += tw[t, s] * y
    return out


ACTIVATIONS = ["silu", "gelu", "gelu_tanh", "relu2", "silu_no_mul", "gelu_no_mul", "gelu_tanh_no_mul", "relu2_no_mul",
               "swigluoai", "swigluoai_uninterleave"]


def gate_up_rows(activation, inter):
    return inter if activation.endswith("_no_mul") else 2 * inter


@pytest.mark.parametrize("activation", ["silu", "gelu_tanh", "gelu"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_numpy_matches_float64(activation, dtype):
    x, wgu, wd, ids, tw = case(dtype=dtype, seed=3)
    got = llmm.moe_ffn(x, wgu, wd, ids, tw, activation=activation)
    assert got.dtype == dtype and got.shape == x.shape
    want = ref64(x, wgu, wd, ids, tw, activation)
    tol = 1e-6 if dtype == np.float32 else 2e-3  # the output's one rounding (CPU: float64 inside)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("biases", [False, True])
def test_numpy_every_vllm_activation_with_and_without_biases(activation, biases):
    rng = np.random.default_rng(7)
    m, hidden, inter, top_k, experts = 5, 48, 24, 3, 6
    x, _, wd, ids, tw = case(m, hidden, inter, top_k, experts, seed=8)
    wgu = (rng.standard_normal((experts, gate_up_rows(activation, inter), hidden)) * 0.5 / math.sqrt(hidden)).astype(
        np.float32)
    b1 = rng.standard_normal((experts, wgu.shape[1])).astype(np.float32) if biases else None
    b2 = rng.standard_normal((experts, hidden)).astype(np.float16) if biases else None
    alpha, limit = 1.3, 0.35  # a limit the O(1) gate values cross: the clamps act
    got = llmm.moe_ffn(x, wgu, wd, ids, tw, activation=activation, alpha=alpha, limit=limit, bias_gate_up=b1,
                       bias_down=b2)
    want = ref64(x, wgu, wd, ids, tw, activation, b1, b2, alpha, limit)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-6, atol=1e-6)
    if activation.startswith("swigluoai"):  # the clamps changed the result
        assert not np.allclose(want, ref64(x, wgu, wd, ids, tw, activation, b1, b2, alpha, 1e6))


def test_swigluoai_reads_interleaved_rows():
    # The same experts with their gate and up rows interleaved give "swigluoai" what halves give
    # "swigluoai_uninterleave".
    x, wgu, wd, ids, tw = case(seed=9)
    inter = wd.shape[2]
    inter_rows = np.empty_like(wgu)
    inter_rows[:, 0::2], inter_rows[:, 1::2] = wgu[:, :inter], wgu[:, inter:]
    np.testing.assert_array_equal(llmm.moe_ffn(x, inter_rows, wd, ids, tw, activation="swigluoai"),
                                  llmm.moe_ffn(x, wgu, wd, ids, tw, activation="swigluoai_uninterleave"))


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
        (dict(activation="relu"), "activation must be one of 'silu', 'gelu', 'gelu_tanh', 'relu2' .* got 'relu'"),
        (dict(activation="swigluoai_no_mul"), "activation must be one of .* got 'swigluoai_no_mul'"),
        (dict(w_gate_up=wgu[:, :24], activation="silu_no_mul", w_down=wd[:, :, :12]),
         r"w_down must be \[n_experts, hidden, inter\] = \[6, 48, 24\]"),
        (dict(route="fast"), "route must be 'direct', 'grouped' or 'auto', got 'fast'"),
    ):
        args = dict(x=x, w_gate_up=wgu, w_down=wd, topk_ids=ids, topk_weights=tw)
        opts = {k: kw.pop(k) for k in ("activation", "route", "limit", "bias_down") if k in kw}
        args.update(kw)
        with pytest.raises(llmm.Error, match=match):
            llmm.moe_ffn(args["x"], args["w_gate_up"], args["w_down"], args["topk_ids"], args["topk_weights"], out=out,
                         **opts)
        assert np.isnan(out).all()
    with pytest.raises(llmm.Error, match="x must be"):
        llmm.moe_ffn(x[0], wgu, wd, ids, tw)
    for kw, match in ((dict(activation="swigluoai", limit=0.0), "swigluoai needs a finite alpha and a finite limit > 0"),
                      (dict(bias_down=np.zeros((6, 47), np.float32)),
                       r"bias_down must be a contiguous f32 / f16 / bf16 \[6, 48\] \(n_experts, hidden\), got f32\[6, 47\]")):
        with pytest.raises(llmm.Error, match=match):
            llmm.moe_ffn(x, wgu, wd, ids, tw, out=out, **kw)
        assert np.isnan(out).all()
    with pytest.raises(TypeError, match="alpha must be a float, got str"):
        llmm.moe_ffn(x, wgu, wd, ids, tw, alpha="1")
    with pytest.raises(TypeError, match="fuse_decode must be a bool, got int"):
        llmm.moe_ffn(x, wgu, wd, ids, tw, fuse_decode=1)
    # fuse_decode=False is the composition: on the CPU the same reference either way.
    np.testing.assert_array_equal(llmm.moe_ffn(x, wgu, wd, ids, tw, fuse_decode=False), llmm.moe_ffn(x, wgu, wd, ids, tw))


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
    for kw, match in ((dict(activation="swiglu"), "activation must be one of"),
                      (dict(apply_router_weight_on_input=True), r"apply_router_weight_on_input=True needs top_k 1"),
                      (dict(expert_map=torch.arange(6.0)), "expert_map must be a 1-D int32 / int64 tensor"),
                      (dict(expert_map=torch.arange(6), global_num_experts=7), "global_num_experts 7 differs from "
                                                                               "expert_map's length 6"),
                      (dict(global_num_experts=12), "global_num_experts 12 differs from w1's 6 experts"),
                      (dict(use_fp8_w8a8=True, w1_bias=None), "quantized or biased experts are not supported "
                                                              r"\(given: use_fp8_w8a8\)")):
        with pytest.raises(llmm.Error, match=match):
            T.fused_experts(tx, twgu, twd, ttw, tids, **kw)
    assert T.fused_experts(tx, twgu, twd, ttw, tids, use_fp8_w8a8=False, w1_scale=None).shape == tx.shape


def test_fused_experts_biases_expert_map_and_router_weight_on_input():
    torch = need_torch()
    import llmm.torch_ops as T

    x, wgu, wd, ids, tw = case(seed=11, oor=False)
    tx, twgu, twd, tids, ttw = (torch.from_numpy(a) for a in (x, wgu, wd, ids, tw))
    g = torch.Generator().manual_seed(3)
    b1, b2 = torch.randn(6, 48, generator=g), torch.randn(6, 48, generator=g).to(torch.bfloat16)
    want = ref64(x, wgu, wd, ids, tw, "swigluoai", b1.numpy(), b2.float().numpy())
    got = T.fused_experts(tx, twgu, twd, ttw, tids, activation="swigluoai", w1_bias=b1, w2_bias=b2)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6)
    # Expert parallelism as vLLM maps it: this rank holds global experts 6..11 as local 0..5; ids
    # of the other rank's experts contribute nothing, as do ids outside [0, 12).
    expert_map = torch.cat([torch.full((6,), -1), torch.arange(6)]).to(torch.int32)
    gids = tids.long() + 6
    gids[0, 0] = 2      # another rank's expert
    gids[1, 1] = 40     # outside the global range
    gids[2, 2] = -3
    local = ids.copy()
    local[0, 0], local[1, 1], local[2, 2] = -1, -1, -1
    got = T.fused_experts(tx, twgu, twd, ttw, gids, expert_map=expert_map, global_num_experts=12)
    np.testing.assert_allclose(got.numpy(), ref64(x, wgu, wd, local, tw), rtol=1e-6, atol=1e-6)
    # The routing weight on the input (top_k 1): x scaled before w1, the output unweighted.
    w1k = ttw[:, :1].contiguous()
    got = T.fused_experts(tx, twgu, twd, w1k, tids[:, :1].contiguous(), apply_router_weight_on_input=True)
    want = ref64(x * tw[:, :1], wgu, wd, ids[:, :1], np.ones_like(tw[:, :1]))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
    # Through torch.compile: the op with biases and a non-default activation.
    f = torch.compile(lambda *a: T.moe_ffn(*a, activation="relu2_no_mul", bias_down=b2), fullgraph=True,
                      backend="eager")
    w_no_mul = twgu[:, :24].contiguous()
    np.testing.assert_allclose(f(tx, w_no_mul, twd, tids, ttw).numpy(),
                               ref64(x, w_no_mul.numpy(), wd, ids, tw, "relu2_no_mul", None, b2.float().numpy()),
                               rtol=1e-6, atol=1e-6)


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
@pytest.mark.parametrize("activation", ["relu2", "silu_no_mul", "swigluoai", "swigluoai_uninterleave"])
@pytest.mark.parametrize("m", [2, 300])
def test_cuda_activations_and_biases(activation, m):
    torch = need_cuda_torch()
    import llmm.torch_ops as T

    hidden, inter, experts = 256, 128, 16
    x, _, wd, ids, tw = case(m=m, hidden=hidden, inter=inter, top_k=4, experts=experts, seed=m + 1)
    rng = np.random.default_rng(m)
    wgu = (rng.standard_normal((experts, gate_up_rows(activation, inter), hidden)) * 0.5 / math.sqrt(hidden))
    b1 = rng.standard_normal((experts, wgu.shape[1])) * 0.3
    b2 = rng.standard_normal((experts, hidden)) * 0.3
    dev = dict(device="cuda", dtype=torch.bfloat16)
    tx, twgu, twd, tb1, tb2 = (torch.from_numpy(np.asarray(a, np.float32)).to(**dev) for a in (x, wgu, wd, b1, b2))
    tids, ttw = torch.from_numpy(ids).cuda(), torch.from_numpy(tw).cuda()
    got = T.fused_experts(tx, twgu, twd, ttw, tids, activation=activation, w1_bias=tb1, w2_bias=tb2)
    want = ref64(*(t.float().cpu().numpy() for t in (tx, twgu, twd)), ids, tw, activation, tb1.float().cpu().numpy(),
                 tb2.float().cpu().numpy())
    scale = np.abs(want).max()
    np.testing.assert_allclose(got.float().cpu().numpy(), want, rtol=3e-2, atol=3e-2 * scale)


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
