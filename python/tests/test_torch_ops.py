"""torch integration: the boundary (dtypes, layouts, strides, devices, errors), the torch.library custom
ops (opcheck, torch.compile(fullgraph=True)), streams and CUDA graphs.

CPU-tensor tests run wherever torch is importable (the ops then run llmm's CPU reference backend);
CUDA tests need a GPU. Without torch the whole module skips, saying so.
"""
import numpy as np
import pytest

import llmm
from conftest import need_cuda_torch, torch_or_skip_module

torch = torch_or_skip_module("torch tests skipped (pip install torch to run them)")

import llmm.torch_ops as T  # noqa: E402

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def dev_or_skip(device):
    if device == "cuda":
        need_cuda_torch()
    return device


def rand(*shape, dtype=torch.float32, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed + 1000 * len(shape) + sum(shape))
    return torch.randn(*shape, generator=g).to(dtype=dtype, device=device)


def check(got, want64, tol, scale=None):
    """|got - want| <= tol * sum_k |a||b| (scale), the bound rounding errors follow."""
    got = got.detach().double().cpu()
    want64 = want64.detach().double().cpu()
    assert got.shape == want64.shape, (got.shape, want64.shape)
    assert torch.isfinite(got).all(), "non-finite output"
    s = scale.detach().double().cpu() if scale is not None else want64.abs().max().clamp_min(1.0)
    err = ((got - want64).abs() / s).max().item()
    assert err <= tol, f"max scaled error {err} > {tol}"


def mm64(a, b):
    return a.double().cpu() @ b.double().cpu()


def mm_scale(a, b):
    return a.double().abs().cpu() @ b.double().abs().cpu()


# ---------------------------------------------------------------------------------------------
# registration

def test_ops_are_registered_with_exact_schemas():
    assert str(torch.ops.llmm.matmul.default._schema) == (
        'llmm::matmul(Tensor a, Tensor b, bool transpose_a=False, bool transpose_b=False, str precision="exact", '
        'str route="auto") -> Tensor')
    assert str(torch.ops.llmm.matmul_id.default._schema) == (
        'llmm::matmul_id(Tensor weights, Tensor x, Tensor ids, str layout="shared", str route="auto", '
        'bool may_repeat=False, str precision="exact", ScalarType? out_dtype=None) -> Tensor')
    assert str(torch.ops.llmm.gemm_tq2.default._schema) == (
        'llmm::gemm_tq2(Tensor x, int weight_key, int n, str precision="exact", str route="auto", '
        'ScalarType? out_dtype=None, Tensor? rotation_signs=None, int rotation_block=0) -> Tensor')


# ---------------------------------------------------------------------------------------------
# dense matmul: dtypes, layouts, strides

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_matmul_dtypes(device, dtype):
    dev = dev_or_skip(device)
    a, w = rand(7, 256, dtype=dtype, device=dev), rand(96, 256, dtype=dtype, device=dev)
    for y in (T.matmul(a, w, transpose_b=True), llmm.matmul(a, w, transpose_b=True)):
        assert y.dtype == dtype and y.device == a.device and y.shape == (7, 96) and y.is_contiguous()
        check(y, mm64(a, w.T), TOL[dtype], mm_scale(a, w.T))


@pytest.mark.parametrize("device", DEVICES)
def test_matmul_transposed_views_are_taken_without_copy(device):
    dev = dev_or_skip(device)
    a, w = rand(9, 64, device=dev), rand(40, 64, device=dev)
    want = mm64(a, w.T)
    # w.T is [k, n] with strides (1, k): passed as w with transpose_b flipped.
    check(T.matmul(a, w.t()), want, 1e-5, mm_scale(a, w.T))
    # a given as a transposed view of its [k, m] storage, with transpose_a: op(a) = a.T.T = a.
    at = a.t().contiguous().t()  # same values as a, strides (1, m)
    assert at.stride() == (1, 9)
    check(T.matmul(at, w, transpose_b=True), want, 1e-5, mm_scale(a, w.T))
    # batched: the last two dims transposed
    x3, w3 = rand(3, 5, 64, device=dev), rand(3, 40, 64, device=dev)
    check(T.matmul(x3, w3.transpose(1, 2)), mm64(x3, w3.transpose(1, 2)), 1e-5, mm_scale(x3, w3.transpose(1, 2)))


@pytest.mark.parametrize("device", DEVICES)
def test_matmul_broadcast_batch_stride_zero(device):
    dev = dev_or_skip(device)
    x, w = rand(4, 6, 128, device=dev), rand(50, 128, device=dev)
    wb = w.expand(4, 50, 128)  # batch stride 0
    assert wb.stride(0) == 0
    y = T.matmul(x, wb, transpose_b=True)
    assert y.shape == (4, 6, 50)
    check(y, mm64(x, w.T), 1e-5, mm_scale(x, w.T))
    w4 = rand(4, 50, 128, device=dev)
    y1 = T.matmul(x[:1], w4, transpose_b=True)  # a of batch 1 broadcasts over b's batch of 4
    assert y1.shape == (4, 6, 50)
    x1 = x[:1].expand(4, 6, 128)
    check(y1, mm64(x1, w4.transpose(1, 2)), 1e-5, mm_scale(x1, w4.transpose(1, 2)))


@pytest.mark.parametrize("device", DEVICES)
def test_matmul_non_contiguous_inner_stride_is_refused(device):
    dev = dev_or_skip(device)
    a = rand(5, 128, device=dev)[:, ::2]  # inner stride 2: neither contiguous nor a transposed view
    w = rand(30, 64, device=dev)
    with pytest.raises(llmm.Error, match=r"invalid left matmul argument a .*strides \[128, 2\]"):
        T.matmul(a, w, transpose_b=True)
    with pytest.raises(llmm.Error, match="invalid left matmul argument"):
        llmm.matmul(a, w, transpose_b=True)
    # and a row-sliced (ld > k) operand is fine: only the innermost stride must be 1
    a2, b = rand(5, 64, device=dev), rand(64, 70, device=dev)[:, :30]
    assert b.stride() == (70, 1)
    check(T.matmul(a2, b), mm64(a2, b), 1e-5, mm_scale(a2, b))


def test_matmul_errors_are_llmm_errors():
    a = rand(4, 5)
    with pytest.raises(llmm.Error, match="inner dimensions differ"):
        T.matmul(a, rand(6, 3))
    with pytest.raises(RuntimeError, match="inner dimensions differ"):  # llmm.Error is a RuntimeError
        torch.ops.llmm.matmul(a, rand(6, 3))
    with pytest.raises(llmm.Error, match="only homogeneous dtypes"):
        T.matmul(a, rand(5, 3, dtype=torch.float16))
    with pytest.raises(llmm.Error, match="unsupported"):
        T.matmul(a.double(), rand(5, 3).double())
    with pytest.raises(llmm.Error, match="must be rank 2 or 3"):
        T.matmul(rand(5), rand(5, 3))
    with pytest.raises(llmm.Error, match="precision must be"):
        T.matmul(a, rand(5, 3), precision="quick")
    with pytest.raises(llmm.Error, match="unknown dense route"):
        T.matmul(a, rand(5, 3), route="warp-speed")


def test_requires_grad_inputs_work_and_backward_is_refused():
    x = rand(3, 64).requires_grad_()
    w = torch.nn.Parameter(rand(16, 64))
    y = T.matmul(x, w, transpose_b=True)
    check(y, mm64(x, w.T), 1e-5, mm_scale(x, w.T))
    assert not llmm.matmul(x, w, transpose_b=True).requires_grad  # the plain API computes no graph
    with pytest.raises(RuntimeError, match="no autograd formula"):
        y.sum().backward()


@pytest.mark.cuda
def test_cuda_device_mismatch_is_refused():
    need_cuda_torch()
    with pytest.raises(llmm.Error, match="is on .* but the context is"):
        T.matmul(rand(4, 64), rand(64, 8, device="cuda"))


# ---------------------------------------------------------------------------------------------
# matmul_id

def moe_case(device, dtype=torch.float32, m=9, n=24, k=64, top_k=2, e=6, layout="shared"):
    w = rand(e, n, k, dtype=dtype, device=device)
    ids = torch.tensor([[(t * 5 + s * 3) % e for s in range(top_k)] for t in range(m)], dtype=torch.int32)
    ids[3, 1] = 99  # out of range: a zero row
    x = rand(m if layout == "shared" else m * top_k, k, dtype=dtype, device=device, seed=1)
    return w, x, ids.to(device)


def moe_ref(w, x, ids, layout):
    m, top_k = ids.shape
    out = torch.zeros(m, top_k, w.shape[1], dtype=torch.float64)
    scale = torch.ones_like(out)
    for t in range(m):
        for s in range(top_k):
            e = int(ids[t, s])
            if e < w.shape[0]:
                row = x[t] if layout == "shared" else x[t * top_k + s]
                out[t, s] = w[e].double().cpu() @ row.double().cpu()
                scale[t, s] = (w[e].double().abs().cpu() @ row.double().abs().cpu()).clamp_min(1e-30)
    return out, scale


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("route", ["direct", "grouped"])
@pytest.mark.parametrize("layout", ["shared", "slotted"])
def test_matmul_id(device, route, layout):
    dev = dev_or_skip(device)
    w, x, ids = moe_case(dev, layout=layout)
    y = T.matmul_id(w, x, ids, layout=layout, route=route)
    assert y.shape == (9, 2, 24) and y.dtype == torch.float32 and y.device == x.device
    want, scale = moe_ref(w, x, ids, layout)
    check(y, want, 1e-5, scale)
    assert (y[3, 1] == 0).all()
    if hasattr(torch, "uint32"):  # uint32 ids give the same result
        y32 = T.matmul_id(w, x, ids.to(torch.uint32), layout=layout, route=route)
        assert torch.equal(y32, y)
    y64 = T.matmul_id(w, x, ids.long(), layout=layout, route=route)  # int64 (torch.topk's): read as they are
    assert torch.equal(y64, y)
    assert torch.equal(llmm.matmul_id(w, x, ids.long(), layout=layout, route=route,
                                      scratch=llmm.matmul_id_scratch(6, 9, dev) if route == "grouped" else None), y)


def test_matmul_id_staged_scratch():
    """A scratch with staging room: the grouped route on the GPU stages the routed bf16 rows in
    expert order first (the Hopper engine's fast path above 2048 routed rows); the result matches
    the gathering call, and the engine sorting few rows itself (fused) on the first 16 tokens."""
    need_cuda_torch()
    w, x, ids = moe_case("cuda", dtype=torch.bfloat16, m=600, n=136, k=256, top_k=4, e=8)
    plain = llmm.matmul_id_scratch(8, 600, "cuda", max_top_k=4)
    staged = llmm.matmul_id_scratch(8, 600, "cuda", max_top_k=4, max_k=256, dtype=torch.bfloat16)
    assert plain.staged_row_bytes == 0 and staged.staged_row_bytes == 512
    y0 = llmm.matmul_id(w, x, ids, route="grouped", scratch=plain)
    y1 = llmm.matmul_id(w, x, ids, route="grouped", scratch=staged)
    want, scale = moe_ref(w, x, ids, "shared")
    check(y1, want, 1e-5, scale)
    assert torch.equal(y0, y1)  # one f32 accumulation order either way
    assert torch.equal(T.matmul_id(w, x, ids, route="grouped"), y1)  # the op's own scratch stages too
    if torch.cuda.get_device_capability() == (9, 0):
        assert llmm.plan_matmul_id(w, x, ids, route="grouped", scratch=staged)["staged"]
        few = llmm.plan_matmul_id(w, x[:16], ids[:16], route="grouped", scratch=staged)
        assert few["fused"] and not few["staged"] and len(few["kernels"]) == 1
        assert torch.equal(llmm.matmul_id(w, x[:16], ids[:16], route="grouped", scratch=staged), y1[:16])
        # By name: the engine after the map at m 16 (staged), the fused engine at m 600 (2400 routed
        # rows: above its limit of 2048, refused) and m 300.
        mapped = llmm.plan_matmul_id(w, x[:16], ids[:16], route="grouped", scratch=staged, grouped_kernel="tiled_sm90")
        assert mapped["staged"] and not mapped["fused"] and len(mapped["kernels"]) == 3
        assert torch.equal(llmm.matmul_id(w, x[:16], ids[:16], route="grouped", scratch=staged,
                                          grouped_kernel="tiled_sm90"), y1[:16])
        with pytest.raises(llmm.Error, match="grouped kernel tiled_sm90_fused cannot run .*more than 2048 routed rows"):
            llmm.matmul_id(w, x, ids, route="grouped", scratch=staged, grouped_kernel="tiled_sm90_fused")
        assert torch.equal(llmm.matmul_id(w, x[:300], ids[:300], route="grouped", scratch=staged,
                                          grouped_kernel="tiled_sm90_fused"), y1[:300])
        mma = llmm.plan_matmul_id(w, x, ids, route="grouped", scratch=staged, grouped_kernel="mma_sync")
        assert not mma["engine"] and mma["kernels"][-1].startswith("moe_grouped_")
        check(llmm.matmul_id(w, x, ids, route="grouped", scratch=staged, grouped_kernel="mma_sync"), want, 1e-5, scale)


def test_matmul_id_scratch_staging_arguments():
    cpu = llmm.matmul_id_scratch(4, 8, "cpu", max_k=64, dtype="float16")
    assert cpu.staged_row_bytes == 0  # the CPU reference never stages
    with pytest.raises(TypeError, match="max_k needs the input dtype"):
        llmm.matmul_id_scratch(4, 8, "cpu", max_k=64)
    with pytest.raises(llmm.Error, match="dtype must be f32, f16 or bf16"):
        llmm.matmul_id_scratch(4, 8, "cpu", max_k=64, dtype="int32")


@pytest.mark.parametrize("device", DEVICES)
def test_matmul_id_out_dtype_and_ids_dtype(device):
    dev = dev_or_skip(device)
    w, x, ids = moe_case(dev, dtype=torch.bfloat16)
    y = T.matmul_id(w, x, ids, out_dtype=torch.bfloat16)
    assert y.dtype == torch.bfloat16
    want, scale = moe_ref(w, x, ids, "shared")
    check(y, want, 1.6e-2, scale)
    # int64 ids (torch.topk's) are taken as they are; negative and >= 2^32 ids give zero rows
    ids64 = ids.long()
    ids64[0, 0], ids64[1, 1] = -1, (1 << 32) + 1
    y64 = T.matmul_id(w, x, ids64, out_dtype=torch.bfloat16)
    assert (y64[0, 0] == 0).all() and (y64[1, 1] == 0).all()
    assert torch.equal(y64[2:], y[2:])
    with pytest.raises(llmm.Error, match=r"ids must be int32, int64 or uint32, got torch.int16"):
        T.matmul_id(w, x, ids.short())
    with pytest.raises(llmm.Error, match="ids has unsupported dtype int16"):  # the plain API too
        llmm.matmul_id(w, x, ids.short())
    with pytest.raises(llmm.Error, match=r"weights must be \[E, n, k\], ids \[m, top_k\]"):
        T.matmul_id(w, x, ids.reshape(-1))
    # at trace time too: torch.compile refuses int16 ids before anything runs
    f = torch.compile(lambda w, x, i: T.matmul_id(w, x, i), fullgraph=True, backend="eager")
    with pytest.raises(Exception, match="ids must be int32, int64 or uint32, got torch.int16"):
        f(w, x, ids.short())


def test_matmul_id_grouped_scratch_is_the_librarys():
    """The op passes no scratch: llmm's own serves the grouped route, grown by a larger call and
    reused by a smaller one, every result right (the C++ tests check the growth itself)."""
    for m, e in ((4, 6), (40, 10), (4, 6)):
        w, x, ids = moe_case("cpu", m=m, e=e)
        assert llmm.plan_matmul_id(w, x, ids, route="grouped")["pooled"]
        y = T.matmul_id(w, x, ids, route="grouped")
        want, scale = moe_ref(w, x, ids, "shared")
        check(y, want, 1e-5, scale)
        assert torch.equal(T.matmul_id(w, x, ids), T.matmul_id(w, x, ids, route=llmm.suggest_matmul_id_route(
            m, w.shape[1], w.shape[2], ids.shape[1], e, x)))  # auto, the default, is the suggestion


# ---------------------------------------------------------------------------------------------
# gemm_tq2

def ternary_weight(n, k, device, seed=3):
    g = torch.Generator().manual_seed(seed)
    t = torch.randint(-1, 2, (n, k), generator=g).float()
    t[:, ::128] = 1.0  # absmax then recovers the scale exactly
    w = t * 0.0625
    aos = llmm.quantize_tq2(w, "absmax")
    return w, llmm.upload_tq2(aos, n, k, device=device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_gemm_tq2_op(device, dtype):
    dev = dev_or_skip(device)
    w, weight = ternary_weight(48, 256, dev)
    assert weight.device == ("cpu" if dev == "cpu" else "cuda:0")
    x = rand(5, 256, dtype=dtype, device=dev)
    want = mm64(x, w.T)
    y = torch.ops.llmm.gemm_tq2(x, weight.key, weight.n)
    assert y.shape == (5, 48) and y.dtype == torch.float32 and y.device == x.device
    check(y, want, 1e-5, mm_scale(x, w.T))
    y2 = T.gemm_tq2(weight, x, out_dtype=dtype)
    assert y2.dtype == dtype
    check(y2, want, TOL[dtype], mm_scale(x, w.T))


@pytest.mark.cuda
@pytest.mark.parametrize("route", ["tq2_stream_v4", "tq2_stream_v2", "tq2_tiled", "tq2_dequant_lt"])
def test_gemm_tq2_each_cuda_route_by_name(route):
    """Every route name the docstring lists runs, reports itself, and agrees with float64."""
    dev = dev_or_skip("cuda")
    if route == "tq2_stream_v4" and torch.cuda.get_device_capability(dev) != (9, 0):
        pytest.skip("tq2_stream_v4 is built for sm_90a only")
    w, weight = ternary_weight(72, 384, dev)
    x = rand(2, 384, device=dev)
    out = torch.full((2, 72), float("nan"), device=dev)
    receipt = llmm._llmm.gemm_tq2(weight, x, out, route=route, stream=torch.cuda.current_stream().cuda_stream)
    assert receipt["route"] == route, receipt
    check(out, mm64(x, w.T), 1e-5, mm_scale(x, w.T))
    check(llmm.gemm_tq2(weight, x, route=route), mm64(x, w.T), 1e-5, mm_scale(x, w.T))
    with pytest.raises(llmm.Error, match="unknown ternary route 'stream'"):
        llmm.gemm_tq2(weight, x, route="stream")


@pytest.mark.cuda
def test_plan_tq2_on_cuda_names_the_route_that_runs():
    dev = dev_or_skip("cuda")
    like = torch.empty(1, device=dev)
    plans = {m: llmm.plan_tq2(m, 640, 512, like) for m in (1, 2, 8, 16)}
    sm90 = torch.cuda.get_device_capability(dev) == (9, 0)
    decode = "tq2_stream_v4" if sm90 else "tq2_stream_v2"
    # On sm_90 v4 also takes m = 8 when n <= 4096 (640 here).
    assert [plans[m]["route"] for m in (1, 2, 8, 16)] == [decode] * 2 + ["tq2_stream_v4" if sm90 else "tq2_stream_v2",
                                                                          "tq2_stream_v2"]
    # v4 stages the activation for all blocks, v2 from m = 3.
    assert (plans[1]["workspace_bytes"] > 0) == (decode == "tq2_stream_v4") and plans[8]["workspace_bytes"] > 0
    big = llmm.plan_tq2(1536, 27648, 3072, like)
    assert big["route"] == "tq2_dequant_lt" and big["workspace_bytes"] > 0
    assert llmm.plan_tq2(1536, 27648, 3072, like, route="tq2_tiled")["route"] == "tq2_tiled"
    w, weight = ternary_weight(640, 512, dev)
    for m in (1, 8, 40):
        receipt = llmm._llmm.gemm_tq2(weight, rand(m, 512, device=dev), torch.empty(m, 640, device=dev),
                                      stream=torch.cuda.current_stream().cuda_stream)
        assert receipt["route"] == llmm.plan_tq2(m, 640, 512, like)["route"], (m, receipt)


def test_gemm_tq2_key_and_shape_refusals():
    w, weight = ternary_weight(48, 256, "cpu")
    x = rand(5, 256)
    with pytest.raises(llmm.Error, match="the call says n = 47"):
        torch.ops.llmm.gemm_tq2(x, weight.key, 47)
    with pytest.raises(llmm.Error, match="has k = 256"):
        torch.ops.llmm.gemm_tq2(rand(5, 128), weight.key, 48)
    with pytest.raises(llmm.Error, match="no ternary weight with key 12345 on cpu"):
        torch.ops.llmm.gemm_tq2(x, 12345, 48)
    with pytest.raises(llmm.Error, match=r"gemm_tq2: x must be \[m, k\], got shape \(2, 3, 256\)"):
        torch.ops.llmm.gemm_tq2(rand(2, 3, 256), weight.key, 48)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():  # the fake implementation refuses it too (at trace time)
        with pytest.raises(llmm.Error, match=r"gemm_tq2: x must be \[m, k\], got shape \(2, 3, 256\)"):
            torch.ops.llmm.gemm_tq2(torch.empty(2, 3, 256), weight.key, 48)
    assert llmm.release_tq2(weight)
    with pytest.raises(llmm.Error, match=f"no ternary weight with key {weight.key} on cpu"):
        torch.ops.llmm.gemm_tq2(x, weight.key, 48)
    assert not llmm.release_tq2(weight)
    # the released handle itself still works (the Python object keeps the memory alive)
    check(llmm.gemm_tq2(weight, x), mm64(x, w.T), 1e-5, mm_scale(x, w.T))
    # a stale handle never releases a later upload under its key: the op still finds the new one
    w2 = ternary_weight(48, 256, "cpu", seed=4)[0]
    again = llmm.upload_tq2(llmm.quantize_tq2(w2, "absmax"), 48, 256, key=weight.key)
    assert again.upload_id != weight.upload_id
    assert not llmm.release_tq2(weight)
    check(torch.ops.llmm.gemm_tq2(x, weight.key, 48), mm64(x, w2.T), 1e-5, mm_scale(x, w2.T))
    assert llmm.release_tq2(again)


def test_ternary_linear_module():
    g = torch.Generator().manual_seed(5)
    w = torch.randn(64, 256, generator=g) * 0.02
    bias = torch.randn(64, generator=g)
    lin = T.TernaryLinear.from_float(w, bias)
    wq = torch.from_numpy(llmm.dequantize_tq2(llmm.quantize_tq2(w), 64, 256))
    x = rand(2, 3, 256)
    y = lin(x)
    assert y.shape == (2, 3, 64) and y.dtype == torch.float32
    check(y, mm64(x, wq.T) + bias.double(), 1e-5, mm_scale(x, wq.T) + 1)
    assert "in_features=256, out_features=64" in repr(lin)


# ---------------------------------------------------------------------------------------------
# opcheck: schema, fake tensor, aot dispatch (dynamic shapes), autograd registration

def opcheck_cases(dev):
    _, weight = ternary_weight(32, 128, dev, seed=9)
    w, x, ids = moe_case(dev)
    ws, xs, idss = moe_case(dev, layout="slotted")
    a16 = rand(3, 7, 64, dtype=torch.bfloat16, device=dev)
    return [
        (torch.ops.llmm.matmul.default, (rand(5, 64, device=dev), rand(48, 64, device=dev)), {"transpose_b": True}),
        (torch.ops.llmm.matmul.default, (a16, rand(64, 40, dtype=torch.bfloat16, device=dev)), {}),
        (torch.ops.llmm.matmul.default, (rand(64, 5, device=dev), rand(64, 12, device=dev)), {"transpose_a": True}),
        (torch.ops.llmm.matmul_id.default, (w, x, ids), {}),
        (torch.ops.llmm.matmul_id.default, (ws, xs, idss), {"layout": "slotted", "route": "grouped"}),
        (torch.ops.llmm.matmul_id.default, (w.half(), x.half(), ids), {"out_dtype": torch.float16}),
        (torch.ops.llmm.matmul_id.default, (w, x, ids.long()), {"route": "grouped"}),
        (torch.ops.llmm.gemm_tq2.default, (rand(3, 128, device=dev), weight.key, 32), {}),
        (torch.ops.llmm.gemm_tq2.default, (rand(17, 128, dtype=torch.float16, device=dev), weight.key, 32),
         {"out_dtype": torch.float16}),
    ]


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    dev = dev_or_skip(device)
    for op, args, kwargs in opcheck_cases(dev):
        result = torch.library.opcheck(op, args, kwargs)
        assert all(v == "SUCCESS" for v in result.values()), (op, result)


# ---------------------------------------------------------------------------------------------
# torch.compile(fullgraph=True) on a small model with all three ops

class MoeBlock(torch.nn.Module):
    """x -> ternary projection (gemm_tq2) -> router (matmul) -> top-k -> experts (matmul_id) -> combine."""

    def __init__(self, device, hidden=128, inter=48, experts=8, top_k=2, route="direct", dtype=torch.float32,
                 requires_grad=False, ids_dtype=torch.int32):
        super().__init__()
        g = torch.Generator().manual_seed(11)
        self.proj_source = torch.randn(hidden, hidden, generator=g) * 0.05
        self.proj = T.TernaryLinear.from_float(self.proj_source, device=device)
        self.router = torch.nn.Parameter((torch.randn(experts, hidden, generator=g) * 0.1).to(device),  # f32
                                         requires_grad=requires_grad)
        self.experts = torch.nn.Parameter((torch.randn(experts, inter, hidden, generator=g) * 0.05).to(device, dtype),
                                          requires_grad=requires_grad)
        self.top_k, self.route, self.ids_dtype = top_k, route, ids_dtype

    def forward(self, x):
        h = self.proj(x)                                          # llmm::gemm_tq2
        logits = T.matmul(h.float(), self.router.t())             # llmm::matmul on a transposed view
        top = torch.topk(logits, self.top_k, dim=-1)
        ids = top.indices if self.ids_dtype == torch.int64 else top.indices.to(self.ids_dtype)
        gate = torch.softmax(top.values, dim=-1)
        y = T.matmul_id(self.experts, h, ids, route=self.route)   # llmm::matmul_id, [m, top_k, inter] f32
        return (y * gate[..., None]).sum(dim=1)


def compiled_matches_eager(block, xs, **compile_kw):
    seen = []

    def recording(gm, example_inputs):
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    backend = compile_kw.pop("backend")
    if backend == "record":
        backend = recording
    torch._dynamo.reset()
    cblock = torch.compile(block, fullgraph=True, backend=backend, **compile_kw)
    # Inductor's on-disk caches do not hash a custom op's fake implementation: a stale entry (from an
    # older llmm) could be reused. Tests compile afresh.
    with torch._inductor.config.patch(force_disable_caches=True):
        for x in xs:
            want = block(x)
            got = cblock(x)
            assert got.shape == want.shape and got.dtype == want.dtype
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    return seen


def test_compile_fullgraph_traces_all_three_ops():
    block = MoeBlock("cpu")
    seen = compiled_matches_eager(block, [rand(16, 128)], backend="record")
    for name in ("llmm.gemm_tq2", "llmm.matmul", "llmm.matmul_id"):
        assert any(name in s for s in seen), (name, seen)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("route", ["direct", "grouped"])
def test_compile_fullgraph_cpu(backend, route):
    block = MoeBlock("cpu", route=route)
    compiled_matches_eager(block, [rand(16, 128), rand(16, 128, seed=4)], backend=backend)


@pytest.mark.parametrize("route", ["direct", "grouped"])
def test_compile_fullgraph_int64_topk_ids(route):
    # torch.topk's int64 indices go to llmm::matmul_id as they are (no conversion in the graph)
    block = MoeBlock("cpu", route=route, ids_dtype=torch.int64)
    compiled_matches_eager(block, [rand(16, 128), rand(7, 128, seed=5)], backend="aot_eager")


def test_compile_fullgraph_inductor_cpu():
    # Inductor's own code around the ops (topk, softmax, the combine) compiled for the CPU: ~30 s.
    block = MoeBlock("cpu")
    compiled_matches_eager(block, [rand(16, 128), rand(16, 128, seed=3)], backend="inductor")


@pytest.mark.filterwarnings("ignore:Error detected in GeneratedBackward")
def test_compile_with_trainable_parameters_needs_no_grad():
    # No autograd formulas are registered (inference only): AOT autograd traces a backward when
    # an output requires grad and refuses; under torch.no_grad() (or inference_mode) it compiles.
    block = MoeBlock("cpu", requires_grad=True)
    x = rand(16, 128)
    with torch.no_grad():
        compiled_matches_eager(block, [x], backend="aot_eager")
    torch._dynamo.reset()
    with pytest.raises(Exception, match="no autograd formula was registered"):
        torch.compile(block, fullgraph=True, backend="aot_eager")(x)


def test_compile_fullgraph_dynamic_shapes_cpu():
    block = MoeBlock("cpu")
    compiled_matches_eager(block, [rand(16, 128), rand(9, 128), rand(33, 128)], backend="aot_eager", dynamic=True)


def test_eager_block_against_float64():
    block = MoeBlock("cpu")
    x = rand(12, 128)
    wq = torch.from_numpy(llmm.dequantize_tq2(llmm.quantize_tq2(block.proj_source), 128, 128))
    h = x.double() @ wq.double().T
    logits = h @ block.router.double().T
    top = torch.topk(logits, 2, dim=-1)
    gate = torch.softmax(top.values, dim=-1)
    y = torch.einsum("tsik,tk->tsi", block.experts.double()[top.indices], h)
    want = (y * gate[..., None]).sum(dim=1)
    torch.testing.assert_close(block(x).double(), want, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# CUDA: streams, no host synchronisation, CUDA graphs, inductor

SLEEP_CYCLES = 400_000_000  # about 0.2 s of GPU time at ~2 GHz: long enough to see a host wait


@pytest.mark.cuda
@pytest.mark.parametrize("which", ["matmul", "matmul_id", "matmul_id_grouped", "gemm_tq2"])
def test_cuda_ops_run_on_current_stream_without_host_sync(which):
    torch = need_cuda_torch()
    dev = "cuda"
    w_t, weight = ternary_weight(256, 512, dev)
    w = rand(256, 512, device=dev)
    we, _, ids = moe_case(dev, m=16, n=64, k=512, top_k=2, e=8)
    src = rand(16, 512, device=dev, seed=7)
    calls = {
        "matmul": lambda x: T.matmul(x, w, transpose_b=True),
        "matmul_id": lambda x: T.matmul_id(we, x, ids),
        "matmul_id_grouped": lambda x: T.matmul_id(we, x, ids, route="grouped"),
        "gemm_tq2": lambda x: T.gemm_tq2(weight, x),
    }
    refs = {  # (float64 result, sum_k |a||b| scale)
        "matmul": lambda: (mm64(src, w.T), mm_scale(src, w.T)),
        "matmul_id": lambda: moe_ref(we, src, ids, "shared"),
        "matmul_id_grouped": lambda: moe_ref(we, src, ids, "shared"),
        "gemm_tq2": lambda: (mm64(src, w_t.T), mm_scale(src, w_t.T)),
    }
    s = torch.cuda.Stream()
    x = torch.zeros_like(src)
    with torch.cuda.stream(s):
        calls[which](x)  # warm-up on s: workspaces and the grouped scratch for s exist afterwards
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        torch.cuda._sleep(SLEEP_CYCLES)  # s is busy; x is written only after the sleep
        x.copy_(src)
        y = calls[which](x)
        pending = not s.query()
    assert torch.cuda.current_stream() != s
    s.synchronize()
    assert pending, "the op returned only after the stream drained: it synchronised with the host"
    # On any other stream the op would have read x before the copy (zeros) and the check fails.
    want, scale = refs[which]()
    check(y, want, 1e-5, scale)


@pytest.mark.cuda
def test_cuda_graph_capture_and_replay():
    torch = need_cuda_torch()
    w = rand(256, 512, device="cuda")
    _, weight = ternary_weight(128, 512, "cuda")
    we, _, ids = moe_case("cuda", m=16, n=64, k=512, top_k=2, e=8)
    x = rand(16, 512, device="cuda")
    s = torch.cuda.Stream()

    def step(x):
        return T.matmul(x, w, transpose_b=True), T.gemm_tq2(weight, x), T.matmul_id(we, x, ids, route="grouped")

    with torch.cuda.stream(s):  # warm up on the capture stream
        step(x)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        outs = step(x)
    new = rand(16, 512, device="cuda", seed=42)
    x.copy_(new)
    g.replay()
    torch.cuda.synchronize()
    check(outs[0], mm64(new, w.T), 1e-5, mm_scale(new, w.T))
    check(outs[2], moe_ref(we, new, ids, "shared")[0], 1e-5, moe_ref(we, new, ids, "shared")[1])
    assert torch.equal(outs[1], T.gemm_tq2(weight, new))  # deterministic: bitwise the eager result


@pytest.mark.cuda
def test_cuda_graph_capture_refuses_unwarmed_grouped_scratch():
    torch = need_cuda_torch()
    # 1000 experts: more than any earlier test's call on this (pooled) stream made room for, so the
    # library's scratch would have to grow inside the capture
    we, x, ids = moe_case("cuda", m=16, n=64, k=64, top_k=2, e=1000)
    s = torch.cuda.Stream()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with pytest.raises(llmm.Error, match="during CUDA-graph capture, where memory cannot be allocated"):
        with torch.cuda.graph(g, stream=s):
            T.matmul_id(we, x, ids, route="grouped")


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compile_fullgraph_inductor_cuda(dtype):
    need_cuda_torch()
    block = MoeBlock("cuda", dtype=dtype)
    xs = [rand(16, 128, device="cuda", dtype=dtype), rand(16, 128, device="cuda", dtype=dtype, seed=3)]
    compiled_matches_eager(block, xs, backend="inductor")
