"""x given in e4m3 (activations quantized by the caller per token and 128 channels, DeepGEMM's and
vLLM's per_token_group_quant_fp8 groups): llmm.quantize_fp8_activations against an independent
NumPy rule and ml_dtypes, llmm.matmul_fp8(x_codes, w, s, x_scale=...) against float64 references on
the CPU backend (every weight scale kind, scales per group or per token, token-major or row-major,
every output dtype), its refusals, and the torch op with x_scale (schema, opcheck, bit-equal to the
NumPy path)."""
import numpy as np
import pytest

import llmm
from conftest import need_torch

KINDS = ("tensor", "channel", "block")
TINY = np.float32(np.finfo(np.float32).smallest_subnormal)


def rand(rng, *shape):
    x = (rng.random(shape) + 0.25) * np.exp2(rng.integers(-3, 4, shape)) * np.where(rng.random(shape) < 0.5, -1, 1)
    return x.astype(np.float32)


def numpy_rule(x):
    """(codes, scales [m, G]) by the documented rule, computed here without llmm's quantizer."""
    m, k = x.shape
    g = -(-k // 128)
    codes = np.zeros((m, k), np.uint8)
    scales = np.ones((m, g), np.float32)
    for i in range(m):
        for j in range(g):
            grp = x[i, j * 128:(j + 1) * 128]
            if not np.all(np.isfinite(grp)):
                s = np.float32(np.nan)
            else:
                amax = np.float32(np.max(np.abs(grp)))
                s = np.float32(1.0) if amax == 0 else max(np.float32(amax / np.float32(448.0)), TINY)
            scales[i, j] = s
            codes[i, j * 128:(j + 1) * 128] = llmm.to_fp8_bits((grp / s).astype(np.float32), saturate=True)
    return codes, scales


def weight(rng, n, k, kind):
    w = rand(rng, n, k) * np.exp2(rng.integers(-3, 4, (n, 1))).astype(np.float32)
    codes, scales = llmm.quantize_fp8(w, scale=kind)
    v = llmm.from_fp8_bits(codes).astype(np.float64)
    if kind == "block":
        s = np.repeat(np.repeat(scales.astype(np.float64), 128, axis=0)[:n], 128, axis=1)[:, :k]
    else:
        s = np.broadcast_to(scales.astype(np.float64).reshape(-1, 1) if kind == "channel" else scales.reshape(1, 1), (n, k))
    return codes, scales, v * s


def x_value(codes, scales):
    """float64 x(i, l) = value(codes[i, l]) * scales[i, l // 128]."""
    k = codes.shape[1]
    s = np.repeat(np.asarray(scales, np.float64), 128, axis=1)[:, :k]
    return llmm.from_fp8_bits(codes).astype(np.float64) * s


def check(y, xv, wq, unit):
    ref = xv @ wq.T
    bound = np.abs(xv) @ np.abs(wq).T
    err = np.abs(np.asarray(y, np.float64) - ref)
    assert np.all(err <= unit * np.abs(ref) + 1e-13 * bound + 1e-300), float(np.max(err))
    assert np.abs(ref).max() > 0


def test_quantize_fp8_activations_follows_the_rule_bit_for_bit():
    rng = np.random.default_rng(3)
    x = rand(rng, 6, 300) * np.exp2(rng.integers(-20, 20, (6, 1))).astype(np.float32)
    x[1, 128:256] = 0.0                  # an all-zero group: scale 1, codes 0
    x[2, 5] = np.inf                     # a group with an infinity: NaN scale
    x[3, 200] = np.nan
    x[4, :] *= np.float32(2.0 ** -140)   # subnormal magnitudes: the scale floor
    codes, scales = llmm.quantize_fp8_activations(x)
    want_c, want_s = numpy_rule(x)
    assert codes.dtype == np.uint8 and codes.shape == (6, 300)
    assert scales.dtype == np.float32 and scales.shape == (6, 3) and scales.strides == (4, 4 * 6)  # token-major
    np.testing.assert_array_equal(scales.view(np.uint32), want_s.view(np.uint32))
    finite = np.repeat(np.isfinite(want_s), 128, axis=1)[:, :300]
    np.testing.assert_array_equal(codes[finite], want_c[finite])
    assert scales[1, 1] == 1.0 and np.all(codes[1, 128:256] == 0)
    assert np.isnan(scales[2, 0]) and np.isnan(scales[3, 1]) and np.isfinite(scales[2, 1])
    ml_dtypes = pytest.importorskip("ml_dtypes")
    ok = np.isfinite(want_s[0, 0])
    assert ok
    cast = (x[0, :128] / scales[0, 0]).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    np.testing.assert_array_equal(codes[0, :128], cast)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("m,n,k", [(5, 300, 260), (1, 129, 128), (17, 40, 400)])
def test_e4m3_x_matches_float64_reference(kind, m, n, k):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(m * 1000 + n + k)
    wc, ws, wq = weight(rng, n, k, kind)
    xc, xs = llmm.quantize_fp8_activations(rand(rng, m, k))
    xv = x_value(xc, xs)
    y = llmm.matmul_fp8(xc, wc, ws, x_scale=xs)
    assert y.dtype == np.dtype(ml_dtypes.bfloat16) and y.shape == (m, n)  # bfloat16 by default
    check(y.astype(np.float64), xv, wq, 2.0 ** -8)
    y32 = llmm.matmul_fp8(xc.view(ml_dtypes.float8_e4m3fn), wc, ws, x_scale=np.ascontiguousarray(xs), out_dtype="float32")
    assert y32.dtype == np.float32
    check(y32, xv, wq, 2.0 ** -24)
    out = np.full((m, n), 7.0, np.float16)
    assert llmm.matmul_fp8(xc, wc, ws, x_scale=xs, out=out) is out
    check(out.astype(np.float64), xv, wq, 2.0 ** -11)


def test_per_token_x_scales_broadcast_over_the_groups():
    rng = np.random.default_rng(5)
    m, n, k = 4, 70, 300
    wc, ws, wq = weight(rng, n, k, "block")
    xc, _ = llmm.quantize_fp8_activations(rand(rng, m, k))
    per_token = (rng.random(m) + 0.5).astype(np.float32)
    full = np.repeat(per_token[:, None], 3, axis=1)
    want = llmm.matmul_fp8(xc, wc, ws, x_scale=full, out_dtype="float32")
    check(want, x_value(xc, full), wq, 2.0 ** -24)
    for s in (per_token, per_token[:, None]):
        assert np.array_equal(llmm.matmul_fp8(xc, wc, ws, x_scale=s, out_dtype="float32"), want)


def test_nan_scale_gives_nan_token():
    rng = np.random.default_rng(9)
    wc, ws, _ = weight(rng, 30, 256, "channel")
    x = rand(rng, 3, 256)
    x[1, 140] = np.inf
    xc, xs = llmm.quantize_fp8_activations(x)
    y = llmm.matmul_fp8(xc, wc, ws, x_scale=xs, out_dtype="float32")
    assert np.all(np.isnan(y[1])) and np.all(np.isfinite(y[[0, 2]]))


def test_e4m3_x_refusals():
    rng = np.random.default_rng(1)
    wc, ws, _ = weight(rng, 20, 256, "tensor")
    x = rand(rng, 3, 256)
    xc, xs = llmm.quantize_fp8_activations(x)
    ml_dtypes = pytest.importorskip("ml_dtypes")
    with pytest.raises(llmm.Error, match=r"x is float8_e4m3fn: pass x_scale"):
        llmm.matmul_fp8(xc.view(ml_dtypes.float8_e4m3fn), wc, ws)
    with pytest.raises(llmm.Error, match="x has dtype float32: FP8 activation codes must be float8_e4m3fn"):
        llmm.matmul_fp8(x, wc, ws, x_scale=xs)
    with pytest.raises(llmm.Error, match=r"x_scale of shape \[3, 3\] fits no scale layout of x \[3, 256\]: per token "
                                         r"and 128 channels \[3, 2\], or per token \[3\] / \[3, 1\]"):
        llmm.matmul_fp8(xc, wc, ws, x_scale=np.ones((3, 3), np.float32))
    with pytest.raises(llmm.Error, match="x_scale must be float32, got float64"):
        llmm.matmul_fp8(xc, wc, ws, x_scale=np.ones((3, 2)))
    with pytest.raises(llmm.Error, match="out_dtype applies to e4m3 x"):
        llmm.matmul_fp8(x, wc, ws, out_dtype="float32")
    with pytest.raises(llmm.Error, match="pass out= or out_dtype=, not both"):
        llmm.matmul_fp8(xc, wc, ws, x_scale=xs, out=np.empty((3, 20), np.float32), out_dtype="float32")
    out = np.full((3, 20), 7.0, np.int32)
    with pytest.raises(llmm.Error, match=r"y must be an f32/f16/bf16 \[3, 20\] matrix"):
        llmm.matmul_fp8(xc, wc, ws, x_scale=xs, out=out)
    assert np.all(out == 7)
    with pytest.raises(llmm.Error, match="needs a CUDA context"):
        llmm.matmul_fp8(xc, wc, ws, x_scale=xs, route="tiled_sm90")


def test_plan_e4m3_x():
    p = llmm.plan_matmul_fp8(64, 256, 256, "bfloat16", "block", device="cpu", x_fp8=True)
    assert p["route"] == "cpu"


# ---------------------------------------------------------------------------------------------
# torch (CPU): float8_e4m3fn x tensors, the custom op with x_scale

def test_torch_e4m3_x_and_the_op():
    torch = need_torch()
    from llmm import torch_ops as T

    g = torch.Generator().manual_seed(4)
    m, n, k = 6, 90, 272
    w = torch.randn(n, k, generator=g)
    wc, ws = llmm.quantize_fp8(w, scale="block")
    x = torch.randn(m, k, generator=g)
    xc, xs = llmm.quantize_fp8_activations(x)
    assert xc.dtype == torch.float8_e4m3fn and xs.dtype == torch.float32 and xs.shape == (m, 3)
    assert xs.stride() == (1, m)
    nc, ns = llmm.quantize_fp8_activations(x.numpy())
    assert np.array_equal(xc.view(torch.uint8).numpy(), nc) and np.array_equal(xs.numpy(), ns)
    y = llmm.matmul_fp8(xc, wc, ws, x_scale=xs)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.bfloat16 and y.shape == (m, n)
    yn = llmm.matmul_fp8(nc, wc.view(torch.uint8).numpy(), ws.numpy(), x_scale=ns, out_dtype="float32")
    assert torch.equal(y, torch.from_numpy(yn).bfloat16())
    assert str(torch.ops.llmm.matmul_fp8.default._schema) == (
        'llmm::matmul_fp8(Tensor x, Tensor weight, Tensor scale, str precision="fast", str route="auto", '
        'Tensor? x_scale=None, ScalarType? out_dtype=None) -> Tensor')
    yo = T.matmul_fp8(xc, wc, ws, x_scale=xs, out_dtype=torch.float32)
    assert yo.dtype == torch.float32 and torch.equal(yo, torch.from_numpy(yn))
    result = torch.library.opcheck(torch.ops.llmm.matmul_fp8.default,
                                   (xc.view(torch.uint8), wc.view(torch.uint8), ws, "fast", "auto", xs.contiguous(),
                                    torch.float16), {})
    assert all(v == "SUCCESS" for v in result.values()), result
    with pytest.raises(llmm.Error, match="out_dtype applies to e4m3 x"):
        T.matmul_fp8(x, wc, ws, out_dtype=torch.float32)


# ---------------------------------------------------------------------------------------------
# CUDA (skips without a GPU; a failure under LLMM_REQUIRE_GPU=1)

@pytest.mark.parametrize("kind", KINDS)
def test_cuda_e4m3_x(cuda_torch, kind):
    torch = cuda_torch
    from llmm import torch_ops as T

    g = torch.Generator().manual_seed(21)
    n, k = 264, 400
    wc, ws = llmm.quantize_fp8(torch.randn(n, k, generator=g), scale=kind)
    wq = llmm.dequantize_fp8(wc.view(torch.uint8).numpy(), ws.numpy(), scale=kind).astype(np.float64)
    for m in (1, 7, 130):
        xc, xs = llmm.quantize_fp8_activations(torch.randn(m, k, generator=g))
        want = llmm.matmul_fp8(xc, wc, ws, x_scale=xs, out_dtype=torch.float32).double()  # the CPU backend
        bound = torch.from_numpy(np.abs(x_value(xc.view(torch.uint8).numpy(), xs.numpy())) @ np.abs(wq).T)
        # token-major with ld = m (copied to ld % 4 == 0 unless m is), row-major (copied), one scale a token
        for scales in (xs, xs.contiguous(), None):
            if scales is None:
                s1 = xs[:, :1].contiguous()
                xs1 = s1.expand(m, xs.shape[1]).contiguous()
                want1 = llmm.matmul_fp8(xc, wc, ws, x_scale=xs1, out_dtype=torch.float32).double()
                y = llmm.matmul_fp8(xc.cuda(), wc.cuda(), ws.cuda(), x_scale=s1.reshape(m).cuda())
                ref, bnd = want1, torch.from_numpy(np.abs(x_value(xc.view(torch.uint8).numpy(), xs1.numpy())) @ np.abs(wq).T)
            else:
                y = llmm.matmul_fp8(xc.cuda(), wc.cuda(), ws.cuda(), x_scale=scales.cuda())
                ref, bnd = want, bound
            assert y.dtype == torch.bfloat16 and y.is_cuda and y.shape == (m, n)
            err = (y.double().cpu() - ref).abs()
            # bf16 output rounding plus the tensor cores' sums within a 128-k block
            assert bool(torch.all(err <= 2.0 ** -8 * ref.abs() + 2.0 ** -11 * bnd)), (kind, m)
        y32 = T.matmul_fp8(xc.cuda(), wc.cuda(), ws.cuda(), x_scale=xs.cuda(), out_dtype=torch.float32)
        assert y32.dtype == torch.float32
        err = (y32.double().cpu() - want).abs()
        assert bool(torch.all(err <= 2.0 ** -22 * want.abs() + 2.0 ** -11 * bound)), (kind, m)
