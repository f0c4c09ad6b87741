"""FP8 e4m3 experts through the Python package: llmm.matmul_id(..., weight_scale=) and
llmm.moe_ffn(..., w_gate_up_scale=, w_down_scale=) on the CPU backend against float64 NumPy references
of the dequantized weights (experts from llmm.quantize_fp8, every scale kind, sizes not multiples of
128, ids with repeats and out-of-range ids), the kind read off each scale's shape; torch CPU tensors
(torch.float8_e4m3fn experts, torch.ops.llmm.moe_ffn, vLLM's fused_experts with use_fp8_w8a8) where
torch is installed; refusals that name the problem and leave out untouched."""
import math

import numpy as np
import pytest

import llmm
from conftest import need_torch

KINDS = ("tensor", "channel", "block")
U32 = 2.0 ** -24  # f32 unit roundoff


def rand(rng, *shape):
    """Random non-zero values over a few binades, both signs."""
    x = (rng.random(shape) + 0.25) * np.exp2(rng.integers(-2, 3, shape)) * np.where(rng.random(shape) < 0.5, -1, 1)
    return x.astype(np.float32)


def expand_scales(scales, kind, n, k):
    """Each weight's scale of one expert, float64 [n, k]."""
    s = np.asarray(scales, np.float64)
    if kind == "block":
        return np.repeat(np.repeat(s.reshape(-(-n // 128), -(-k // 128)), 128, axis=0)[:n], 128, axis=1)[:, :k]
    return np.broadcast_to(s.reshape(-1, 1) if kind == "channel" else s.reshape(1, 1), (n, k))


def experts(rng, e, n, k, kind, spread=0.5):
    """(codes uint8 [e, n, k], scales float32 [e, sr, sc], the exact dequantized experts in float64)
    of random experts quantized one by one with llmm.quantize_fp8; rows and experts span different
    magnitudes, so the scales differ between channels, blocks and experts."""
    codes, scales, wq = [], [], []
    for j in range(e):
        w = rand(rng, n, k) * np.exp2(rng.integers(-3, 4, (n, 1))).astype(np.float32) * np.float32(2.0 ** (j % 3 - 1))
        w *= np.float32(spread / math.sqrt(k))
        c, s = llmm.quantize_fp8(w, scale=kind)
        codes.append(c), scales.append(s)
        wq.append(llmm.from_fp8_bits(c).astype(np.float64) * expand_scales(s, kind, n, k))  # exact
    return np.stack(codes), np.stack(scales), np.stack(wq)


def routing(rng, m, top_k, e):
    """ids [m, top_k] int32 with a repeated expert in one token and out-of-range ids (-1, e), and
    random routing weights."""
    ids = rng.integers(0, e, (m, top_k)).astype(np.int32)
    ids[0, :2] = ids[0, 0]  # the same expert twice in one token
    if m > 1:
        ids[1, 0] = e  # out of range: a zero row / no contribution
        ids[-1, -1] = -1
    return ids, (rng.random((m, top_k)) + 0.1).astype(np.float32)


def check_close(y, ref, bound, unit):
    """y within its dtype's rounding of the float64 reference (plus float64 noise far below it)."""
    err = np.abs(np.asarray(y, np.float64) - ref)
    tol = unit * np.abs(ref) + 1e-13 * bound + 1e-300
    assert np.all(err <= tol), f"max err / tol {np.max(err / tol)} at {np.unravel_index(np.argmax(err / tol), err.shape)}"
    assert np.abs(ref).max() > 0  # non-trivial data


def matmul_id_ref(wq, x, ids, layout="shared"):
    """out[t, s] = wq[ids[t, s]] @ x(t, s) in float64 (zero rows for out-of-range ids), and the bound
    sum |w| |x| of each output."""
    m, top_k = ids.shape
    e, n, k = wq.shape
    x64 = np.asarray(x, np.float64).reshape(m, -1, k)
    ref, bound = np.zeros((m, top_k, n)), np.zeros((m, top_k, n))
    for t in range(m):
        for s in range(top_k):
            if 0 <= ids[t, s] < e:
                xi = x64[t, 0 if layout == "shared" else s]
                ref[t, s] = wq[ids[t, s]] @ xi
                bound[t, s] = np.abs(wq[ids[t, s]]) @ np.abs(xi)
    return ref, bound


def silu(g):
    return g / (1 + np.exp(-g))


def moe_ref(x, wgu, wd, ids, tw):
    """The SiLU-gated expert FFN in float64: gate rows then up rows of wgu[e], silu(g) * u, wd[e], the
    weighted sum over the slots; and a magnitude bound of each output."""
    x64, tw64 = np.asarray(x, np.float64), np.asarray(tw, np.float64)
    m, top_k = ids.shape
    e, two_i, hidden = wgu.shape
    inter = two_i // 2
    out, bound = np.zeros((m, hidden)), np.zeros((m, hidden))
    for t in range(m):
        for s in range(top_k):
            j = int(ids[t, s])
            if not 0 <= j < e:
                continue
            h = wgu[j] @ x64[t]
            a = silu(h[:inter]) * h[inter:]
            out[t] += tw64[t, s] * (wd[j] @ a)
            bound[t] += tw64[t, s] * (np.abs(wd[j]) @ np.abs(a))
    return out, bound


def scale_variants(scales, kind):
    """Every accepted shape of one set of scales [E, sr, sc] for its kind."""
    e = scales.shape[0]
    if kind == "tensor":
        return [scales, scales.reshape(e), scales.reshape(e, 1)]
    if kind == "channel":
        return [scales, scales.reshape(e, -1)]
    return [scales]


# ---------------------------------------------------------------------------------------------
# matmul_id on FP8 experts (CPU backend: the float64 reference, rounded once into out)

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("e,n,k,m,top_k", [(4, 200, 136, 6, 3), (3, 129, 300, 1, 2), (5, 40, 260, 9, 4)])
def test_matmul_id_matches_float64(kind, e, n, k, m, top_k):
    rng = np.random.default_rng(e * 10000 + n * 10 + k + m)
    codes, scales, wq = experts(rng, e, n, k, kind)
    x = rand(rng, m, k)
    ids, _ = routing(rng, m, top_k, e)
    ref, bound = matmul_id_ref(wq, x, ids)
    first = None
    for s in scale_variants(scales, kind):
        for route in ("auto", "direct", "grouped"):
            y = llmm.matmul_id(codes, x, ids, weight_scale=s, route=route, may_repeat=True)
            assert isinstance(y, np.ndarray) and y.dtype == np.float32 and y.shape == (m, top_k, n)
            check_close(y, ref, bound, U32)
            if first is None:
                first = y
            assert np.array_equal(y, first)  # one reference: the same bits whatever the shape or route
    if m > 1:
        assert not y[1, 0].any() and not y[-1, -1].any()  # out-of-range ids: zero rows
    assert np.array_equal(y[0, 0], y[0, 1])  # a repeated expert: the same row twice


@pytest.mark.parametrize("kind", KINDS)
def test_matmul_id_slotted_ml_dtypes_out_and_half_x(kind):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(21)
    e, n, k, m, top_k = 5, 200, 136, 4, 3
    codes, scales, wq = experts(rng, e, n, k, kind)
    ids, _ = routing(rng, m, top_k, e)
    xs = rand(rng, m, top_k, k)  # slotted: slot s of token t reads xs[t, s]
    ref, bound = matmul_id_ref(wq, xs, ids, layout="slotted")
    out = np.full((m, top_k, n), np.nan, np.float32)
    got = llmm.matmul_id(codes.view(ml_dtypes.float8_e4m3fn), xs, ids, out=out, layout="slotted", weight_scale=scales)
    assert got is out
    check_close(out, ref, bound, U32)
    # float16 x, output in x's dtype: one rounding to f16
    xh = rand(rng, m, k).astype(np.float16)
    refh, boundh = matmul_id_ref(wq, xh, ids)
    yh = llmm.matmul_id(codes, xh, ids, weight_scale=scales, out_dtype="float16")
    assert yh.dtype == np.float16
    check_close(yh, refh, boundh, 2.0 ** -11)


def test_matmul_id_tensor_kind_wins_where_shapes_coincide():
    """n, k <= 128: block scales [E, 1, 1] are one value per expert, read as per tensor (the same values)."""
    rng = np.random.default_rng(5)
    codes, scales, wq = experts(rng, 3, 100, 120, "block")
    assert scales.shape == (3, 1, 1)
    x = rand(rng, 4, 120)
    ids, _ = routing(rng, 4, 2, 3)
    ref, bound = matmul_id_ref(wq, x, ids)
    check_close(llmm.matmul_id(codes, x, ids, weight_scale=scales), ref, bound, U32)


# ---------------------------------------------------------------------------------------------
# moe_ffn on FP8 experts

@pytest.mark.parametrize("kind_gu,kind_d", [("tensor", "tensor"), ("channel", "channel"), ("block", "block"),
                                            ("block", "channel"), ("tensor", "block")])
def test_moe_ffn_matches_float64(kind_gu, kind_d):
    rng = np.random.default_rng(len(kind_gu) * 7 + len(kind_d))
    e, hidden, inter, m, top_k = 6, 136, 100, 7, 3
    cgu, sgu, wgu = experts(rng, e, 2 * inter, hidden, kind_gu)  # [E, 200, 136]: gate rows, then up rows
    cd, sd, wd = experts(rng, e, hidden, inter, kind_d)  # [E, 136, 100]
    x = rand(rng, m, hidden)
    ids, tw = routing(rng, m, top_k, e)
    ref, bound = moe_ref(x, wgu, wd, ids, tw)
    y = llmm.moe_ffn(x, cgu, cd, ids, tw, w_gate_up_scale=sgu, w_down_scale=sd)
    assert isinstance(y, np.ndarray) and y.dtype == np.float32 and y.shape == (m, hidden)
    check_close(y, ref, bound, 2 * U32)
    for s1 in scale_variants(sgu, kind_gu):
        for s2 in scale_variants(sd, kind_d):
            for route in ("direct", "grouped"):
                out = np.full((m, hidden), np.nan, np.float32)
                assert llmm.moe_ffn(x, cgu, cd, ids.astype(np.int64), tw, w_gate_up_scale=s1, w_down_scale=s2,
                                    route=route, out=out) is out
                assert np.array_equal(out, y)


def test_moe_ffn_half_x_and_ml_dtypes_codes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(8)
    e, hidden, inter, m, top_k = 4, 136, 100, 5, 2
    cgu, sgu, wgu = experts(rng, e, 2 * inter, hidden, "block")
    cd, sd, wd = experts(rng, e, hidden, inter, "channel")
    ids, tw = routing(rng, m, top_k, e)
    for dt, unit in ((np.float16, 2.0 ** -11), (ml_dtypes.bfloat16, 2.0 ** -8)):
        x = rand(rng, m, hidden).astype(dt)
        ref, bound = moe_ref(x.astype(np.float64), wgu, wd, ids, tw)
        y = llmm.moe_ffn(x, cgu.view(ml_dtypes.float8_e4m3fn), cd, ids, tw, w_gate_up_scale=sgu, w_down_scale=sd)
        assert y.dtype == dt and y.shape == (m, hidden)
        check_close(y.astype(np.float64), ref, bound, unit)


# ---------------------------------------------------------------------------------------------
# Refusals (NumPy)

def test_refusals_name_the_problem_and_write_nothing():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(9)
    e, n, k, m, top_k = 4, 200, 136, 3, 2
    codes, scales, _ = experts(rng, e, n, k, "block")
    x = rand(rng, m, k)
    ids, tw = routing(rng, m, top_k, e)
    out = np.full((m, top_k, n), np.nan, np.float32)
    f8 = codes.view(ml_dtypes.float8_e4m3fn)

    with pytest.raises(llmm.Error, match=r"weights are float8_e4m3fn: FP8 experts need their float32 scales "
                                         r"\(weight_scale: per tensor \[E\]"):
        llmm.matmul_id(f8, x, ids, out=out)
    # uint8 codes without scales: the library refuses u8 weights
    with pytest.raises(llmm.Error, match=r"weights must be f32, f16, bf16 or f8e4m3 \(with scales\), got u8"):
        llmm.matmul_id(codes, x, ids, out=out)
    for bad in (scales[:, :1], scales[:-1], scales.reshape(e, -1), np.ones((e, n + 1, 1), np.float32)):
        with pytest.raises(ValueError, match=rf"weight_scale of shape \[.*\] fits no scale kind of 4 FP8 experts of "
                                             rf"\[200, 136\]: tensor \[4\] / \[4, 1\] / \[4, 1, 1\], channel \[4, 200\] "
                                             rf"/ \[4, 200, 1\] or block \[4, 2, 2\]") as info:
            llmm.matmul_id(codes, x, ids, out=out, weight_scale=bad)
        assert isinstance(info.value, llmm.Error)
    with pytest.raises(llmm.Error, match=r"block scales of 4 \[200, 136\] experts must be a contiguous f32 \[4, 2, 2\]"):
        llmm.matmul_id(codes, x, ids, out=out, weight_scale=scales.astype(np.float16))
    with pytest.raises(llmm.Error, match=r"must be a contiguous f32 \[4, 2, 2\], got f32\[4, 2, 2\] strides \[4, 1, 2\]"):
        llmm.matmul_id(codes, x, ids, out=out, weight_scale=np.ones((e, 2, 2), np.float32).transpose(0, 2, 1))
    with pytest.raises(llmm.Error, match="FP8 weight codes must be float8_e4m3fn"):
        llmm.matmul_id(codes.astype(np.float32), x, ids, out=out, weight_scale=scales)
    with pytest.raises(llmm.Error, match="weights has dtype float8_e5m2"):
        llmm.matmul_id(codes.view(ml_dtypes.float8_e5m2), x, ids, out=out, weight_scale=scales)
    with pytest.raises(llmm.Error, match=r"weights must be \[n_experts, n, k\]"):
        llmm.matmul_id(codes[0], x, ids, out=out, weight_scale=scales)
    bad_scales = scales.copy()
    bad_scales[1, 0, 0] = 0.0
    with pytest.raises(llmm.Error, match=r"scale 0 is 0 \(must be finite and > 0\)"):  # the CPU backend checks values
        llmm.matmul_id(codes, x, ids, out=out, weight_scale=bad_scales)
    assert np.isnan(out).all()

    # moe_ffn
    hidden, inter = 136, 100
    cgu, sgu, _ = experts(rng, e, 2 * inter, hidden, "channel")
    cd, sd, _ = experts(rng, e, hidden, inter, "tensor")
    xf = rand(rng, m, hidden)
    o = np.full((m, hidden), np.nan, np.float32)
    for kw, err, match in (
        (dict(w_gate_up_scale=sgu), llmm.Error, r"FP8 experts need both w_gate_up_scale and w_down_scale \(got only "
                                                r"w_gate_up_scale\)"),
        (dict(w_down_scale=sd), llmm.Error, r"\(got only w_down_scale\)"),
        (dict(w_gate_up_scale=sgu, w_down_scale=sgu), ValueError,
         r"w_down_scale of shape \[4, 200, 1\] fits no scale kind of 4 FP8 experts of \[136, 100\]"),
        (dict(w_gate_up_scale=sd[:, :, 0], w_down_scale=sd[:, 0]), None, None),  # [E, 1] and [E, 1]: per tensor, fine
    ):
        if err is None:
            llmm.moe_ffn(xf, cgu, cd, ids, tw, **kw)
            continue
        with pytest.raises(err, match=match):
            llmm.moe_ffn(xf, cgu, cd, ids, tw, out=o, **kw)
    with pytest.raises(ValueError, match=r"w_gate_up_scale of shape \[4, 3, 1\] fits no scale kind of 4 FP8 experts "
                                         r"of \[200, 136\]"):
        llmm.moe_ffn(xf, cgu, cd, ids, tw, out=o, w_gate_up_scale=np.ones((e, 3, 1), np.float32), w_down_scale=sd)
    with pytest.raises(llmm.Error, match=r"w_gate_up are float8_e4m3fn: FP8 experts need their float32 scales "
                                         r"\(w_gate_up_scale"):
        llmm.moe_ffn(xf, cgu.view(ml_dtypes.float8_e4m3fn), cd, ids, tw, out=o)
    with pytest.raises(llmm.Error, match=r"w_down are float8_e4m3fn: FP8 experts need their float32 scales "
                                         r"\(w_down_scale"):
        llmm.moe_ffn(xf, cgu.astype(np.float32), cd.view(ml_dtypes.float8_e4m3fn), ids, tw, out=o)
    aos = llmm.quantize_tq2(rng.standard_normal((e * 2 * 128, 128)).astype(np.float32))
    tgu = llmm.upload_tq2_experts(aos, e, 256, 128)
    with pytest.raises(llmm.Error, match="not of llmm.TernaryWeight stacks"):
        llmm.moe_ffn(xf, tgu, tgu, ids, tw, out=o, w_gate_up_scale=sgu, w_down_scale=sd)
    with pytest.raises(llmm.Error, match=r"w_gate_up's channel scales must be a contiguous f32 \[4, 200, 1\]"):
        llmm._llmm.moe_ffn(xf, cgu, cd, ids, tw, o, w_gate_up_scale=sgu.astype(np.float16), w_down_scale=sd,
                           gate_up_scale_kind="channel", down_scale_kind="tensor")
    with pytest.raises(llmm.Error, match="gate_up_scale_kind must be 'block', 'channel' or 'tensor', got 'row'"):
        llmm._llmm.moe_ffn(xf, cgu, cd, ids, tw, o, w_gate_up_scale=sgu, w_down_scale=sd, gate_up_scale_kind="row")
    assert np.isnan(o).all()


# ---------------------------------------------------------------------------------------------
# torch CPU tensors: float8_e4m3fn experts, the custom op, vLLM's fused_experts

def torch_experts(torch, gen, e, n, k, kind):
    """torch.float8_e4m3fn codes [e, n, k], float32 scales [e, sr, sc] (llmm.quantize_fp8 of torch
    tensors, expert by expert) and the exact dequantized experts in float64 (torch's own decode)."""
    cs, ss = [], []
    for j in range(e):
        w = torch.randn(n, k, generator=gen) * torch.exp2(torch.randint(-3, 4, (n, 1), generator=gen).float())
        c, s = llmm.quantize_fp8(w * (2.0 ** (j % 3 - 1)) * 0.5 / math.sqrt(k), scale=kind)
        cs.append(c), ss.append(s)
    codes, scales = torch.stack(cs), torch.stack(ss)
    assert codes.dtype == torch.float8_e4m3fn and scales.dtype == torch.float32
    return codes, scales, codes.double() * torch_expand(torch, scales, kind, n, k)


def torch_expand(torch, scales, kind, n, k):
    """vLLM's scale layouts read back to one float64 scale per weight, [E, n, k]."""
    s = scales.double()
    e = s.shape[0]
    if kind == "block":
        return s.repeat_interleave(128, 1)[:, :n].repeat_interleave(128, 2)[:, :, :k]
    return s.reshape(e, n, 1) if kind == "channel" else s.reshape(e, 1, 1)


def torch_moe_ref(torch, x, w1, w2, ids, tw):
    x, tw = x.double(), tw.double()
    m, top_k = ids.shape
    inter = w1.shape[1] // 2
    out = torch.zeros(m, w2.shape[1], dtype=torch.float64)
    for t in range(m):
        for s in range(top_k):
            j = int(ids[t, s])
            if not 0 <= j < w1.shape[0]:
                continue
            h = w1[j] @ x[t]
            out[t] += tw[t, s] * (w2[j] @ (torch.nn.functional.silu(h[:inter]) * h[inter:]))
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_torch_matmul_id_and_moe_ffn_op(kind):
    torch = need_torch()
    import llmm.torch_ops as T

    g = torch.Generator().manual_seed(31)
    e, hidden, inter, m, top_k = 5, 136, 100, 6, 3
    w1, s1, w1d = torch_experts(torch, g, e, 2 * inter, hidden, kind)
    w2, s2, w2d = torch_experts(torch, g, e, hidden, inter, kind)
    x = torch.randn(m, hidden, generator=g)
    ids = torch.randint(0, e, (m, top_k), generator=g)
    ids[0, 1] = ids[0, 0]
    ids[1, 0] = -1
    tw = torch.rand(m, top_k, generator=g) + 0.1

    # matmul_id: torch.float8_e4m3fn experts, float32 out on x's device
    y = llmm.matmul_id(w1, x, ids, weight_scale=s1)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32 and y.shape == (m, top_k, 2 * inter)
    ref = torch.einsum("tsnk,tk->tsn", w1d[ids.clamp(min=0)], x.double())
    ref[1, 0] = 0
    assert torch.allclose(y.double(), ref, rtol=2 * U32, atol=1e-12)
    assert torch.equal(llmm.matmul_id(w1.view(torch.uint8), x, ids, weight_scale=s1), y)

    # moe_ffn: the Python function, the custom op, its wrapper, torch.compile
    want = torch_moe_ref(torch, x, w1d, w2d, ids, tw)
    got = llmm.moe_ffn(x, w1, w2, ids, tw, w_gate_up_scale=s1, w_down_scale=s2)
    assert got.dtype == torch.float32 and got.shape == (m, hidden)
    assert torch.allclose(got.double(), want, rtol=4 * U32, atol=1e-12 * want.abs().max().item())
    assert torch.equal(torch.ops.llmm.moe_ffn(x, w1, w2, ids, tw, "silu", "auto", "exact", s1, s2), got)
    assert torch.equal(T.moe_ffn(x, w1, w2, ids, tw, w_gate_up_scale=s1, w_down_scale=s2), got)
    f = torch.compile(lambda *a: T.moe_ffn(*a[:5], w_gate_up_scale=a[5], w_down_scale=a[6]), fullgraph=True,
                      backend="eager")
    assert torch.equal(f(x, w1, w2, ids, tw, s1, s2), got)
    xb = x.bfloat16()
    yb = llmm.moe_ffn(xb, w1, w2, ids, tw, w_gate_up_scale=s1, w_down_scale=s2)
    assert yb.dtype == torch.bfloat16
    wantb = torch_moe_ref(torch, xb, w1d, w2d, ids, tw)
    assert torch.allclose(yb.double(), wantb, rtol=2.0 ** -8, atol=1e-12 * wantb.abs().max().item())
    with pytest.raises(llmm.Error, match="weights are float8_e4m3fn: FP8 experts need their float32 scales"):
        llmm.matmul_id(w1, x, ids)
    # The binding says the same to a direct caller (torch exports float8_e4m3fn through DLPack; NumPy cannot).
    out = torch.full((m, top_k, 2 * inter), float("nan"))
    with pytest.raises(llmm.Error, match=r"weights are float8_e4m3fn: FP8 experts need their float32 scales "
                                         r"\(weight_scale: per tensor \[E\]"):
        llmm._llmm.matmul_id(w1, x, ids, out)
    assert out.isnan().all()
    llmm._llmm.matmul_id(w1, x, ids, out, weight_scale=s1, scale_kind=kind)  # float8_e4m3fn codes taken as they are
    assert torch.equal(out, y)


@pytest.mark.parametrize("mode", ["block", "channel", "per_channel_quant", "tensor"])
def test_torch_fused_experts_fp8(mode):
    torch = need_torch()
    import llmm.torch_ops as T

    kind = {"per_channel_quant": "channel"}.get(mode, mode)
    g = torch.Generator().manual_seed(41)
    e, hidden, inter, m, top_k = 6, 136, 100, 5, 2  # vLLM: H = 136, I = 100, w1 [E, 2I, H], w2 [E, H, I]
    w1, s1, w1d = torch_experts(torch, g, e, 2 * inter, hidden, kind)
    w2, s2, w2d = torch_experts(torch, g, e, hidden, inter, kind)
    if kind == "tensor":  # vLLM's per-tensor layout: one scale per expert, [E]
        s1, s2 = s1.reshape(e), s2.reshape(e)
    assert tuple(s1.shape) == {"block": (e, 2, 2), "channel": (e, 200, 1), "tensor": (e,)}[kind]
    hs = torch.randn(m, hidden, generator=g, dtype=torch.float32).bfloat16()
    scores = torch.randn(m, e, generator=g).softmax(-1)
    tw, ids = scores.topk(top_k, dim=-1)
    ids = ids.to(torch.int32)
    kw = dict(use_fp8_w8a8=True, w1_scale=s1, w2_scale=s2)
    if kind == "block":
        kw["block_shape"] = [128, 128]
    if mode == "per_channel_quant":
        kw["per_channel_quant"] = True
    got = T.fused_experts(hs, w1, w2, tw, ids, **kw)
    assert got.dtype == torch.bfloat16 and got.shape == hs.shape
    want = torch_moe_ref(torch, hs, w1d, w2d, ids, tw)
    assert torch.allclose(got.double(), want, rtol=2.0 ** -8, atol=1e-12 * want.abs().max().item())
    # float32 hidden states: float32 out, to f32 rounding of the float64 reference
    hf = hs.float()
    gotf = T.fused_experts(hf, w1, w2, tw, ids, **kw)
    wantf = torch_moe_ref(torch, hf, w1d, w2d, ids, tw)
    assert gotf.dtype == torch.float32
    assert torch.allclose(gotf.double(), wantf, rtol=4 * U32, atol=1e-12 * wantf.abs().max().item())
    h = hf.clone()
    assert T.fused_experts(h, w1, w2, tw, ids, inplace=True, **kw) is h
    assert torch.equal(h, gotf)


def test_torch_fused_experts_fp8_refusals():
    torch = need_torch()
    import llmm.torch_ops as T

    g = torch.Generator().manual_seed(51)
    e, hidden, inter, m, top_k = 4, 136, 100, 3, 2
    w1, s1, _ = torch_experts(torch, g, e, 2 * inter, hidden, "block")
    w2, s2, _ = torch_experts(torch, g, e, hidden, inter, "block")
    w1c, s1c, _ = torch_experts(torch, g, e, 2 * inter, hidden, "channel")
    w2c, s2c, _ = torch_experts(torch, g, e, hidden, inter, "channel")
    hs = torch.randn(m, hidden, generator=g)
    tw = torch.rand(m, top_k, generator=g)
    ids = torch.randint(0, e, (m, top_k), generator=g)
    fp8 = dict(use_fp8_w8a8=True, w1_scale=s1, w2_scale=s2, block_shape=[128, 128])
    cases = (
        (dict(fp8, a1_scale=torch.ones(1)), llmm.Error,
         r"a1_scale / a2_scale must be None: llmm does not quantize activations on this path"),
        (dict(fp8, a2_scale=torch.ones(1)), llmm.Error, "does not quantize activations"),
        (dict(fp8, block_shape=[64, 64]), llmm.Error,
         r"block_shape must be None or \[128, 128\] \(llmm's FP8 block scales are 128 x 128\), got \[64, 64\]"),
        (dict(fp8, w2_scale=None), llmm.Error,
         r"quantized or biased experts are not supported \(given: use_fp8_w8a8, w1_scale, block_shape\) other than "
         r"FP8 e4m3 ones, as use_fp8_w8a8=True with float8_e4m3fn w1 and w2 and their float32 w1_scale and w2_scale; "
         r"got w1 torch.float8_e4m3fn, w2 torch.float8_e4m3fn, w1_scale given, w2_scale None"),
        (dict(fp8, block_shape=None), ValueError,
         r"w1_scale of shape \[4, 2, 2\] holds 128 x 128 block scales: pass block_shape=\[128, 128\]"),
        (dict(fp8, w1_scale=s1[:, :1]), ValueError, r"w1_scale of shape \[4, 1, 2\] fits no scale kind"),
        (dict(fp8, per_channel_quant=True), llmm.Error, "per_channel_quant=True and block_shape are exclusive"),
        (dict(fp8, use_int8_w8a16=True), llmm.Error,
         r"quantized or biased experts are not supported \(given: block_shape, use_fp8_w8a8, use_int8_w8a16, "
         r"w1_scale, w2_scale\): llmm's quantized experts are FP8 e4m3"),
        (dict(fp8, w1_zp=torch.zeros(e)), llmm.Error, r"not supported \(given: .*w1_zp"),
        (dict(fp8, w1_bias=torch.zeros(e, inter)), llmm.Error,
         r"bias_gate_up must be a contiguous f32 / f16 / bf16 \[4, 200\] \(n_experts, rows of w_gate_up\), got f32\[4, 100\]"),
        (dict(fp8, apply_router_weight_on_input=True), llmm.Error,
         r"apply_router_weight_on_input=True needs top_k 1 \(as vLLM\), got topk_weights of shape \[3, 2\]"),
        (dict(fp8, expert_map=torch.arange(e).float()), llmm.Error, "expert_map must be a 1-D int32 / int64 tensor"),
        (dict(w1_scale=s1, w2_scale=s2), llmm.Error, "w1_scale, w2_scale given without use_fp8_w8a8=True"),
        (dict(), llmm.Error, r"float8_e4m3fn w1 / w2 need use_fp8_w8a8=True with w1_scale and w2_scale"),
    )
    for kw, err, match in cases:
        with pytest.raises(err, match=match):
            T.fused_experts(hs, w1, w2, tw, ids, **kw)
    # block_shape [128, 128] with per-channel scales; per_channel_quant with per-tensor scales
    with pytest.raises(ValueError, match=r"with block_shape \[128, 128\], w1_scale must be \[E, ceil\(N / 128\), "
                                         r"ceil\(K / 128\)\] = \[4, 2, 2\] for w1 of \[4, 200, 136\], got \[4, 200, 1\]"):
        T.fused_experts(hs, w1c, w2c, tw, ids, use_fp8_w8a8=True, w1_scale=s1c, w2_scale=s2c, block_shape=[128, 128])
    with pytest.raises(ValueError, match=r"per_channel_quant=True needs per-channel w1_scale \[E, N, 1\] = "
                                         r"\[4, 200, 1\], got \[4\]"):
        T.fused_experts(hs, w1c, w2c, tw, ids, use_fp8_w8a8=True, w1_scale=torch.ones(e), w2_scale=torch.ones(e),
                        per_channel_quant=True)
    # use_fp8_w8a8 with float32 experts
    with pytest.raises(llmm.Error, match=r"not supported \(given: use_fp8_w8a8, w1_scale, w2_scale\) other than FP8 "
                                         r"e4m3 ones.*got w1 torch.float32"):
        T.fused_experts(hs, w1.float(), w2.float(), tw, ids, use_fp8_w8a8=True, w1_scale=s1c, w2_scale=s2c)
    # the per-channel call works
    assert T.fused_experts(hs, w1c, w2c, tw, ids, use_fp8_w8a8=True, w1_scale=s1c, w2_scale=s2c).shape == hs.shape
