"""Hardening of the Python boundary, NumPy on the CPU backend.

Each test of the first part pins one behaviour that the package before this change got wrong (the
comment says which). Then: a sweep of hostile calls over every public function (each must raise
llmm.Error, or a TypeError whose message starts with "llmm", and write nothing), and a property
test per op (random valid calls agree with a float64 NumPy reference written here, independent of
llmm's C++ reference; random invalid calls raise llmm.Error and leave every array bitwise as it
was).
"""
import itertools

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

import llmm

U32 = (1 << 32) - 1
UNIT_ROUNDOFF = {np.dtype(np.float32): 2.0**-24, np.dtype(np.float16): 2.0**-11}


def rand(rng, *shape, dtype=np.float32):
    x = (rng.random(shape) + 0.25) * np.exp2(rng.integers(-2, 3, shape)) * np.where(rng.random(shape) < 0.5, -1, 1)
    return x.astype(dtype)


def zeros_view(shape, dtype=np.float32):
    """An array of `shape` with every stride 0 on a one-element buffer (NumPy 2 gives empty arrays
    strides like these)."""
    return as_strided(np.zeros(1, dtype), shape, (0,) * len(shape))


def readonly(x):
    x = x.copy()
    x.flags.writeable = False
    return x


def snapshot(arrays):
    return [np.asarray(a).copy() if a is not None else None for a in arrays]


def assert_unchanged(arrays, saved):
    for a, s in zip(arrays, saved):
        if a is not None:
            assert np.asarray(a).tobytes() == s.tobytes(), "a refused call changed an array"


def check_close(got, want, scale, out_dtype):
    """|got - want| <= 3 u(out) sum_k |a||b| (+ the smallest f16 subnormal for f16 outputs): the
    CPU backend accumulates in float64 and rounds once."""
    got = np.asarray(got).astype(np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert np.all(np.isfinite(got)), "non-finite output"
    u = UNIT_ROUNDOFF[np.dtype(out_dtype)]
    floor = 2.0**-24 if np.dtype(out_dtype) == np.float16 else 0.0
    err = np.abs(got - want)
    bad = err > 3 * u * scale + floor
    assert not np.any(bad), f"max err {err.max()} at {np.argwhere(bad)[:3].tolist()}"


# ---------------------------------------------------------------------------------------------
# Float64 references, written here (not llmm's C++ reference)

def ref_matmul(a, b, ta, tb):
    A = np.asarray(a, np.float64)
    B = np.asarray(b, np.float64)
    if ta:
        A = np.swapaxes(A, -1, -2)
    if tb:
        B = np.swapaxes(B, -1, -2)
    return A @ B, np.abs(A) @ np.abs(B)


def ref_matmul_id(w, x, ids, layout):
    """out[t, s] = w[ids[t, s]] @ row(t, s), zero for ids outside [0, E)."""
    e_count, n = w.shape[0], w.shape[1]
    m, top_k = ids.shape
    W = np.asarray(w, np.float64)
    X = np.asarray(x, np.float64)
    out = np.zeros((m, top_k, n))
    scale = np.zeros((m, top_k, n))
    for t in range(m):
        for s in range(top_k):
            e = int(ids[t, s])
            if not 0 <= e < e_count:
                continue
            row = X[t] if layout == "shared" else X[t, s] if X.ndim == 3 else X[t * top_k + s]
            out[t, s] = W[e] @ row
            scale[t, s] = np.abs(W[e]) @ np.abs(row)
    return out, scale


def tq2_decode(aos, n, k):
    """TQ2_0_g128 bytes -> float64 [n, k]: per 128 weights 32 bytes of 2-bit codes (LSB first; code c
    means c - 1) and an f16 scale."""
    blocks = np.frombuffer(bytes(aos), np.uint8).reshape(n, k // 128, 34)
    codes = (blocks[:, :, :32, None] >> np.array([0, 2, 4, 6], np.uint8)) & 3
    scale = blocks[:, :, 32:34].copy().view(np.float16).astype(np.float64)  # [n, blocks, 1]
    w = (codes.reshape(n, k // 128, 128).astype(np.float64) - 1) * scale
    return w.reshape(n, k)


def tq2_encode(rng, n, k):
    """Random TQ2 bytes (codes 0..2, finite f16 scales, some zero) and the weight they mean."""
    codes = rng.integers(0, 3, (n, k // 128, 128)).astype(np.uint8)
    packed = (codes.reshape(n, k // 128, 32, 4) << np.array([0, 2, 4, 6], np.uint8)).sum(-1, dtype=np.uint8)
    scales = (rng.random((n, k // 128)) * np.where(rng.random((n, k // 128)) < 0.1, 0, 2)).astype(np.float16)
    blob = np.concatenate([packed, scales[:, :, None].view(np.uint8).reshape(n, k // 128, 2)], axis=2)
    return blob.tobytes()


# ---------------------------------------------------------------------------------------------
# Item 1: matmul_id is checked by shape (before: by byte counts only)

@pytest.mark.parametrize("case", ["n_smaller_than_weights", "k_disagrees", "out_fewer_tokens"])
def test_matmul_id_shape_mismatches_are_refused(case):
    # The issue: each of these was accepted (the byte counts sufficed) and out was written. The C++
    # shape checks (matmul_id_params) refuse them since c120ae2; the bindings now pass the views
    # alone (no top_k / n_experts / expert stride of their own that could disagree with them).
    w, x, ids, out = {
        "n_smaller_than_weights": (np.ones((8, 64, 128), np.float32), np.ones((4, 64), np.float32),
                                   np.zeros((4, 2), np.uint32), np.full((4, 2, 64), 7, np.float32)),
        "k_disagrees": (np.ones((2, 3, 8), np.float32), np.ones((1, 4), np.float32), np.array([[1]], np.uint32),
                        np.full((1, 1, 3), 7, np.float32)),
        "out_fewer_tokens": (np.ones((4, 2, 3), np.float32), np.ones((3, 3), np.float32),
                             np.zeros((3, 1), np.uint32), np.full((3, 2, 2), 7, np.float32)),
    }[case]
    saved = snapshot([w, x, ids, out])
    with pytest.raises(llmm.Error, match="matmul_id: (input|output) must be"):
        llmm.matmul_id(w, x, ids, out)
    assert_unchanged([w, x, ids, out], saved)


def test_matmul_id_n_beyond_u32_is_never_computed_as_1():
    # The issue: out [1, 1, 2^32 + 1] was narrowed to n = 1 with a plain cast, and out[0, 0, 0]
    # written. Before this change the bindings still narrowed with casts, and size arguments beyond
    # u32 raised nanobind's "incompatible function arguments".
    n = (1 << 32) + 1
    wbuf = np.ones(64, np.float32)
    w = as_strided(wbuf, (1, n, 4), (wbuf.nbytes, 16, 4))  # rows alias: never read, a view of 256 bytes
    buf = np.full(4, np.nan, np.float32)
    out = as_strided(buf, (1, 1, n), (4, 4, 4))  # contiguous in form, 4 real elements behind it
    with pytest.raises(llmm.Error, match=r"n 4294967297 is outside 0\.\.4294967295"):
        llmm.matmul_id(w, np.ones((1, 4), np.float32), np.zeros((1, 1), np.int32), out)
    assert np.all(np.isnan(buf))
    with pytest.raises(llmm.Error, match=r"n 4294967297 is outside 0\.\.4294967295"):  # refused before allocating
        llmm.matmul_id(w, np.ones((1, 4), np.float32), np.zeros((1, 1), np.int32))
    # and sizes given as ints are range-checked, never narrowed
    with pytest.raises(llmm.Error, match="n 4294967297 is too large"):
        llmm.matmul_id_capability("f32", 1, n, 4, 1, 1, 16)
    with pytest.raises(llmm.Error, match="max_tokens 4294967296 is too large"):
        llmm.matmul_id_scratch(4, 1 << 32)


# ---------------------------------------------------------------------------------------------
# Item 5: a stale handle never releases a later upload under its key

def test_release_by_stale_handle_keeps_the_later_upload():
    # Before: release_tq2(stale) popped (device, key) and evicted the key, whatever it held then.
    rng = np.random.default_rng(5)
    key = 987654321
    first = llmm.upload_tq2(tq2_encode(rng, 8, 128), 8, 128, key=key)
    assert llmm.release_tq2(first)
    blob = tq2_encode(rng, 8, 128)
    second = llmm.upload_tq2(blob, 8, 128, key=key)
    assert second.key == first.key and second.upload_id != first.upload_id
    assert not llmm.release_tq2(first)  # stale: releases nothing
    assert llmm._tq2_lookup("cpu", key).upload_id == second.upload_id  # torch.ops.llmm.gemm_tq2 still finds it
    assert llmm.upload_tq2(blob, 8, 128, key=key).upload_id == second.upload_id  # still cached: no new upload
    assert llmm.release_tq2(second)
    assert not llmm.release_tq2(second)


# ---------------------------------------------------------------------------------------------
# Item 6: no binding writes into an implicit copy

@pytest.mark.parametrize("bad", ["float64", "non_contiguous", "read_only", "wrong_shape"])
def test_tq2_dequantize_out_is_never_an_implicit_copy(bad):
    # Before: a float64 or non-contiguous out was converted to a temporary; the caller's array stayed
    # unchanged and no error was raised.
    rng = np.random.default_rng(6)
    blob = tq2_encode(rng, 4, 128)
    out = {"float64": np.full((4, 128), 7.0),
           "non_contiguous": np.full((128, 4), 7, np.float32).T,
           "read_only": readonly(np.full((4, 128), 7, np.float32)),
           "wrong_shape": np.full((4, 256), 7, np.float32)}[bad]
    with pytest.raises(llmm.Error, match="llmm.dequantize_tq2: out"):
        llmm._llmm.tq2_dequantize(blob, 4, 128, out)
    assert np.all(out == 7)
    good = np.full((4, 128), 7, np.float32)
    assert llmm._llmm.tq2_dequantize(blob, 4, 128, good) is good
    np.testing.assert_array_equal(good, tq2_decode(blob, 4, 128))


def test_matmul_out_of_another_dtype_is_refused_not_copied():
    out = np.full((3, 4), 7.0)
    with pytest.raises(llmm.Error, match="llmm.matmul: out has unsupported dtype float64"):
        llmm.matmul(np.ones((3, 5), np.float32), np.ones((5, 4), np.float32), out)
    assert np.all(out == 7)


# ---------------------------------------------------------------------------------------------
# Valid inputs that were refused: empty arrays, read-only inputs, padded views, int64 ids

def test_matmul_empty_operands_with_zero_strides():
    # The issue: NumPy 2's (0, 0) strides and every m/n/k/batch = 0 were refused (fixed in C++ by
    # 9b8dae3; pinned here at the Python boundary, k = 0 into a caller's out included).
    b = rand(np.random.default_rng(1), 5, 3)
    assert llmm.matmul(zeros_view((0, 5)), b).shape == (0, 3)  # m = 0
    assert llmm.matmul(rand(np.random.default_rng(2), 4, 5), zeros_view((5, 0))).shape == (4, 0)  # n = 0
    y = llmm.matmul(zeros_view((4, 0)), zeros_view((0, 3)))  # k = 0: zeros
    assert y.shape == (4, 3) and np.all(y == 0)
    out = np.full((4, 3), np.nan, np.float32)
    assert llmm.matmul(zeros_view((4, 0)), zeros_view((0, 3)), out) is out and np.all(out == 0)
    assert llmm.matmul(zeros_view((0, 4, 5)), b).shape == (0, 4, 3)  # batch = 0
    assert llmm.matmul(zeros_view((0, 5), np.float16), zeros_view((5, 3), np.float16).copy()).dtype == np.float16


def test_gemm_tq2_empty_x():
    # The issue: m = 0 (strides (0, 0)) was refused (fixed in C++ by 9b8dae3; pinned here).
    weight = llmm.upload_tq2(tq2_encode(np.random.default_rng(3), 6, 128), 6, 128)
    y = llmm.gemm_tq2(weight, zeros_view((0, 128)))
    assert y.shape == (0, 6) and y.dtype == np.float32
    assert llmm.gemm_tq2(weight, np.empty((0, 128), np.float16), out_dtype="float16").shape == (0, 6)
    llmm.release_tq2(weight)


def test_matmul_id_empty_and_zero_sizes():
    # Before: int64 ids were refused; m, top_k = 0, k = 0 and no experts give empty results / zeros.
    rng = np.random.default_rng(4)
    w = rand(rng, 3, 5, 8)
    assert llmm.matmul_id(w, zeros_view((0, 8)), np.empty((0, 2), np.int64)).shape == (0, 2, 5)  # m = 0
    assert llmm.matmul_id(w, rand(rng, 2, 8), np.empty((2, 0), np.int32)).shape == (2, 0, 5)  # top_k = 0
    y = llmm.matmul_id(zeros_view((3, 5, 0)), zeros_view((2, 0)), np.zeros((2, 2), np.uint32))  # k = 0
    assert y.shape == (2, 2, 5) and np.all(y == 0)
    y = llmm.matmul_id(zeros_view((0, 5, 8)), rand(rng, 2, 8), np.zeros((2, 1), np.int64))  # no experts
    assert y.shape == (2, 1, 5) and np.all(y == 0)


def test_read_only_inputs_are_taken():
    # Before: every read-only input was refused with nanobind's TypeError.
    rng = np.random.default_rng(8)
    a, w = readonly(rand(rng, 4, 16)), rand(rng, 6, 16)
    wb = np.broadcast_to(w, (3, 6, 16))  # read-only, batch stride 0
    y = llmm.matmul(np.broadcast_to(a, (3, 4, 16)), wb, transpose_b=True)
    want, scale = ref_matmul(np.broadcast_to(a, (3, 4, 16)), wb, False, True)
    check_close(y, want, scale, np.float32)
    we, x = np.broadcast_to(rand(rng, 4, 7, 16), (4, 7, 16)), readonly(rand(rng, 5, 16))
    ids = readonly(rng.integers(0, 4, (5, 2)).astype(np.int32))
    for route in ("direct", "grouped"):
        scratch = llmm.matmul_id_scratch(4, 5) if route == "grouped" else None
        y = llmm.matmul_id(we, x, ids, route=route, scratch=scratch)
        check_close(y, *ref_matmul_id(we, x, ids, "shared"), np.float32)
    blob = np.frombuffer(tq2_encode(rng, 6, 128), np.uint8)  # a read-only uint8 array as the blob
    weight = llmm.upload_tq2(blob, 6, 128)
    xt = readonly(rand(rng, 3, 128))
    check_close(llmm.gemm_tq2(weight, xt), xt.astype(np.float64) @ tq2_decode(blob, 6, 128).T,
                np.abs(xt.astype(np.float64)) @ np.abs(tq2_decode(blob, 6, 128)).T, np.float32)
    llmm.release_tq2(weight)


@pytest.mark.parametrize("route", ["direct", "grouped"])
@pytest.mark.parametrize("layout", ["shared", "slotted"])
def test_matmul_id_padded_expert_stride_and_rows(route, layout):
    # Before: a slice of a larger stack (padded expert stride) and x with padded rows were refused as
    # "not contiguous".
    rng = np.random.default_rng(9)
    e, n, k, m, top_k = 5, 6, 12, 7, 2
    big = rand(rng, 2 * e, n + 3, k)
    rows = m if layout == "shared" else m * top_k
    x_big = rand(rng, rows, k + 5)
    ids = np.stack([rng.permutation(e)[:top_k] for _ in range(m)]).astype(np.int64)
    for w in (big[:e, :n, :], big[::2, :n, :], big[::2]):
        scratch = llmm.matmul_id_scratch(e, m) if route == "grouped" else None
        x = x_big[:, :k]
        y = llmm.matmul_id(w, x, ids, layout=layout, route=route, scratch=scratch)
        check_close(y, *ref_matmul_id(w, x, ids, layout), np.float32)


@pytest.mark.parametrize("route", ["direct", "grouped"])
@pytest.mark.parametrize("ids_dtype", [np.int64, np.int32, np.uint32])
def test_matmul_id_ids_dtypes_and_out_of_range(route, ids_dtype):
    # Before: int64 ids were refused, and int32 ids were relabelled uint32.
    rng = np.random.default_rng(10)
    e, n, k, m, top_k = 4, 5, 9, 6, 3
    w, x = rand(rng, e, n, k), rand(rng, m, k)
    ids = rng.integers(0, e, (m, top_k)).astype(np.int64)  # repeats allowed on both routes
    bad = {np.int64: [-1, (1 << 32) + 1, 1 << 40, e], np.int32: [-1, -(1 << 31), e], np.uint32: [U32, e]}[ids_dtype]
    for i, v in enumerate(bad):
        ids[i % m, i % top_k] = v
    ids = ids.astype(ids_dtype)
    scratch = llmm.matmul_id_scratch(e, m, max_top_k=top_k) if route == "grouped" else None
    y = llmm.matmul_id(w, x, ids, route=route, scratch=scratch, may_repeat=True)
    want, scale = ref_matmul_id(w, x, ids.astype(np.int64), "shared")
    check_close(y, want, scale, np.float32)
    for i in range(len(bad)):
        assert np.all(y[i % m, i % top_k] == 0)  # 2^32 + 1 is out of range, not expert 1


# ---------------------------------------------------------------------------------------------
# Error surface

def test_cuda_device_without_cuda_is_an_llmm_error():
    # Before: ModuleNotFoundError (importing torch for the device string) on a CPU-only install.
    if llmm.cuda_available():
        pytest.skip("a CUDA device is available: 'cuda:0' is valid here")
    for call in (lambda: llmm.upload_tq2(b"", 1, 128, device="cuda:0"),
                 lambda: llmm.matmul_id_scratch(4, 4, "cuda"),
                 lambda: llmm.plan_matmul(1, 2, 3, "cuda:0")):
        with pytest.raises(llmm.Error, match="(built without CUDA|no CUDA device is available)"):
            call()


def test_plan_matmul_refuses_negative_sizes():
    # Before: plan_matmul(-5, 3, 3, "cpu") returned a plan.
    with pytest.raises(llmm.Error, match="llmm.plan_matmul: m -5 is negative"):
        llmm.plan_matmul(-5, 3, 3, "cpu")


def test_non_arrays_raise_typeerror_with_llmms_message():
    # Before: nanobind's "incompatible function arguments" dump, or AttributeError from the wrapper.
    with pytest.raises(TypeError, match=r"^llmm.matmul: a must be an array \(NumPy, torch, CuPy, JAX: anything with "
                                        r"__dlpack__\), got str$"):
        llmm.matmul("abc", np.ones((2, 2), np.float32))
    with pytest.raises(TypeError, match="^llmm.matmul_id: scratch must be None or a llmm.MatmulIdScratch"):
        llmm.matmul_id(np.ones((1, 2, 3), np.float32), np.ones((1, 3), np.float32), np.zeros((1, 1), np.int32),
                       scratch="big")
    with pytest.raises(TypeError, match="^llmm.TernaryWeight cannot be created directly"):
        llmm.TernaryWeight()


def test_blobs_are_any_contiguous_bytes_like_object():
    # Before: only bytes; a bytearray raised nanobind's TypeError.
    rng = np.random.default_rng(11)
    blob = tq2_encode(rng, 3, 256)
    want = tq2_decode(blob, 3, 256)
    for b in (blob, bytearray(blob), memoryview(blob), np.frombuffer(blob, np.uint8).copy()):
        np.testing.assert_array_equal(llmm.dequantize_tq2(b, 3, 256), want)
    with pytest.raises(llmm.Error, match="aos must be C-contiguous bytes"):
        llmm.dequantize_tq2(memoryview(blob + blob)[::2], 3, 256)
    with pytest.raises(llmm.Error, match=r"aos must hold bytes \(1-byte items\), got float32"):
        llmm.dequantize_tq2(np.frombuffer(blob[:204], np.float32), 3, 256)


def test_odd_byte_strides_name_the_argument():
    x = as_strided(np.ones(64, np.float32), (3, 4), (18, 4))  # 18 bytes: 4.5 floats
    with pytest.raises(llmm.Error, match=r"llmm.matmul: b has byte strides \(18, 4\) that are not a multiple of "
                                         r"its 4-byte items"):
        llmm.matmul(np.ones((2, 3), np.float32), x)


# ---------------------------------------------------------------------------------------------
# Hostile-input sweep over every public function

def hostile_calls():
    """(label, call, arrays the call must leave unchanged) for every public function of llmm."""
    rng = np.random.default_rng(12)
    f32 = lambda *s: rand(rng, *s)  # noqa: E731
    calls = []

    def add(label, fn, *outs):
        calls.append((label, fn, outs))

    not_arrays = [None, "abc", 5, 2.5, [[1.0, 2.0]], b"abcd", bytearray(16), object(), np.float32(1)]
    bad_arrays = [np.ones((), np.float32), np.ones(4, np.float32), np.ones((2,) * 5, np.float32),
                  np.ones((4, 4)), np.ones((4, 4), np.int8), np.ones((4, 4), bool), np.ones((4, 4), np.complex64),
                  np.ones((4, 4), np.uint8), np.ones((4, 4), object), f32(4, 8)[:, ::2], f32(4, 4)[::-1],
                  as_strided(np.ones(64, np.float32), (4, 4), (18, 4)), np.ones((4, 4), np.int64)]
    bad_ints = [-1, -(1 << 63) - 1, 1 << 64, 1 << 70, "3", 3.0, None, [3], np.int64(-1), True]
    bad_strs = [None, 5, "bogus", "", b"exact"]
    bad_bools = ["yes", None, 2, [], 1.0]
    bad_devices = ["gpu", "cuda:x", "cuda:-1", "cuda:", "CPU", "", 5, None, 2.0, b"cpu"]
    if not llmm.cuda_available():
        bad_devices += ["cuda", "cuda:0", "cuda:1"]

    # matmul
    a, b = f32(4, 8), f32(8, 3)
    for i, v in enumerate(not_arrays + bad_arrays):
        out = np.full((4, 3), 7, np.float32)
        add(f"matmul a #{i}", lambda v=v, out=out: llmm.matmul(v, b, out), out)
        out2 = np.full((4, 3), 7, np.float32)
        add(f"matmul b #{i}", lambda v=v, out=out2: llmm.matmul(a, v, out2), out2)
        add(f"matmul a alloc #{i}", lambda v=v: llmm.matmul(v, b))
    for i, v in enumerate(not_arrays[1:] + [np.full((4, 3), 7.0), np.full((3, 4), 7, np.float32),
                                             readonly(np.full((4, 3), 7, np.float32)),
                                             np.full((4, 6), 7, np.float32)[:, ::2],
                                             np.full((4, 3), 7, np.float16), np.full((4, 3, 1), 7, np.float32)]):
        add(f"matmul out #{i}", lambda v=v: llmm.matmul(a, b, v), v if isinstance(v, np.ndarray) else None)
    for name in ("transpose_a", "transpose_b"):
        for v in bad_bools:
            out = np.full((4, 3), 7, np.float32)
            add(f"matmul {name}={v!r}", lambda name=name, v=v, out=out: llmm.matmul(a, b, out, **{name: v}), out)
    for name in ("precision", "route"):
        for v in bad_strs + (["gemv", "tq2_tiled"] if name == "route" else ["EXACT"]):
            out = np.full((4, 3), 7, np.float32)
            add(f"matmul {name}={v!r}", lambda name=name, v=v, out=out: llmm.matmul(a, b, out, **{name: v}), out)
    out = np.full((4, 3), 7, np.float32)
    add("matmul k mismatch", lambda out=out: llmm.matmul(a, f32(7, 3), out), out)
    out = np.full((4, 8), 7, np.float32)
    add("matmul out overlaps a", lambda: llmm.matmul(out[:, :4], f32(4, 4), out[:, 4:]), out)

    # plan_matmul
    for i, v in enumerate(bad_ints):
        for pos in range(3):
            args = [4, 5, 6]
            args[pos] = v
            add(f"plan_matmul size {pos} #{i}", lambda args=args: llmm.plan_matmul(*args, "cpu"))
    for i, v in enumerate(bad_devices + [np.ones(3), np.ones(3, np.int32), np.ones(3, bool), object()]):
        add(f"plan_matmul like #{i}", lambda v=v: llmm.plan_matmul(4, 5, 6, v))
    for v in bad_bools:
        add(f"plan_matmul transpose_a={v!r}", lambda v=v: llmm.plan_matmul(4, 5, 6, "cpu", transpose_a=v))
    for v in bad_strs:
        add(f"plan_matmul precision={v!r}", lambda v=v: llmm.plan_matmul(4, 5, 6, "cpu", precision=v))

    # quantize_tq2 / dequantize_tq2
    wq = f32(4, 256)
    for i, v in enumerate([None, "abc", 5, object(), np.ones((4, 256), bool), np.ones((4, 256), np.complex64),
                           np.ones((4, 200), np.float32), np.ones(256, np.float32), np.ones((2, 4, 256), np.float32),
                           np.full((4, 256), np.inf, np.float32), np.full((4, 256), 1e6, np.float32),
                           [[1.0, 2.0], [3.0]], np.ones((0, 256), np.float32), np.ones((4, 0), np.float32)]):
        add(f"quantize_tq2 w #{i}", lambda v=v: llmm.quantize_tq2(v))
    for v in bad_strs:
        add(f"quantize_tq2 rule={v!r}", lambda v=v: llmm.quantize_tq2(wq, v))
    blob = llmm.quantize_tq2(wq)
    bad_blobs = [None, "abc", 5, 2.5, object(), [1, 2], np.ones(len(blob) // 4, np.float32), memoryview(blob)[::2],
                 blob[:-1], blob + b"\0", b"", np.ones((4, 4), np.uint8)[:, ::2]]
    code3 = bytearray(blob)
    code3[0] = 0xFF
    inf_scale = bytearray(blob)
    inf_scale[32:34] = np.array([np.inf], np.float16).tobytes()
    nan_scale = bytearray(blob)
    nan_scale[32:34] = np.array([np.nan], np.float16).tobytes()
    bad_blobs += [bytes(code3), bytes(inf_scale), nan_scale]
    for i, v in enumerate(bad_blobs):
        add(f"dequantize_tq2 aos #{i}", lambda v=v: llmm.dequantize_tq2(v, 4, 256))
        add(f"upload_tq2 aos #{i}", lambda v=v: llmm.upload_tq2(v, 4, 256))
    for i, v in enumerate(bad_ints + [0, 100]):
        add(f"dequantize_tq2 n #{i}", lambda v=v: llmm.dequantize_tq2(blob, v, 256))
        add(f"dequantize_tq2 k #{i}", lambda v=v: llmm.dequantize_tq2(blob, 4, v))
        add(f"upload_tq2 n #{i}", lambda v=v: llmm.upload_tq2(blob, v, 256))
        add(f"upload_tq2 k #{i}", lambda v=v: llmm.upload_tq2(blob, 4, v))
    for i, v in enumerate([-1, 1 << 64, "k", 2.0, [1]]):
        add(f"upload_tq2 key #{i}", lambda v=v: llmm.upload_tq2(blob, 4, 256, key=v))
    for i, v in enumerate(bad_devices + [np.ones(2, object), object()]):
        add(f"upload_tq2 device #{i}", lambda v=v: llmm.upload_tq2(blob, 4, 256, device=v))
    held = llmm.upload_tq2(blob, 4, 256, key=4242)
    add("upload_tq2 same key, other shape", lambda: llmm.upload_tq2(llmm.quantize_tq2(f32(8, 128)), 8, 128, key=4242))

    # release_tq2
    for i, v in enumerate([None, "w", 5, 4242, object(), blob, np.ones(3, np.float32)]):
        add(f"release_tq2 #{i}", lambda v=v: llmm.release_tq2(v))

    # gemm_tq2
    x = f32(3, 256)
    for i, v in enumerate([None, "w", 5, object(), blob, np.ones(3, np.float32)]):
        out = np.full((3, 4), 7, np.float32)
        add(f"gemm_tq2 weight #{i}", lambda v=v, out=out: llmm.gemm_tq2(v, x, out), out)
    for i, v in enumerate(not_arrays + bad_arrays + [f32(3, 128), f32(3, 512), f32(3, 256)[:, ::-1]]):
        out = np.full((3, 4), 7, np.float32)
        add(f"gemm_tq2 x #{i}", lambda v=v, out=out: llmm.gemm_tq2(held, v, out), out)
        add(f"gemm_tq2 x alloc #{i}", lambda v=v: llmm.gemm_tq2(held, v))
    for i, v in enumerate(not_arrays[1:] + [np.full((3, 4), 7.0), np.full((3, 5), 7, np.float32),
                                             np.full((4, 4), 7, np.float32), readonly(np.full((3, 4), 7, np.float32)),
                                             np.full((3, 8), 7, np.float32)[:, ::2], np.full((3, 4), 7, np.float16),
                                             np.full((3, 4), 7, np.int32)]):
        add(f"gemm_tq2 out #{i}", lambda v=v: llmm.gemm_tq2(held, x, v), v if isinstance(v, np.ndarray) else None)
    for name, values in (("precision", bad_strs), ("route", bad_strs + ["tq2_stream", "tq2_stream_v2", "tq2_dequant_lt", "direct"]),
                         ("out_dtype", ["bf16", "float7", 5, object(), "int8", np.complex64])):
        for v in values:
            out = np.full((3, 4), 7, np.float32)
            if name == "out_dtype":
                add(f"gemm_tq2 {name}={v!r}", lambda v=v: llmm.gemm_tq2(held, x, out_dtype=v))
            else:
                add(f"gemm_tq2 {name}={v!r}", lambda name=name, v=v, out=out: llmm.gemm_tq2(held, x, out, **{name: v}),
                    out)
    out = np.full((3, 260), 7, np.float32)
    add("gemm_tq2 out overlaps x", lambda: llmm.gemm_tq2(held, out[:, :256], out[:, 256:]), out)

    # plan_tq2
    for i, v in enumerate(bad_ints + [0]):
        for pos in range(3):
            args = [3, 64, 256]
            args[pos] = v
            if not (pos == 0 and v == 0):
                add(f"plan_tq2 size {pos} #{i}", lambda args=args: llmm.plan_tq2(*args, "cpu"))
    add("plan_tq2 k 200", lambda: llmm.plan_tq2(3, 64, 200, "cpu"))
    for i, v in enumerate(bad_devices + [np.ones(3), np.ones(3, np.uint32)]):
        add(f"plan_tq2 like #{i}", lambda v=v: llmm.plan_tq2(3, 64, 256, v))
    for v in ["bf16", "float16", "float7", 5, object(), "int64"]:
        add(f"plan_tq2 out_dtype={v!r}", lambda v=v: llmm.plan_tq2(3, 64, 256, "cpu", out_dtype=v))
    for name in ("precision", "route"):
        for v in bad_strs:
            add(f"plan_tq2 {name}={v!r}", lambda name=name, v=v: llmm.plan_tq2(3, 64, 256, "cpu", **{name: v}))

    # matmul_id
    w, xm, ids = f32(4, 5, 8), f32(3, 8), np.array([[0, 1], [2, 3], [1, 0]], np.int32)
    good_out = lambda: np.full((3, 2, 5), 7, np.float32)  # noqa: E731
    for pos, name in enumerate(("weights", "x", "ids")):
        for i, v in enumerate(not_arrays + bad_arrays + [f32(4, 5, 8)[:, :, ::2], f32(4, 5, 9)[:, :, :8],
                                                         f32(3, 8, 2)[:, :, 0], np.ones((3, 2), np.float32),
                                                         np.ones((3, 4), np.int32)[:, ::2], np.ones((3, 2, 1), np.int32),
                                                         np.ones((2, 2), np.int32), np.ones((3, 2), np.int16)]):
            args = [w, xm, ids]
            args[pos] = v
            out = good_out()
            add(f"matmul_id {name} #{i}", lambda args=args, out=out: llmm.matmul_id(*args, out), out)
            if pos != 2 and i % 3 == 0:
                add(f"matmul_id {name} alloc #{i}", lambda args=args: llmm.matmul_id(*args))
    for i, v in enumerate(not_arrays[1:] + [np.full((3, 2, 5), 7.0), np.full((3, 2, 4), 7, np.float32),
                                             np.full((2, 2, 5), 7, np.float32), np.full((3, 1, 5), 7, np.float32),
                                             readonly(np.full((3, 2, 5), 7, np.float32)),
                                             np.full((3, 2, 10), 7, np.float32)[:, :, ::2],
                                             np.full((3, 2, 5), 7, np.float16), np.full((6, 5), 7, np.float32)]):
        add(f"matmul_id out #{i}", lambda v=v: llmm.matmul_id(w, xm, ids, v), v if isinstance(v, np.ndarray) else None)
    small = llmm.matmul_id_scratch(2, 2)
    for name, values in (("layout", bad_strs + ["slotted"]), ("route", bad_strs + ["grouped_prefill"]),
                         ("precision", bad_strs), ("may_repeat", bad_bools),
                         ("scratch", ["big", 5, object(), small, held]),
                         ("out_dtype", ["bf16", "float7", 5, "int8"])):
        for v in values:
            out = good_out()
            kw = {name: v}
            if name == "scratch" or (name == "route" and v == "grouped"):
                kw["route"] = "grouped"
            if name == "out_dtype":
                add(f"matmul_id {name}={v!r}", lambda kw=kw: llmm.matmul_id(w, xm, ids, **kw))
            else:
                add(f"matmul_id {name}={v!r}", lambda kw=kw, out=out: llmm.matmul_id(w, xm, ids, out, **kw), out)
    out = good_out()
    add("matmul_id distinct top_k > E",
        lambda out=out: llmm.matmul_id(f32(1, 5, 8), xm, np.zeros((3, 2), np.int32), out), out)
    big_out = np.full(4, np.nan, np.float32)
    wbuf = np.ones(64, np.float32)
    add("matmul_id n = 2^32 + 1",
        lambda: llmm.matmul_id(as_strided(wbuf, (1, (1 << 32) + 1, 4), (256, 16, 4)), f32(1, 4),
                               np.zeros((1, 1), np.int64), as_strided(big_out, (1, 1, (1 << 32) + 1), (4, 4, 4))),
        big_out)

    # matmul_id_capability
    cap_args = ["f32", 9, 7, 35, 2, 4, 7 * 35 * 4]
    for i, v in enumerate(bad_ints + [0, 1 << 32]):
        for pos in range(1, 7):
            args = list(cap_args)
            args[pos] = v
            if not (v == 1 << 32 and pos == 6):
                add(f"matmul_id_capability arg {pos} #{i}", lambda args=args: llmm.matmul_id_capability(*args))
    for v in ["f64", "float64", 5, None, object(), "u8", "i64"]:
        add(f"matmul_id_capability weight_dtype={v!r}", lambda v=v: llmm.matmul_id_capability(v, *cap_args[1:]))
    for name, values in (("layout", bad_strs), ("route", bad_strs), ("may_repeat", bad_bools),
                         ("input_dtype", ["f64", 5, "u32"]), ("output_dtype", ["i32", "f64", None]),
                         ("ids_dtype", ["f32", "i16", 5]), ("input_token_stride", [-1, "a", 1 << 64, 2.0]),
                         ("input_slot_stride", [-1, "a", 4])):
        for v in values:
            add(f"matmul_id_capability {name}={v!r}",
                lambda name=name, v=v: llmm.matmul_id_capability(*cap_args, **{name: v}))
    add("matmul_id_capability stride too small", lambda: llmm.matmul_id_capability("f32", 1, 1, 7, 1, 2, 12))

    # matmul_id_scratch
    for i, v in enumerate(bad_ints + [0, 1 << 32]):
        add(f"matmul_id_scratch max_experts #{i}", lambda v=v: llmm.matmul_id_scratch(v, 4))
        add(f"matmul_id_scratch max_tokens #{i}", lambda v=v: llmm.matmul_id_scratch(4, v))
        if v != 0:
            add(f"matmul_id_scratch max_top_k #{i}", lambda v=v: llmm.matmul_id_scratch(4, 4, max_top_k=v))
    for i, v in enumerate(bad_devices + [np.ones(2, object)]):
        add(f"matmul_id_scratch device #{i}", lambda v=v: llmm.matmul_id_scratch(4, 4, v))
    add("matmul_id_scratch huge (overflow)", lambda: llmm.matmul_id_scratch(U32, U32, max_top_k=U32))
    try:
        overcommit_always = open("/proc/sys/vm/overcommit_memory").read().strip() == "1"
    except OSError:
        overcommit_always = True
    if not overcommit_always:  # 4 TiB of host memory: refused by the allocator, an llmm.Error (OutOfMemory)
        add("matmul_id_scratch huge (4 TiB)", lambda: llmm.matmul_id_scratch(1 << 20, 1 << 20, max_top_k=1 << 20))

    # suggest_matmul_id_route
    for i, v in enumerate(bad_ints):
        for pos in range(5):
            args = [4, 768, 2048, 8, 128]
            args[pos] = v
            add(f"suggest_matmul_id_route arg {pos} #{i}", lambda args=args: llmm.suggest_matmul_id_route(*args, "cpu"))
    for i, v in enumerate(bad_devices + [np.ones(2), object()]):
        add(f"suggest_matmul_id_route like #{i}", lambda v=v: llmm.suggest_matmul_id_route(4, 768, 2048, 8, 128, v))
    for v in bad_bools:
        add(f"suggest_matmul_id_route may_repeat={v!r}",
            lambda v=v: llmm.suggest_matmul_id_route(4, 768, 2048, 8, 128, "cpu", may_repeat=v))

    # the classes are made by functions only
    add("TernaryWeight()", lambda: llmm.TernaryWeight())
    add("MatmulIdScratch(4, 4)", lambda: llmm.MatmulIdScratch(4, 4))
    return calls, held


def classify(call):
    """'llmm.Error', 'TypeError(llmm)' or what else happened (for the report)."""
    try:
        call()
    except llmm.Error:
        return "llmm.Error"
    except TypeError as e:
        msg = str(e)
        if "incompatible function arguments" in msg:
            return "TypeError(nanobind)"
        return "TypeError(llmm)" if msg.startswith("llmm") else "TypeError(other)"
    except Exception as e:  # noqa: BLE001
        return type(e).__name__
    return "no error"


def test_hostile_inputs_raise_llmm_errors_and_write_nothing():
    calls, held = hostile_calls()
    counts = {}
    failures = []
    for label, call, outs in calls:
        saved = snapshot(outs)
        kind = classify(call)
        counts[kind] = counts.get(kind, 0) + 1
        if kind not in ("llmm.Error", "TypeError(llmm)"):
            failures.append(f"{label}: {kind}")
        for o, s in zip(outs, saved):
            if o is not None and np.asarray(o).tobytes() != s.tobytes():
                failures.append(f"{label}: wrote into an output")
    llmm.release_tq2(held)
    print(f"\n{len(calls)} hostile calls: {counts}")
    assert len(calls) >= 300
    assert not failures, "\n".join(failures)


# ---------------------------------------------------------------------------------------------
# Property tests: random valid calls against float64 NumPy, random invalid calls change nothing

SIZES = [0, 1, 2, 3, 5, 8, 13, 17, 33]


def layout_matrix(rng, rows, cols, dtype, transposed_ok=True):
    """A [rows, cols] matrix in one of several memory layouts (all valid for llmm): contiguous, padded
    rows, a transposed view of a row-major base (taken by llmm as base + flipped flag), read-only."""
    kind = rng.choice(["contiguous", "padded", "transposed", "readonly"] if transposed_ok else
                      ["contiguous", "padded", "readonly"])
    if kind == "padded":
        return rand(rng, rows, cols + int(rng.integers(1, 4)), dtype=dtype)[:, :cols]
    if kind == "transposed":
        return rand(rng, cols, rows, dtype=dtype).T
    x = rand(rng, rows, cols, dtype=dtype)
    if kind == "readonly":
        x.flags.writeable = False
    return x


def test_property_matmul():
    rng = np.random.default_rng(2024)
    for it in range(300):
        dtype = rng.choice([np.float32, np.float16])
        m, n, k = (int(rng.choice(SIZES)) for _ in range(3))
        ta, tb = bool(rng.integers(2)), bool(rng.integers(2))
        batch = int(rng.choice([0, 1, 2, 3])) if rng.random() < 0.5 else None

        def operand(rows, cols, transposed):
            r, c = (cols, rows) if transposed else (rows, cols)
            if batch is None or rng.random() < 0.25:
                return layout_matrix(rng, r, c, dtype)
            kind = rng.choice(["broadcast", "contiguous", "padded", "transposed", "batch1"])
            if kind == "broadcast":  # over the batch: batch stride 0, read-only
                return np.broadcast_to(layout_matrix(rng, r, c, dtype), (batch, r, c))
            if kind == "padded":
                return rand(rng, batch, r, c + 2, dtype=dtype)[:, :, :c]
            if kind == "transposed":
                return rand(rng, batch, c, r, dtype=dtype).swapaxes(1, 2)
            if kind == "batch1":
                return rand(rng, 1, r, c, dtype=dtype)
            return rand(rng, batch, r, c, dtype=dtype)

        a, b = operand(m, k, ta), operand(k, n, tb)
        shape = llmm._matmul_out_shape(a.shape, b.shape, ta, tb)
        want, scale = ref_matmul(a, b, ta, tb)
        want, scale = np.broadcast_to(want, shape), np.broadcast_to(scale, shape)
        if rng.random() < 0.5:
            y = llmm.matmul(a, b, transpose_a=ta, transpose_b=tb)
            assert y.shape == shape and y.dtype == dtype
        else:  # a caller's out with padded rows: the padding stays untouched
            big = np.full(shape[:-1] + (shape[-1] + 2,), np.nan, dtype)
            y = big[..., : shape[-1]]
            assert llmm.matmul(a, b, y, transpose_a=ta, transpose_b=tb) is y
            assert np.all(np.isnan(big[..., shape[-1]:]))
        check_close(y, want, scale, dtype)

    # invalid calls: each mutation makes a valid call invalid; nothing is written
    for it in range(200):
        dtype = rng.choice([np.float32, np.float16])
        m, n, k = (int(rng.integers(1, 9)) for _ in range(3))
        a, b = rand(rng, m, k, dtype=dtype), rand(rng, k, n, dtype=dtype)
        out = np.full((m, n), 7, dtype)
        kw = {}
        kind = rng.choice(["k", "out_shape", "out_dtype", "mixed", "inner_stride", "negative", "readonly_out",
                           "rank", "float64", "precision", "route", "overlap", "batch"])
        if kind == "k":
            b = rand(rng, k + 1, n, dtype=dtype)
        elif kind == "out_shape":
            out = np.full((m + 1, n), 7, dtype)
        elif kind == "out_dtype":
            out = np.full((m, n), 7, np.float16 if dtype == np.float32 else np.float32)
        elif kind == "mixed":
            b = b.astype(np.float16 if dtype == np.float32 else np.float32)
        elif kind == "inner_stride":  # element stride 2 (k >= 2; for k = 1 any stride is fine: make k disagree)
            a = rand(rng, m, 2 * k + 2, dtype=dtype)[:, 1::2][:, :k] if k > 1 else rand(rng, m, 3, dtype=dtype)
        elif kind == "negative":
            a = a[::-1] if m > 1 else rand(rng, 2, k, dtype=dtype)[::-1]
            out = np.full((a.shape[0], n), 7, dtype)
        elif kind == "readonly_out":
            out.flags.writeable = False
        elif kind == "rank":
            a = rand(rng, 2, 2, m, k, dtype=dtype)
            out = np.full((2, 2, m, n), 7, dtype)
        elif kind == "float64":
            a, b, out = a.astype(np.float64), b.astype(np.float64), out.astype(np.float64)
        elif kind == "precision":
            kw["precision"] = "tf32"
        elif kind == "route":
            kw["route"] = rng.choice(["gemv", "tiled_sm90", "tiled", "nope"])
        elif kind == "overlap":  # out shares a's rows (two rows at least: the byte ranges then intersect)
            buf = np.full((max(m, 2), k + n), 7, dtype)
            a, out = buf[:, :k], buf[:, k:]
        elif kind == "batch":
            a, b = rand(rng, 2, m, k, dtype=dtype), rand(rng, 3, k, n, dtype=dtype)
            out = np.full((3, m, n), 7, dtype)
        arrays = [a, b, out] + ([a.base] if kind == "overlap" else [])
        saved = snapshot(arrays)
        with pytest.raises(llmm.Error):
            llmm.matmul(a, b, out, **kw)
        assert_unchanged(arrays, saved)


def moe_inputs(rng, e, n, k, m, top_k, dtype, layout, ids_dtype, padded_w, padded_x):
    if padded_w == "slice":
        w = rand(rng, e + 2, n + 2, k, dtype=dtype)[:e, :n, :]
    elif padded_w == "step":
        w = rand(rng, 2 * e, n, k, dtype=dtype)[::2]
    else:
        w = rand(rng, e, n, k, dtype=dtype)
    rows = {"shared": (m,), "slotted": (m * top_k,), "slotted3": (m, top_k)}[layout]
    x = rand(rng, *rows, k + (3 if padded_x else 0), dtype=dtype)[..., :k]
    ids = rng.integers(0, max(e, 1), (m, top_k)).astype(np.int64)
    if m * top_k and rng.random() < 0.5:  # some ids out of range
        extra = {np.int64: [-1, (1 << 32) + 1, e], np.int32: [-1, e, 1 << 30], np.uint32: [e, U32]}[ids_dtype]
        for v in extra:
            ids[rng.integers(m), rng.integers(top_k)] = v
    return w, x, ids.astype(ids_dtype)


def test_property_matmul_id():
    rng = np.random.default_rng(77)
    for it in range(300):
        dtype = rng.choice([np.float32, np.float16])
        e = int(rng.choice([0, 1, 2, 3, 5]))
        n, k = int(rng.choice([0, 1, 3, 7, 16])), int(rng.choice([0, 1, 5, 8, 33]))
        m, top_k = int(rng.choice([0, 1, 2, 5, 9])), int(rng.choice([0, 1, 2, 3]))
        layout = str(rng.choice(["shared", "slotted", "slotted3"]))
        ids_dtype = rng.choice([np.int64, np.int32, np.uint32])
        w, x, ids = moe_inputs(rng, e, n, k, m, top_k, dtype, layout, ids_dtype,
                               rng.choice(["none", "slice", "step"]), bool(rng.integers(2)))
        if rng.random() < 0.3:
            w.flags.writeable = x.flags.writeable = ids.flags.writeable = False
        route = str(rng.choice(["direct", "grouped"]))
        scratch = llmm.matmul_id_scratch(max(e, 1), max(m, 1), max_top_k=max(top_k, 1)) if route == "grouped" else None
        may_repeat = top_k > e or bool(rng.integers(2))
        out_dtype = rng.choice([None, dtype])
        y = llmm.matmul_id(w, x, ids, layout="slotted" if layout != "shared" else "shared", route=route,
                           scratch=scratch, may_repeat=may_repeat, out_dtype=out_dtype)
        assert y.shape == (m, top_k, n) and y.dtype == (out_dtype or np.float32)
        want, scale = ref_matmul_id(w, x, ids.astype(np.int64), "shared" if layout == "shared" else "slotted")
        check_close(y, want, scale, y.dtype)

    for it in range(200):
        dtype = rng.choice([np.float32, np.float16])
        e, n, k, m, top_k = (int(rng.integers(2, 6)) for _ in range(5))
        top_k = min(top_k, e)
        w, x, ids = moe_inputs(rng, e, n, k, m, top_k, dtype, "shared", np.int32, "none", False)
        out = np.full((m, top_k, n), 7, np.float32)
        kw = {}
        kind = rng.choice(["out_n", "out_m", "out_topk", "out_dtype", "out_f64", "ids_f32", "ids_rank", "ids_strided",
                           "w_inner", "w_rows", "x_k", "x_m", "x_inner", "x_negative", "layout", "route", "layout_str",
                           "small_scratch", "readonly_out", "distinct", "w_rank", "precision"])
        if kind == "out_n":
            out = np.full((m, top_k, n - 1), 7, np.float32)
        elif kind == "out_m":
            out = np.full((m + 1, top_k, n), 7, np.float32)
        elif kind == "out_topk":
            out = np.full((m, top_k + 1, n), 7, np.float32)
        elif kind == "out_dtype":
            out = np.full((m, top_k, n), 7, np.float16 if dtype == np.float32 else np.int32)
        elif kind == "out_f64":
            out = np.full((m, top_k, n), 7.0)
        elif kind == "ids_f32":
            ids = ids.astype(np.float32)
        elif kind == "ids_rank":
            ids = ids.reshape(m, top_k, 1)
        elif kind == "ids_strided":
            ids = np.repeat(ids, 2, axis=1)[:, ::2]
        elif kind == "w_inner":
            w = np.repeat(w, 2, axis=2)[:, :, ::2]
        elif kind == "w_rows":
            w = rand(rng, e, n, k + 2, dtype=dtype)[:, :, :k]
        elif kind == "x_k":
            x = rand(rng, m, k + 1, dtype=dtype)
        elif kind == "x_m":
            x = rand(rng, m + 1, k, dtype=dtype)
        elif kind == "x_inner":
            x = np.repeat(x, 2, axis=1)[:, ::2]
        elif kind == "x_negative":
            x = x[::-1]
        elif kind == "layout":  # shared x [m, k] with layout slotted (top_k >= 2: m rows != m * top_k)
            top_k = max(top_k, 2)
            ids = np.zeros((m, top_k), np.int32) + np.arange(top_k, dtype=np.int32)
            out = np.full((m, top_k, n), 7, np.float32)
            kw["layout"] = "slotted"
        elif kind == "route":
            kw["route"] = "auto!"
        elif kind == "layout_str":
            kw["layout"] = "packed"
        elif kind == "small_scratch":
            kw["route"], kw["scratch"] = "grouped", llmm.matmul_id_scratch(e - 1, m)
        elif kind == "readonly_out":
            out.flags.writeable = False
        elif kind == "distinct":
            ids = np.zeros((m, e + 1), np.int32)
            out = np.full((m, e + 1, n), 7, np.float32)
        elif kind == "w_rank":
            w = w.reshape(e, n * k)
        elif kind == "precision":
            kw["precision"] = "fast!"
        arrays = [w, x, ids, out]
        saved = snapshot(arrays)
        with pytest.raises(llmm.Error):
            llmm.matmul_id(w, x, ids, out, **kw)
        assert_unchanged(arrays, saved)


def test_property_gemm_tq2():
    rng = np.random.default_rng(99)
    weights = []
    for n, k in itertools.product([1, 3, 17], [128, 384]):
        blob = tq2_encode(rng, n, k)
        weights.append((llmm.upload_tq2(blob, n, k), tq2_decode(blob, n, k)))
    for it in range(100):
        weight, wf = weights[rng.integers(len(weights))]
        n, k = wf.shape
        dtype = rng.choice([np.float32, np.float16])
        m = int(rng.choice([0, 1, 2, 5, 17]))
        x = layout_matrix(rng, m, k, dtype, transposed_ok=False) if m else zeros_view((0, k), dtype)
        want = x.astype(np.float64) @ wf.T
        scale = np.abs(x.astype(np.float64)) @ np.abs(wf).T
        route = str(rng.choice(["auto", "cpu"]))
        choice = rng.integers(3)
        if choice == 0:
            y = llmm.gemm_tq2(weight, x, route=route)
        elif choice == 1:
            y = llmm.gemm_tq2(weight, x, route=route, out_dtype=np.dtype(dtype).name)
            assert y.dtype == dtype
        else:
            big = np.full((m, n + 3), np.nan, np.float32)
            y = big[:, :n]
            assert llmm.gemm_tq2(weight, x, y, route=route) is y
            assert np.all(np.isnan(big[:, n:]))
        check_close(y, want, scale, y.dtype)

    for it in range(80):
        weight, wf = weights[rng.integers(len(weights))]
        n, k = wf.shape
        dtype = rng.choice([np.float32, np.float16])
        m = int(rng.integers(1, 6))
        x = rand(rng, m, k, dtype=dtype)
        out = np.full((m, n), 7, np.float32)
        kw = {}
        kind = rng.choice(["x_k", "x_rank", "out_shape", "out_dtype", "out_f64", "readonly_out", "x_inner", "x_f64",
                           "route", "precision", "overlap", "x_negative"])
        if kind == "x_k":
            x = rand(rng, m, k + 128, dtype=dtype)
        elif kind == "x_rank":
            x = x.reshape(1, m, k)
        elif kind == "out_shape":
            out = np.full((m, n + 1), 7, np.float32)
        elif kind == "out_dtype":
            out = np.full((m, n), 7, np.float16 if dtype == np.float32 else np.int32)
        elif kind == "out_f64":
            out = np.full((m, n), 7.0)
        elif kind == "readonly_out":
            out.flags.writeable = False
        elif kind == "x_inner":
            x = np.repeat(x, 2, axis=1)[:, ::2]
        elif kind == "x_f64":
            x = x.astype(np.float64)
        elif kind == "route":
            kw["route"] = rng.choice(["tq2_stream_v2", "tq2_tiled", "stream"])
        elif kind == "precision":
            kw["precision"] = "loose"
        elif kind == "overlap":
            buf = np.full((max(m, 2), k + n), 7, np.float32)
            x, out = buf[:, :k], buf[:, k:]
        elif kind == "x_negative":
            x = rand(rng, m + 1, k, dtype=dtype)[::-1]
            out = np.full((m + 1, n), 7, np.float32)
        arrays = [x, out] + ([x.base] if kind == "overlap" else [])
        saved = snapshot(arrays)
        with pytest.raises(llmm.Error):
            llmm.gemm_tq2(weight, x, out, **kw)
        assert_unchanged(arrays, saved)
    for weight, _ in weights:
        llmm.release_tq2(weight)
