"""The C++ host path for torch tensors (llmm._llmm_torch): where pip built it next to torch it must
be the path llmm.matmul / llmm.gemm_tq2 / llmm.matmul_id / TernaryLinear and the torch ops take, give
bitwise the DLPack path's results (out= still takes that path) and refuse with the same llmm.Error
messages.

Runs wherever torch imports (CPU tensors: the reference backend; CUDA tensors on a GPU). Without
torch the module skips; under LLMM_REQUIRE_GPU=1 (the GPU machine, where pip builds the module
against the installed torch) a missing module is a failure.
"""
import re

import numpy as np
import pytest

import llmm
from conftest import REQUIRE_GPU, need_cuda_torch, torch_or_skip_module

torch = torch_or_skip_module("the torch host path is not built")

import llmm.torch_ops as T  # noqa: E402

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def fast_or_skip():
    f = llmm._fast()
    if not f:
        if REQUIRE_GPU:
            pytest.fail("LLMM_REQUIRE_GPU=1 but llmm._llmm_torch is not built (pip install --no-build-isolation . "
                        "next to torch builds it)")
        pytest.skip("llmm._llmm_torch not built (torch was not importable when the package was built)")
    return f


def dev(device):
    if device == "cuda":
        need_cuda_torch()
    return device


def rand(*shape, dtype=torch.float32, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype=dtype, device=device)


def assert_cpp_kernel(op, device):
    """The op's kernel for the device's dispatch key is llmm._llmm_torch's, not custom_op's Python one."""
    key = "CUDA" if device == "cuda" else "CPU"
    dump = torch._C._dispatch_dump(op)
    line = next((l for l in dump.splitlines() if l.startswith(key + ":")), "")
    assert "torch_ext.cpp" in line, dump


def slow_matmul(a, b, **kw):
    """The DLPack path: out= given, so llmm.matmul does not take the C++ one."""
    shape = llmm._matmul_out_shape(a.shape, b.shape, kw.get("transpose_a", False), kw.get("transpose_b", False))
    out = torch.full(shape, float("nan"), dtype=a.dtype, device=a.device)
    return llmm.matmul(a, b, out, **kw)


def test_the_torch_path_is_loaded_and_taken(monkeypatch):
    f = fast_or_skip()
    calls = []
    real = f.matmul

    class Spy:
        def matmul(self, *args):
            calls.append(args)
            return real(*args)

    monkeypatch.setattr(llmm, "_fast_ext", Spy())
    a, b = rand(3, 64), rand(64, 5, seed=1)
    llmm.matmul(a, b)
    assert len(calls) == 1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("case", ["nn", "nt", "tn", "view_t", "batched", "broadcast_b", "broadcast_a", "padded"])
def test_matmul_bitwise_equal_to_the_dlpack_path(device, dtype, case):
    fast_or_skip()
    d = dev(device)
    m, n, k = 5, 24, 136
    ta = tb = False
    if case == "nn":
        a, b = rand(m, k, dtype=dtype, device=d), rand(k, n, dtype=dtype, device=d, seed=1)
    elif case == "nt":
        a, b, tb = rand(m, k, dtype=dtype, device=d), rand(n, k, dtype=dtype, device=d, seed=1), True
    elif case == "tn":
        a, b, ta = rand(k, m, dtype=dtype, device=d), rand(k, n, dtype=dtype, device=d, seed=1), True
    elif case == "view_t":  # a transposed view: taken as its base with the flag flipped, no copy
        a, b = rand(m, k, dtype=dtype, device=d), rand(n, k, dtype=dtype, device=d, seed=1).T
    elif case == "batched":
        a, b = rand(3, m, k, dtype=dtype, device=d), rand(3, k, n, dtype=dtype, device=d, seed=1)
    elif case == "broadcast_b":
        a, b = rand(3, m, k, dtype=dtype, device=d), rand(k, n, dtype=dtype, device=d, seed=1)
    elif case == "broadcast_a":
        a, b = rand(1, m, k, dtype=dtype, device=d), rand(4, k, n, dtype=dtype, device=d, seed=1)
    else:  # rows padded: a slice of a wider tensor
        a, b = rand(m, k + 8, dtype=dtype, device=d)[:, :k], rand(k, n, dtype=dtype, device=d, seed=1)
    got = llmm.matmul(a, b, transpose_a=ta, transpose_b=tb)
    want = slow_matmul(a, b, transpose_a=ta, transpose_b=tb)
    assert got.shape == want.shape and got.dtype == dtype and got.device == a.device
    assert torch.equal(got, want)
    ref = (a.double().cpu().transpose(-1, -2) if ta else a.double().cpu()) @ (
        b.double().cpu().transpose(-1, -2) if tb else b.double().cpu())
    tol = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 1.5e-1}[dtype]
    assert (got.double().cpu() - ref).abs().max().item() <= tol * max(1.0, ref.abs().max().item())


@pytest.mark.parametrize("device", DEVICES)
def test_matmul_refusals_match_the_dlpack_path(device):
    fast_or_skip()
    d = dev(device)
    a = rand(4, 32, device=d)
    cases = [
        (a, rand(7, 9, device=d), {}),                                  # inner dimensions differ
        (a.half(), rand(32, 8, device=d), {}),                          # mixed dtypes
        (a, rand(32, 8, device=d), {"route": "no_such_route"}),
        (a, rand(32, 8, device=d), {"precision": "sloppy"}),
        (a.to(torch.float64), rand(32, 8, device=d).to(torch.float64), {}),  # unsupported dtype
        (a[:, ::2], rand(16, 8, device=d), {}),                         # innermost stride 2
    ]
    for x, y, kw in cases:
        with pytest.raises(llmm.Error) as fast:
            llmm.matmul(x, y, **kw)
        out = torch.empty(x.shape[0], y.shape[-1], dtype=x.dtype, device=d)
        with pytest.raises(llmm.Error) as slow:
            llmm.matmul(x, y, out, **kw)
        assert str(fast.value) == str(slow.value), (kw, str(fast.value), str(slow.value))
    with pytest.raises(llmm.Error, match="not a strided tensor"):
        llmm.matmul(a.to_sparse(), rand(32, 8, device=d))
    with pytest.raises(llmm.Error, match="rank 2 or 3"):
        llmm.matmul(rand(32, device=d), rand(32, 8, device=d))
    with pytest.raises(llmm.Error, match="route"):
        llmm.matmul(a, rand(32, 8, device=d), route="tiled_sm9")
    with pytest.raises(TypeError, match="precision must be a str"):
        llmm.matmul(a, rand(32, 8, device=d), precision=1)


def test_matmul_numpy_bools_and_grad_inputs_still_work():
    fast_or_skip()
    a, w = rand(3, 64), rand(5, 64, seed=1)
    want = llmm.matmul(a, w, transpose_b=True)
    assert torch.equal(llmm.matmul(a, w, transpose_b=np.bool_(True)), want)  # the DLPack path
    got = llmm.matmul(a.requires_grad_(), w, transpose_b=True)
    assert not got.requires_grad and torch.equal(got, want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_gemm_tq2_and_ternary_linear_bitwise_equal_to_the_dlpack_path(device, dtype):
    fast_or_skip()
    d = dev(device)
    if d == "cpu" and dtype != torch.float32:
        pytest.skip("the CPU backend takes float32 activations for gemm_tq2")
    n, k, m = 40, 256, 3
    lin = T.TernaryLinear.from_float(rand(n, k, seed=7), device=d)
    x = rand(m, k, dtype=dtype, device=d, seed=8)
    for out_dtype in (None, torch.float32, dtype):
        got = llmm.gemm_tq2(lin.weight_handle, x, out_dtype=out_dtype)
        want = torch.full((m, n), float("nan"), dtype=out_dtype or torch.float32, device=d)
        llmm.gemm_tq2(lin.weight_handle, x, want)
        assert got.dtype == want.dtype and torch.equal(got, want)
    y = lin(x)
    assert y.dtype == dtype and torch.equal(y, llmm.gemm_tq2(lin.weight_handle, x, out_dtype=dtype))
    with pytest.raises(llmm.Error, match="x must be"):
        llmm.gemm_tq2(lin.weight_handle, x[0])
    with pytest.raises(llmm.Error) as fast:
        llmm.gemm_tq2(lin.weight_handle, rand(m, 128, dtype=dtype, device=d))
    with pytest.raises(llmm.Error) as slow:
        llmm.gemm_tq2(lin.weight_handle, rand(m, 128, dtype=dtype, device=d), torch.empty(m, n, device=d))
    assert str(fast.value) == str(slow.value)


@pytest.mark.cuda
def test_cuda_calls_run_on_torchs_current_stream():
    fast_or_skip()
    need_cuda_torch()
    a, w = rand(8, 512, device="cuda"), rand(256, 512, device="cuda", seed=1)
    want = llmm.matmul(a, w, transpose_b=True)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        got = llmm.matmul(a, w, transpose_b=True)
    s.synchronize()
    assert torch.equal(got, want)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        captured = llmm.matmul(a, w, transpose_b=True)
    captured.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, want)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_op_runs_the_cpp_kernel_with_the_same_results_and_errors(device):
    fast_or_skip()
    d = dev(device)
    assert_cpp_kernel("llmm::matmul", d)
    a, w = rand(3, 64, device=d), rand(5, 64, device=d, seed=1)
    want = slow_matmul(a, w, transpose_b=True)
    for mode in (torch.inference_mode, torch.no_grad, torch.enable_grad):
        with mode():
            assert torch.equal(torch.ops.llmm.matmul(a, w, False, True), want)
            assert torch.equal(T.matmul(a, w.T), want)
    with pytest.raises(llmm.Error, match="inner dimensions differ"):
        torch.ops.llmm.matmul(a, rand(7, 9, device=d))
    with pytest.raises(llmm.Error, match="unknown dense route"):
        torch.ops.llmm.matmul(a, w, False, True, "exact", "nope")


@pytest.mark.parametrize("device", DEVICES)
def test_gemm_tq2_op_runs_the_cpp_kernel(device):
    fast_or_skip()
    d = dev(device)
    assert_cpp_kernel("llmm::gemm_tq2", d)
    lin = T.TernaryLinear.from_float(rand(40, 256, seed=3), device=d)
    x = rand(2, 256, device=d, seed=4)
    want = llmm.gemm_tq2(lin.weight_handle, x)
    with torch.inference_mode():
        assert torch.equal(torch.ops.llmm.gemm_tq2(x, lin.weight_key, 40), want)
        assert torch.equal(torch.ops.llmm.gemm_tq2(x, lin.weight_key, 40, "exact", "auto", torch.float32), want)
    with pytest.raises(llmm.Error, match=r"is \[40, 256\], the call says n = 41"):
        torch.ops.llmm.gemm_tq2(x, lin.weight_key, 41)
    with pytest.raises(llmm.Error, match="no ternary weight with key"):
        torch.ops.llmm.gemm_tq2(x, 987654321, 40)
    with pytest.raises(llmm.Error, match="unknown"):
        torch.ops.llmm.gemm_tq2(x, lin.weight_key, 40, "exact", "tq2_nope")


# ---------------------------------------------------------------------------------------------
# matmul_id

ID_DTYPES = [torch.int32, torch.int64] + ([torch.uint32] if hasattr(torch, "uint32") else [])


def dlpack_matmul_id(*args, **kw):
    """The DLPack path with the very same arguments (out=None included): llmm.matmul_id with the C++
    path switched off for the call."""
    saved = llmm._fast_ext
    llmm._fast_ext = False
    try:
        return llmm.matmul_id(*args, **kw)
    finally:
        llmm._fast_ext = saved


def moe_ids(m, top_k, e, dtype, device):
    """Ids with every kind of out-of-range one the dtype can hold: e itself, a large one and, for the
    signed dtypes, a negative one; each gives a zero row."""
    ids = torch.tensor([[(t * 5 + s * 3) % e for s in range(top_k)] for t in range(m)], dtype=torch.int64)
    ids[1, 0], ids[2, 1] = e, 1000
    if dtype != getattr(torch, "uint32", None):
        ids[3, 0] = -1
    if dtype == torch.int64:
        ids[4, 1] = (1 << 32) + 1  # 1 modulo 2^32: must not alias expert 1
    return ids.to(dtype).to(device)


def test_matmul_id_takes_the_torch_path_only_for_plain_calls(monkeypatch):
    f = fast_or_skip()
    calls = []
    real = f.matmul_id

    class Spy:
        def matmul_id(self, *args):
            calls.append(args)
            return real(*args)

    monkeypatch.setattr(llmm, "_fast_ext", Spy())
    w, x, ids = rand(6, 24, 64), rand(5, 64, seed=1), moe_ids(5, 2, 6, torch.int32, "cpu")
    want = llmm.matmul_id(w, x, ids, out_dtype=torch.float32)
    assert len(calls) == 1
    # Anything else takes the DLPack path: out=, scratch=, a NumPy bool, a dtype by name, NumPy arrays.
    out = torch.full((5, 2, 24), float("nan"))
    assert llmm.matmul_id(w, x, ids, out) is out and torch.equal(out, want)
    scratch = llmm.matmul_id_scratch(6, 5, "cpu")
    assert torch.equal(llmm.matmul_id(w, x, ids, route="grouped", scratch=scratch), want)
    assert torch.equal(llmm.matmul_id(w, x, ids, may_repeat=np.bool_(False)), want)
    assert torch.equal(llmm.matmul_id(w, x, ids, out_dtype="float32"), want)
    assert np.array_equal(llmm.matmul_id(w.numpy(), x.numpy(), ids.numpy()), want.numpy())
    assert len(calls) == 1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("case", ["shared", "slotted", "slotted_3d", "padded", "padded_3d", "padded_experts"])
def test_matmul_id_bitwise_equal_to_the_dlpack_path(device, dtype, case):
    fast_or_skip()
    d = dev(device)
    m, n, k, top_k, e = 7, 24, 72, 2, 6
    w = rand(e, n, k, dtype=dtype, device=d)
    layout = "shared" if case in ("shared", "padded", "padded_experts") else "slotted"
    if case == "shared":
        x = rand(m, k, dtype=dtype, device=d, seed=1)
    elif case == "slotted":
        x = rand(m * top_k, k, dtype=dtype, device=d, seed=1)
    elif case == "slotted_3d":
        x = rand(m, top_k, k, dtype=dtype, device=d, seed=1)
    elif case == "padded":  # rows padded: a slice of a wider tensor
        x = rand(m, k + 8, dtype=dtype, device=d, seed=1)[:, :k]
    elif case == "padded_3d":
        x = rand(m, top_k, k + 8, dtype=dtype, device=d, seed=1)[..., :k]
    else:  # a padded expert stride (a slice of a larger stack) and padded rows
        w = rand(e, n + 3, k, dtype=dtype, device=d)[:, :n]
        x = rand(m, k + 8, dtype=dtype, device=d, seed=1)[:, :k]
    for id_dtype in ID_DTYPES:
        ids = moe_ids(m, top_k, e, id_dtype, d)
        for route in ("direct", "grouped", "auto"):
            for out_dtype in (None, torch.float32, dtype):
                kw = dict(layout=layout, route=route, out_dtype=out_dtype)
                got = llmm.matmul_id(w, x, ids, **kw)
                want = dlpack_matmul_id(w, x, ids, **kw)
                assert got.shape == (m, top_k, n) and got.device == x.device
                assert got.dtype == (out_dtype or torch.float32) == want.dtype
                assert torch.equal(got, want), (id_dtype, route, out_dtype)
                assert (got[1, 0] == 0).all() and (got[2, 1] == 0).all()
                if id_dtype == torch.int64:
                    assert (got[3, 0] == 0).all() and (got[4, 1] == 0).all()
                if out_dtype is None and route == "direct":
                    assert torch.equal(got, torch.ops.llmm.matmul_id(w, x, ids, layout, route))
        assert not torch.equal(got[0, 0], torch.zeros_like(got[0, 0]))  # in-range rows are computed


@pytest.mark.parametrize("device", DEVICES)
def test_matmul_id_refusals_match_the_dlpack_path(device):
    fast_or_skip()
    d = dev(device)
    w, x, ids = rand(6, 24, 64, device=d), rand(5, 64, device=d, seed=1), moe_ids(5, 2, 6, torch.int32, d)
    huge = 1 << 32
    cases = [  # (weights, x, ids, kwargs, the message's distinctive part)
        (w[0], x, ids, {}, "weights must be [n_experts, n, k], got shape (24, 64)"),
        (w, x, ids[0], {}, "ids must be [m, top_k], got shape (2,)"),
        (w, x[0], ids, {}, "x must be [m, k], [m * top_k, k] or [m, top_k, k], got shape (64,)"),
        (w, x[None, None], ids, {}, "x must be [m, k]"),
        (w, x, ids.short(), {}, "ids has unsupported dtype int16"),
        (w, x, ids.float(), {}, "expert ids must be u32, i32 or i64, got f32"),
        (w, x, ids.T.contiguous().T, {}, "expert ids must be contiguous"),
        (w, x, ids, {"route": "nope"}, "route must be 'direct', 'grouped' or 'auto', got 'nope'"),
        (w, x, ids, {"layout": "interleaved"}, "layout must be 'shared' or 'slotted'"),
        (w, x, ids, {"precision": "sloppy"}, "precision must be 'exact' or 'fast'"),
        (w, x, ids, {"grouped_kernel": "nope"}, "grouped_kernel must be"),
        (w, rand(5, 48, device=d), ids, {}, "k 64 (from weights), got f32[5, 48]"),
        (w, x[:4], ids, {}, "m 5, top_k 2 (from ids) and k 64 (from weights), got f32[4, 64]"),
        (w, x, ids, {"layout": "slotted"}, "must be [m * top_k, k] (layout slotted)"),
        (w, x, ids, {"out_dtype": torch.float16}, "output must be f32 or the input's dtype (f32), got f16"),
        (w, x, ids, {"out_dtype": torch.float64}, "out has unsupported dtype float64"),
        (w.double(), x.double(), ids, {}, "weights has unsupported dtype float64"),
        (w, rand(5, 128, device=d)[:, ::2], ids, {}, "input innermost stride must be 1"),
        (w, x, torch.zeros(1, 1, dtype=torch.int32, device=d).expand(huge + 1, 1), {},
         f"m (tokens) {huge + 1} is outside 0..{huge - 1}"),
        (torch.empty(1, huge + 1, 0, device=d), x, ids, {}, f"n {huge + 1} is outside 0..{huge - 1}"),
    ]
    if d == "cpu":
        cases.append((w, x, ids, {"route": "grouped", "grouped_kernel": "mma_sync"}, "mma_sync"))
    for ww, xx, ii, kw, part in cases:
        with pytest.raises(llmm.Error) as fast:
            llmm.matmul_id(ww, xx, ii, **kw)
        with pytest.raises(llmm.Error) as slow:
            dlpack_matmul_id(ww, xx, ii, **kw)
        assert str(fast.value) == str(slow.value), (kw, str(fast.value), str(slow.value))
        assert "matmul_id: " in str(fast.value) and part in str(fast.value), str(fast.value)
    for kw, part in (({"route": 1}, "route must be a str, got int"), ({"precision": None}, "precision must be a str"),
                     ({"grouped_kernel": b"auto"}, "grouped_kernel must be a str")):
        with pytest.raises(TypeError) as fast:
            llmm.matmul_id(w, x, ids, **kw)
        with pytest.raises(TypeError) as slow:
            dlpack_matmul_id(w, x, ids, **kw)
        assert str(fast.value) == str(slow.value) and part in str(fast.value), (str(fast.value), str(slow.value))
    with pytest.raises(TypeError, match="out_dtype must be a torch.dtype or None, got str"):
        llmm._fast().matmul_id(w, x, ids, "shared", "auto", False, "exact", "float32", "auto")
    with pytest.raises(TypeError, match="may_repeat must be a bool, got int"):
        llmm._fast().matmul_id(w, x, ids, "shared", "auto", 1, "exact", None, "auto")
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got numpy.ndarray"):
        llmm._fast().matmul_id(w, x.cpu().numpy(), ids, "shared", "auto", False, "exact", None, "auto")
    with pytest.raises(TypeError, match="takes 9 positional arguments, got 3"):
        llmm._fast().matmul_id(w, x, ids)
    with pytest.raises(llmm.Error, match="x is not a strided tensor"):
        llmm.matmul_id(w, x.to_sparse(), ids)


@pytest.mark.parametrize("device", DEVICES)
def test_matmul_id_op_runs_the_cpp_kernel_with_the_same_results_and_errors(device):
    fast_or_skip()
    d = dev(device)
    assert_cpp_kernel("llmm::matmul_id", d)
    w, x, ids = rand(6, 24, 64, device=d), rand(5, 64, device=d, seed=1), moe_ids(5, 2, 6, torch.int64, d)
    for route in ("direct", "grouped", "auto"):
        want = dlpack_matmul_id(w, x, ids, route=route)
        for mode in (torch.inference_mode, torch.no_grad, torch.enable_grad):
            with mode():
                assert torch.equal(torch.ops.llmm.matmul_id(w, x, ids, "shared", route), want)
                assert torch.equal(T.matmul_id(w, x, ids, route=route, may_repeat=True), want)
    xb, wb = x.bfloat16(), w.bfloat16()
    assert torch.equal(torch.ops.llmm.matmul_id(wb, xb, ids, out_dtype=torch.bfloat16),
                       dlpack_matmul_id(wb, xb, ids, out_dtype=torch.bfloat16))
    # The op's own checks first, with its fake implementation's messages, then llmm.matmul_id's.
    for bad in ((w, x, ids.short()), (w, x, ids.float()), (w, x, ids.reshape(-1)), (w[0], x, ids), (w, x[0], ids),
                (w, x[None, None], ids)):
        with pytest.raises(llmm.Error) as op:
            torch.ops.llmm.matmul_id(*bad)
        with pytest.raises(llmm.Error) as fake:
            T._matmul_id_check(*bad)
        assert str(op.value) == str(fake.value)
    with pytest.raises(llmm.Error, match=re.escape("ids must be int32, int64 or uint32, got torch.int16")):
        torch.ops.llmm.matmul_id(w, x, ids.short())
    with pytest.raises(llmm.Error, match=re.escape("got (6, 24, 64), (10,) and (5, 64)")):
        torch.ops.llmm.matmul_id(w, x, ids.reshape(-1))
    for args, kw in (((w, rand(5, 48, device=d), ids), {}), ((w, x, ids, "shared", "nope"), {}),
                     ((w, x, ids, "interleaved"), {}), ((w, x, ids), {"precision": "sloppy"}),
                     ((w, x, ids), {"out_dtype": torch.float16})):
        with pytest.raises(llmm.Error) as op:
            torch.ops.llmm.matmul_id(*args, **kw)
        a = dict(zip(("layout", "route"), args[3:]), **kw)
        with pytest.raises(llmm.Error) as slow:
            dlpack_matmul_id(*args[:3], **a)
        assert str(op.value) == str(slow.value)


@pytest.mark.cuda
@pytest.mark.parametrize("route", ["direct", "grouped"])
def test_matmul_id_cuda_calls_run_on_torchs_current_stream(route):
    fast_or_skip()
    need_cuda_torch()
    w, x = rand(8, 256, 512, device="cuda"), rand(16, 512, device="cuda", seed=1)
    ids = moe_ids(16, 2, 8, torch.int64, "cuda")
    want = dlpack_matmul_id(w, x, ids, route=route)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        got = llmm.matmul_id(w, x, ids, route=route)  # also the warm-up on s (the grouped scratch for s)
    s.synchronize()
    assert torch.equal(got, want)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        captured = llmm.matmul_id(w, x, ids, route=route)
    captured.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, want)
