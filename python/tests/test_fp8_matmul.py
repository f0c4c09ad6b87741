"""llmm.matmul_fp8 (y = x @ dequant(w)^T on FP8 e4m3 weights with per tensor / channel / 128x128 block
scales) and llmm.plan_matmul_fp8 through the Python package: against float64 NumPy references on the
CPU backend (weights from llmm.quantize_fp8, shapes not multiples of 128), the scale kind read off the
scale's shape, outputs in x's dtype, refusals that name the problem and leave out untouched; torch CPU
tensors with torch.float8_e4m3fn weights where torch is installed; on a GPU, every CUDA route."""
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


def weight(rng, n, k, kind):
    """(codes uint8 [n, k], scales, the exact dequantized weight in float64) of a random weight
    whose rows and 128-blocks span different magnitudes (so the scales differ)."""
    w = rand(rng, n, k) * np.exp2(rng.integers(-4, 5, (n, 1))).astype(np.float32)
    codes, scales = llmm.quantize_fp8(w, scale=kind)
    return codes, scales, exact_dequant(codes, scales, kind)


def expand_scales(scales, kind, n, k):
    """Each weight's scale, float64 [n, k]."""
    s = np.asarray(scales, np.float64)
    if kind == "block":
        return np.repeat(np.repeat(s, 128, axis=0)[:n], 128, axis=1)[:, :k]
    return np.broadcast_to(s.reshape(-1, 1) if kind == "channel" else s.reshape(1, 1), (n, k))


def exact_dequant(codes, scales, kind):
    """value(code) * scale in float64: exact (a 4-bit significand times an f32)."""
    v = llmm.from_fp8_bits(codes).astype(np.float64)
    return v * expand_scales(scales, kind, *v.shape)


def check_close(y, x, wq, unit):
    """y ~ x @ wq^T: each output within its dtype's rounding of the float64 product (plus float64
    accumulation noise, far below it)."""
    x64 = np.asarray(x, np.float64)
    ref = x64 @ wq.T
    bound = np.abs(x64) @ np.abs(wq).T
    err = np.abs(np.asarray(y, np.float64) - ref)
    tol = unit * np.abs(ref) + 1e-13 * bound + 1e-300
    assert np.all(err <= tol), f"max err / tol {np.max(err / tol)} at {np.unravel_index(np.argmax(err / tol), err.shape)}"
    assert np.abs(ref).max() > 0  # non-trivial data


# ---------------------------------------------------------------------------------------------
# Values against float64 references (CPU backend)

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("m,n,k", [(5, 300, 260), (1, 129, 200), (17, 257, 385), (3, 40, 130)])
def test_matches_float64_reference(kind, m, n, k):
    rng = np.random.default_rng(m * 1000 + n + k)
    codes, scales, wq = weight(rng, n, k, kind)
    x = rand(rng, m, k)
    for precision in ("fast", "exact"):  # the CPU backend keeps x exact either way
        y = llmm.matmul_fp8(x, codes, scales, precision=precision)
        assert isinstance(y, np.ndarray) and y.dtype == np.float32 and y.shape == (m, n)
        check_close(y, x, wq, U32)
    # The brief's reference: x @ dequantize_fp8(...)^T, whose weights are rounded to f32 once more.
    deq = llmm.dequantize_fp8(codes, scales, scale=kind).astype(np.float64)
    ref = x.astype(np.float64) @ deq.T
    bound = np.abs(x.astype(np.float64)) @ np.abs(deq).T
    assert np.all(np.abs(y - ref) <= U32 * np.abs(ref) + U32 * bound)


@pytest.mark.parametrize("kind", KINDS)
def test_half_precision_x_gives_its_dtype(kind):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(7)
    codes, scales, wq = weight(rng, 150, 200, kind)
    x32 = rand(rng, 6, 200)
    for dt, unit in ((np.float16, 2.0 ** -11), (ml_dtypes.bfloat16, 2.0 ** -8)):
        x = x32.astype(dt)
        y = llmm.matmul_fp8(x, codes, scales)
        assert y.dtype == np.dtype(dt) and y.shape == (6, 150)
        check_close(y.astype(np.float32), x.astype(np.float32), wq, unit)


def test_out_padded_read_only_and_float8_views():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(3)
    n, k = 140, 300
    codes, scales, wq = weight(rng, n, k, "block")
    big = rand(rng, 4, k + 20)
    x = big[:, :k]  # padded rows
    x_ro = x.copy()
    x_ro.flags.writeable = False
    codes_ro = codes.copy()
    codes_ro.flags.writeable = False
    want = llmm.matmul_fp8(x.copy(), codes, scales)
    check_close(want, x, wq, U32)
    out = np.full((4, n), 7, np.float32)
    assert llmm.matmul_fp8(x, codes, scales, out=out) is out
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(llmm.matmul_fp8(x_ro, codes_ro, scales), want)
    # ml_dtypes float8_e4m3fn codes are the same bytes: the same result
    np.testing.assert_array_equal(llmm.matmul_fp8(x, codes.view(ml_dtypes.float8_e4m3fn), scales), want)
    # padded weight rows
    wbig = np.zeros((n, k + 32), np.uint8)
    wbig[:, :k] = codes
    np.testing.assert_array_equal(llmm.matmul_fp8(x, wbig[:, :k], scales), want)
    # explicit routes on the CPU: auto and cpu agree
    np.testing.assert_array_equal(llmm.matmul_fp8(x, codes, scales, route="cpu"), want)


def test_scale_kind_from_shape():
    rng = np.random.default_rng(4)
    n, k = 200, 300
    w = rand(rng, n, k)
    x = rand(rng, 3, k)
    c, s = llmm.quantize_fp8(w, "channel")
    y = llmm.matmul_fp8(x, c, s)  # [n, 1]
    np.testing.assert_array_equal(llmm.matmul_fp8(x, c, s.reshape(n)), y)  # [n]
    check_close(y, x, exact_dequant(c, s, "channel"), U32)
    c, s = llmm.quantize_fp8(w, "tensor")
    y = llmm.matmul_fp8(x, c, s)  # [1, 1]
    for shape in ((), (1,)):
        np.testing.assert_array_equal(llmm.matmul_fp8(x, c, s.reshape(shape)), y)
    check_close(y, x, exact_dequant(c, s, "tensor"), U32)
    # n, k <= 128: block scales are [1, 1], the tensor shape: taken as per tensor, the same values
    w = rand(rng, 100, 120)
    c, s = llmm.quantize_fp8(w, "block")
    assert s.shape == (1, 1)
    x = rand(rng, 2, 120)
    y = llmm.matmul_fp8(x, c, s)
    check_close(y, x, exact_dequant(c, s, "block"), U32)
    # a single row: channel [1, 1] is the tensor shape too
    c, s = llmm.quantize_fp8(rand(rng, 1, 300), "channel")
    x1 = rand(rng, 2, 300)
    check_close(llmm.matmul_fp8(x1, c, s), x1, exact_dequant(c, s, "channel"), U32)


def test_empty_numpy_m():
    rng = np.random.default_rng(5)
    codes, scales, _ = weight(rng, 130, 260, "block")
    y = llmm.matmul_fp8(np.zeros((0, 260), np.float32), codes, scales)
    assert y.shape == (0, 130) and y.dtype == np.float32


def test_empty_k():
    # k = 0 (channel scales: [n, 1]): zeros
    out = np.full((3, 5), 7, np.float32)
    llmm.matmul_fp8(np.zeros((3, 0), np.float32), np.zeros((5, 0), np.uint8), np.ones((5, 1), np.float32), out=out)
    np.testing.assert_array_equal(out, 0)


# ---------------------------------------------------------------------------------------------
# Refusals: llmm.Error (or TypeError for a non-array) naming the problem, out left as it was

def refuses(exc, match, fn, out=None):
    before = None if out is None else out.copy()
    with pytest.raises(exc, match=match):
        fn()
    if out is not None:
        np.testing.assert_array_equal(out, before)


def test_refusals_name_the_problem():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(6)
    n, k = 300, 260
    codes, scales, _ = weight(rng, n, k, "block")
    x = rand(rng, 4, k)
    out = np.full((4, n), 7, np.float32)
    # wrong scale shape: fits no kind; an llmm.Error that is also a ValueError
    for bad in ((2, 3), (3, 2), (n, 2), (1, n), (3,), (2, 1, 1), (3, 3, 1)):
        s = np.ones(bad, np.float32)
        refuses(llmm.Error, r"scale of shape \[.*\] fits no scale kind of a \[300, 260\] weight: tensor \[\] / \[1\] / "
                            r"\[1, 1\], channel \[300\] or \[300, 1\], block \[3, 3\]",
                lambda s=s: llmm.matmul_fp8(x, codes, s, out=out), out)
        refuses(ValueError, "fits no scale kind", lambda s=s: llmm.matmul_fp8(x, codes, s, out=out), out)
    # scale dtype and layout
    refuses(llmm.Error, "scale has unsupported dtype float64", lambda: llmm.matmul_fp8(x, codes, scales.astype(np.float64),
                                                                                      out=out), out)
    refuses(llmm.Error, r"block scales of a \[300, 260\] weight must be a contiguous f32 \[3, 3\], got f16",
            lambda: llmm.matmul_fp8(x, codes, scales.astype(np.float16), out=out), out)
    refuses(llmm.Error, r"must be a contiguous f32 \[3, 3\]",
            lambda: llmm.matmul_fp8(x, codes, np.ones((3, 6), np.float32)[:, ::2], out=out), out)
    # scale values (checked on the CPU backend)
    for v, what in ((np.nan, "nan"), (0.0, "0"), (-1.0, "-1"), (np.inf, "inf")):
        s = scales.copy()
        s[1, 2] = v
        with pytest.raises(llmm.Error, match="matmul_fp8") as e:
            llmm.matmul_fp8(x, codes, s, out=out)
        assert "scale" in str(e.value), str(e.value)
    np.testing.assert_array_equal(out, 7)
    # x and weight dtypes
    refuses(llmm.Error, "x has unsupported dtype float64", lambda: llmm.matmul_fp8(x.astype(np.float64), codes, scales))
    refuses(llmm.Error, r"x must be an f32/f16/bf16 \[m, k\] matrix, got i32",
            lambda: llmm.matmul_fp8(x.astype(np.int32), codes, scales, out=out), out)
    for bad, name in ((codes.view(np.int8), "int8"), (codes.view(ml_dtypes.float8_e5m2), "float8_e5m2"),
                      (codes.astype(np.float32), "float32")):
        refuses(llmm.Error, f"weight has dtype {name}: FP8 weight codes must be float8_e4m3fn, or uint8 holding "
                            f"float8_e4m3fn bits", lambda bad=bad: llmm.matmul_fp8(x, bad, scales, out=out), out)
    # k mismatch
    x2 = rand(rng, 4, k - 4)
    refuses(llmm.Error, r"matmul_fp8: x f32\[4, 256\].* has k 256 but the codes f8e4m3\[300, 260\].* have 260",
            lambda: llmm.matmul_fp8(x2, codes, scales, out=out), out)
    # ranks
    refuses(llmm.Error, r"x must be \[m, k\], got shape \[2, 4, 260\]",
            lambda: llmm.matmul_fp8(rand(rng, 2, 4, k), codes, scales))
    refuses(llmm.Error, r"weight must be \[n, k\], got shape \[300\]",
            lambda: llmm.matmul_fp8(x, codes[:, 0].copy(), scales))
    # out: dtype, shape, read-only, strides
    for bad, match in ((np.full((4, n), 7, np.float16), r"y must be a f32 \[4, 300\] matrix \(x's dtype\), got f16"),
                       (np.full((4, n + 1), 7, np.float32), r"y must be a f32 \[4, 300\] matrix"),
                       (np.full((4, 2 * n), 7, np.float32)[:, ::2], "innermost stride 1")):
        refuses(llmm.Error, match, lambda bad=bad: llmm.matmul_fp8(x, codes, scales, out=bad), bad)
    ro = np.full((4, n), 7, np.float32)
    ro.flags.writeable = False
    refuses(llmm.Error, "out is read-only", lambda: llmm.matmul_fp8(x, codes, scales, out=ro), ro)
    # x innermost stride
    refuses(llmm.Error, "innermost stride 1",
            lambda: llmm.matmul_fp8(rand(rng, 4, 2 * k)[:, ::2], codes, scales, out=out), out)
    # output overlapping an input
    buf = np.full((4, k + n), 7, np.float32)
    buf[:, :k] = x
    refuses(llmm.Error, "overlaps an input", lambda: llmm.matmul_fp8(buf[:, :k], codes, scales, out=buf[:, k:]), buf)
    # options
    refuses(llmm.Error, "precision must be 'exact' or 'fast', got 'EXACT'",
            lambda: llmm.matmul_fp8(x, codes, scales, precision="EXACT", out=out), out)
    refuses(llmm.Error, r"unknown fp8 route 'gemv' \(auto, cpu, stream, stream_mma, cublaslt, dequant_lt, tiled_sm90\)",
            lambda: llmm.matmul_fp8(x, codes, scales, route="gemv", out=out), out)
    for r in ("stream", "stream_mma", "cublaslt", "dequant_lt", "tiled_sm90"):  # CUDA routes on NumPy arrays
        refuses(llmm.Error, f"route {r} needs a CUDA context", lambda r=r: llmm.matmul_fp8(x, codes, scales, route=r,
                                                                                          out=out), out)
    # not arrays: TypeError naming the argument
    for name, args in (("x", ("x", codes, scales)), ("weight", (x, b"ab", scales)), ("scale", (x, codes, 0.5))):
        refuses(TypeError, f"llmm.matmul_fp8: {name} must be an array", lambda args=args: llmm.matmul_fp8(*args))
    refuses(TypeError, "llmm.matmul_fp8: out must be a writable array",
            lambda: llmm.matmul_fp8(x, codes, scales, out=[[0.0]]))
    refuses(TypeError, "llmm.matmul_fp8: precision must be a str",
            lambda: llmm.matmul_fp8(x, codes, scales, precision=1, out=out), out)


# ---------------------------------------------------------------------------------------------
# The planner

def test_plan_matmul_fp8_on_the_cpu():
    p = llmm.plan_matmul_fp8(7, 300, 260, "float32", "block", device="cpu")
    assert p == {"route": "cpu", "reason": "CPU context: the float64 reference", "workspace_bytes": 0, "gemv_vecs": 0,
                 "gemv_k_lanes": 0, "gemv_grid_x": 0, "mma_k_warps": 0}
    assert llmm.plan_matmul_fp8(1, 4096, 4096, np.float16, "tensor", device="cpu", route="cpu")["route"] == "cpu"
    assert llmm.plan_matmul_fp8(2, 8, 8, device=np.ones((2, 8), np.float32))["route"] == "cpu"
    for r in ("stream", "stream_mma", "cublaslt", "dequant_lt"):
        with pytest.raises(llmm.Error, match=f"route {r} needs a CUDA context"):
            llmm.plan_matmul_fp8(1, 256, 256, "bf16", "block", device="cpu", route=r)
    with pytest.raises(llmm.Error, match="plan_matmul_fp8: unknown dtype"):
        llmm.plan_matmul_fp8(1, 256, 256, np.float64, device="cpu")
    with pytest.raises(llmm.Error, match="dtype must be f32, f16 or bf16 .*, got u8"):
        llmm.plan_matmul_fp8(1, 256, 256, "uint8", device="cpu")
    with pytest.raises(llmm.Error, match="scale_kind must be 'block', 'channel' or 'tensor', got 'row'"):
        llmm.plan_matmul_fp8(1, 256, 256, "bf16", "row", device="cpu")
    with pytest.raises(llmm.Error, match="m -1 is negative"):
        llmm.plan_matmul_fp8(-1, 256, 256, device="cpu")
    with pytest.raises(TypeError, match="llmm.plan_matmul_fp8: k must be an int, got str"):
        llmm.plan_matmul_fp8(1, 256, "256", device="cpu")
    with pytest.raises(llmm.Error, match="precision must be 'exact' or 'fast'"):
        llmm.plan_matmul_fp8(1, 256, 256, device="cpu", precision="bogus")
    if not llmm.cuda_available():
        with pytest.raises(llmm.Error, match="cuda:0"):
            llmm.plan_matmul_fp8(1, 256, 256, device="cuda")
        assert llmm.plan_matmul_fp8(1, 256, 256)["route"] == "cpu"  # device None: the CPU here


# ---------------------------------------------------------------------------------------------
# torch tensors (CPU): torch.float8_e4m3fn weights, outputs in x's dtype on x's device

@pytest.mark.parametrize("kind", KINDS)
def test_torch_cpu_float8_weights(kind):
    torch = need_torch()
    g = torch.Generator().manual_seed(11)
    n, k, m = 270, 390, 9
    w = torch.randn(n, k, generator=g) * torch.exp2(torch.randint(-4, 5, (n, 1), generator=g).float())
    codes, scales = llmm.quantize_fp8(w, scale=kind)
    assert codes.dtype == torch.float8_e4m3fn
    wq = exact_dequant(codes.view(torch.uint8).numpy(), scales.numpy(), kind)
    x = torch.randn(m, k, generator=g)
    y = llmm.matmul_fp8(x, codes, scales)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32 and y.shape == (m, n) and y.device == x.device
    check_close(y.numpy(), x.numpy(), wq, U32)
    # uint8 codes, scales of shape [n] (channel), torch's own float8 decode as the reference
    y8 = llmm.matmul_fp8(x, codes.view(torch.uint8), scales.reshape(-1) if kind == "channel" else scales)
    assert torch.equal(y8, y)
    ref = x.double() @ (codes.double() * torch.from_numpy(expand_scales(scales.numpy(), kind, n, k).copy())).T
    assert torch.allclose(y.double(), ref, rtol=2 * U32, atol=1e-9)
    # bfloat16 x: bfloat16 out
    xb = x.bfloat16()
    yb = llmm.matmul_fp8(xb, codes, scales)
    assert yb.dtype == torch.bfloat16
    check_close(yb.float().numpy(), xb.float().numpy(), wq, 2.0 ** -8)
    out = torch.full((m, n), 7.0)
    assert llmm.matmul_fp8(x, codes, scales, out=out) is out and torch.equal(out, y)
    assert llmm.matmul_fp8(x[:0], codes, scales).shape == (0, n)  # torch's empty rows keep their strides
    # x that requires grad is read through detach()
    assert torch.equal(llmm.matmul_fp8(x.clone().requires_grad_(), codes, scales), y)


def test_torch_refusals():
    torch = need_torch()
    x = torch.randn(3, 256)
    codes, scales = llmm.quantize_fp8(torch.randn(130, 256), scale="block")
    for bad in (codes.view(torch.uint8).view(torch.float8_e5m2), codes.view(torch.uint8).view(torch.int8)):
        with pytest.raises(llmm.Error, match=f"weight has dtype {str(bad.dtype).replace('torch.', '')}: FP8 weight "
                                             f"codes must be float8_e4m3fn"):
            llmm.matmul_fp8(x, bad, scales)
    with pytest.raises(llmm.Error, match=r"fits no scale kind of a \[130, 256\] weight"):
        llmm.matmul_fp8(x, codes, torch.ones(2, 3))
    out = torch.full((3, 130), 7.0, requires_grad=True)
    with pytest.raises(llmm.Error, match="out requires grad"):
        llmm.matmul_fp8(x, codes, scales, out=out)


# ---------------------------------------------------------------------------------------------
# CUDA (skips without a GPU; a failure under LLMM_REQUIRE_GPU=1)

@pytest.mark.parametrize("kind", KINDS)
def test_cuda_routes(cuda_torch, kind):
    torch = cuda_torch
    g = torch.Generator().manual_seed(12)
    n, k = 520, 384
    w = torch.randn(n, k, generator=g) * torch.exp2(torch.randint(-4, 5, (n, 1), generator=g).float())
    codes, scales = llmm.quantize_fp8(w.cuda(), scale=kind)
    wq = exact_dequant(codes.view(torch.uint8).cpu().numpy(), scales.cpu().numpy(), kind)
    for m in (1, 5, 16, 33, 200):
        x = torch.randn(m, k, generator=g).bfloat16()
        x64 = x.double().numpy()
        ref = x64 @ wq.T
        bound = np.abs(x64) @ np.abs(wq).T
        routes = ["auto", "dequant_lt"] + (["stream", "stream_mma"] if m <= 16 else []) + ["cublaslt"]
        for route in routes:
            for precision in ("fast", "exact"):
                if route == "cublaslt" and precision == "exact":
                    with pytest.raises(llmm.Error, match="precision Exact keeps x unquantized"):
                        llmm.matmul_fp8(x.cuda(), codes, scales, route=route, precision=precision)
                    continue
                if route == "cublaslt" and m < 32:  # cuBLASLt may have no algorithm for small m: refused then
                    try:
                        llmm.plan_matmul_fp8(m, n, k, torch.bfloat16, kind, device="cuda", route="cublaslt")
                    except llmm.Error as e:
                        assert "no FP8 algorithm" in str(e), str(e)
                        with pytest.raises(llmm.Error, match="no FP8 algorithm"):
                            llmm.matmul_fp8(x.cuda(), codes, scales, route=route, precision=precision)
                        continue
                y = llmm.matmul_fp8(x.cuda(), codes, scales, route=route, precision=precision)
                assert y.dtype == torch.bfloat16 and y.is_cuda and y.shape == (m, n)
                taken = route if route != "auto" else llmm.plan_matmul_fp8(
                    m, n, k, torch.bfloat16, kind, precision=precision, device="cuda")["route"]
                # every route: bf16 output rounding. stream: exact products, f32 accumulation;
                # dequant_lt: the weight rounded to bf16 first; cublaslt (W8A8): x rounded to e4m3
                per_bound = {"stream": 1e-5, "stream_mma": 1e-5, "dequant_lt": 2.0 ** -8, "cublaslt": 2.0 ** -4}[taken]
                tol = 2.0 ** -8 * np.abs(ref) + per_bound * bound
                err = np.abs(y.double().cpu().numpy() - ref)
                assert np.all(err <= tol), (route, taken, precision, m, float(np.max(err / tol)))
    plan = llmm.plan_matmul_fp8(1, n, k, torch.bfloat16, kind, device="cuda")
    assert plan["route"] in ("stream", "cublaslt", "dequant_lt") and isinstance(plan["reason"], str)
