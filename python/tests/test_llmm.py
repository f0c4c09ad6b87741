"""pytest for the Python package: NumPy on the CPU backend everywhere; torch on CUDA where present."""
import ast
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import llmm
from conftest import need_cuda_torch

RNG = np.random.default_rng(7)


def rand(*shape, dtype=np.float32):
    x = (RNG.random(shape) + 0.25) * np.exp2(RNG.integers(-2, 3, shape)) * np.where(RNG.random(shape) < 0.5, -1, 1)
    return x.astype(dtype)


def close(got, want, tol):
    assert np.all(np.isfinite(got)), "non-finite output"
    err = np.max(np.abs(got.astype(np.float64) - want))
    assert err <= tol * max(1.0, np.max(np.abs(want))), f"max abs err {err}"


@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-6), (np.float16, 2e-3)])
@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False), (True, True)])
def test_matmul_numpy_layouts(dtype, tol, ta, tb):
    a = rand(3, 37, 5, dtype=dtype) if ta else rand(3, 5, 37, dtype=dtype)
    b = rand(3, 29, 37, dtype=dtype) if tb else rand(3, 37, 29, dtype=dtype)
    out = llmm.matmul(a, b, transpose_a=ta, transpose_b=tb)
    A = np.swapaxes(a, 1, 2) if ta else a
    B = np.swapaxes(b, 1, 2) if tb else b
    assert out.shape == (3, 5, 29) and out.dtype == dtype
    close(out, A.astype(np.float64) @ B.astype(np.float64), tol)


def test_matmul_broadcast_weight_and_out_param():
    x, w = rand(4, 6, 64), rand(100, 64)
    out = np.full((4, 6, 100), np.nan, np.float32)
    r = llmm.matmul(x, w, out, transpose_b=True)
    assert r is out
    close(out, x.astype(np.float64) @ w.T.astype(np.float64), 1e-6)


def test_seed_exact_values():
    a = np.arange(12, dtype=np.float32).reshape(2, 2, 3)
    b = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    assert llmm.matmul(a, b).reshape(-1).tolist() == [20, 23, 26, 29, 56, 68, 80, 92, 344, 365, 386, 407, 488, 518,
                                                     548, 578]


def test_errors_are_llmm_errors_with_messages():
    with pytest.raises(llmm.Error, match="inner dimensions differ"):
        llmm.matmul(rand(4, 5), rand(6, 3))
    with pytest.raises(RuntimeError):  # llmm.Error is a RuntimeError
        llmm.matmul(rand(4, 5), rand(6, 3))
    with pytest.raises(llmm.Error, match="only homogeneous dtypes"):
        llmm.matmul(rand(4, 5), rand(5, 3, dtype=np.float16))
    with pytest.raises(llmm.Error, match="invalid left matmul argument"):
        llmm.matmul(rand(5, 8)[:, ::2], rand(4, 3))  # inner stride 2: refused, not copied
    with pytest.raises(llmm.Error, match="negative stride"):
        llmm.matmul(rand(4, 5)[::-1], rand(5, 3))
    out = np.full((4, 3), np.nan, np.float32)
    with pytest.raises(llmm.Error, match="c must be"):
        llmm.matmul(rand(4, 5), rand(5, 2), out)
    assert np.all(np.isnan(out))  # nothing written by a refused call
    with pytest.raises(llmm.Error, match="precision must be"):
        llmm.matmul(rand(4, 5), rand(5, 3), precision="quick")
    # A retired route's name (issue 47) is refused like any unknown one, naming the valid routes.
    for retired in ("skinny_mma", "tiled", "naive", "gemv"):
        out = np.full((4, 3), np.nan, np.float32)
        with pytest.raises(llmm.Error, match=rf"unknown dense route '{retired}' \(auto, cpu, zero_fill, gemv_wide, "
                                             r"tiled_sm90, cublaslt\)"):
            llmm.matmul(rand(4, 5), rand(5, 3), out, route=retired)
        assert np.all(np.isnan(out))


def test_plan_on_cpu():
    p = llmm.plan_matmul(8, 4096, 4096, "cpu")
    assert p["route"] == "cpu" and p["reason"]


def test_plan_matmul_flags_default_like_matmul():
    """plan_matmul's transpose flags default as matmul's (False): the plan of a default matmul call
    is the plan of its own sizes; transpose_b=True asks for x . w^T."""
    import inspect

    sig_plan, sig_mm = inspect.signature(llmm.plan_matmul), inspect.signature(llmm.matmul)
    for flag in ("transpose_a", "transpose_b"):
        assert sig_plan.parameters[flag].default == sig_mm.parameters[flag].default is False
    assert llmm.plan_matmul(8, 64, 32, "cpu", transpose_b=True)["route"] == "cpu"


def test_out_dtype_codes_and_names_allocate_numpy_outputs():
    n, k = 40, 256
    t = RNG.integers(-1, 2, (n, k)).astype(np.float32)
    t[:, ::128] = 1.0
    w = t * np.float32(0.125)
    weight = llmm.upload_tq2(llmm.quantize_tq2(w, "absmax"), n, k)
    x = rand(3, k, dtype=np.float16)
    want = x.astype(np.float64) @ w.T.astype(np.float64)
    for out_dtype in ("f16", "float16", np.float16):  # "f16" is llmm's code, not NumPy's float128
        y = llmm.gemm_tq2(weight, x, out_dtype=out_dtype)
        assert y.dtype == np.float16, out_dtype
        close(y, want, 2e-3)
    assert llmm.gemm_tq2(weight, x, out_dtype="f32").dtype == np.float32
    try:  # with ml_dtypes, NumPy has a bfloat16 and the op itself refuses a bf16 output of f32 input
        import ml_dtypes  # noqa: F401
        why = "output dtype bf16 must be f32 or the input's"
    except ImportError:
        why = "NumPy and CuPy have no bfloat16"
    with pytest.raises(llmm.Error, match=why):
        llmm.gemm_tq2(weight, x, out_dtype="bf16")
    with pytest.raises(llmm.Error, match="unknown dtype 'float7'"):
        llmm.gemm_tq2(weight, x, out_dtype="float7")


def test_plan_tq2_and_suggest_matmul_id_route_on_cpu():
    assert llmm.plan_tq2(3, 64, 256, "cpu") == {
        "route": "cpu", "workspace_bytes": 0, "reason": "CPU context: float64 reference backend"}
    assert llmm.plan_tq2(3, 64, 256, rand(2, 2), out_dtype="float32")["route"] == "cpu"
    with pytest.raises(llmm.Error, match="k a positive multiple of 128, got m 3, n 64, k 200"):
        llmm.plan_tq2(3, 64, 200, "cpu")
    with pytest.raises(llmm.Error, match="out_dtype must be f32 or the input's f32, got bf16"):
        llmm.plan_tq2(3, 64, 256, "cpu", out_dtype="bfloat16")
    with pytest.raises(llmm.Error, match="unknown ternary route 'tq2_fast'"):
        llmm.plan_tq2(3, 64, 256, "cpu", route="tq2_fast")
    # v1's name, retired in issue 47, is refused like any unknown one, naming the valid routes
    with pytest.raises(llmm.Error, match=r"unknown ternary route 'tq2_stream' \(auto, cpu, tq2_stream_v2, "):
        llmm.plan_tq2(3, 64, 256, "cpu", route="tq2_stream")
    # the Hopper engine's route is known by name and refused off CUDA with the reason
    with pytest.raises(llmm.Error, match="route tq2_tiled_sm90 cannot run .*needs a CUDA context"):
        llmm.plan_tq2(3, 64, 256, "cpu", route="tq2_tiled_sm90")
    with pytest.raises(llmm.Error, match="route tq2_tiled_sm90_splitk cannot run .*needs a CUDA context"):
        llmm.plan_tq2(128, 2560, 6912, "cpu", route="tq2_tiled_sm90_splitk")
    assert llmm.suggest_matmul_id_route(1, 768, 2048, 8, 128, "cpu") == "direct"
    assert llmm.suggest_matmul_id_route(4096, 768, 2048, 8, 128, "cpu") == "grouped"
    # the grouped route is correct for repeated ids too: may_repeat no longer forces "direct"
    assert llmm.suggest_matmul_id_route(4096, 768, 2048, 8, 128, "cpu", may_repeat=True) == "grouped"


def test_ternary_roundtrip_and_gemm():
    n, k = 40, 256
    t = RNG.integers(-1, 2, (n, k)).astype(np.float32)
    t[:, ::128] = 1.0  # every block has a nonzero: absmax recovers the scale exactly
    w = t * np.float32(0.0625)
    aos = llmm.quantize_tq2(w, "absmax")
    assert len(aos) == n * (k // 128) * 34
    np.testing.assert_array_equal(llmm.dequantize_tq2(aos, n, k), w)
    weight = llmm.upload_tq2(aos, n, k)
    assert (weight.n, weight.k, weight.device) == (n, k, "cpu")
    for m in (1, 7, 8, 9, 100):
        x = (np.sin(np.arange(k) * 0.011 - 0.37)[None, :] + np.arange(m)[:, None] * 0.0005).astype(np.float32)
        out = llmm.gemm_tq2(weight, x)
        assert out.shape == (m, n)
        assert np.max(np.abs(out - x.astype(np.float64) @ w.T.astype(np.float64))) < 1e-3
        assert np.any(np.abs(out) > 1e-6)
    with pytest.raises(llmm.Error, match="invalid code 3"):
        bad = bytearray(aos)
        bad[0] = 0xFF
        llmm.dequantize_tq2(bytes(bad), n, k)
    with pytest.raises(llmm.Error, match="weight .* has k = 256"):
        llmm.gemm_tq2(weight, rand(3, 128))


def test_prism_q2_0_group128_converts_losslessly_and_refuses_plus_two():
    # PrismML's Q2_0 (group 128): the same 34-byte block as TQ2_0_g128 with the f16 scale first.
    n, k = 6, 384
    w = (RNG.integers(-1, 2, (n, k)) * 0.125).astype(np.float32)
    w[:, ::128] = 0.125  # every block has a nonzero: absmax recovers the scale exactly
    ours = np.frombuffer(llmm.quantize_tq2(w, "absmax"), np.uint8).reshape(-1, 34)
    prism = np.concatenate([ours[:, 32:], ours[:, :32]], axis=1).tobytes()
    back = llmm.tq2_from_gguf(prism, "Q2_0_g128", n, k)
    assert back == ours.tobytes()
    np.testing.assert_array_equal(llmm.dequantize_tq2(back, n, k), w)
    bad = bytearray(prism)
    bad[34 * 2 + 2] |= 0x03  # row 0, block 2, byte 0: code 3, i.e. +2
    with pytest.raises(llmm.Error, match=r"code 3 \(\+2\) in row 0, block 2, byte 0"):
        llmm.tq2_from_gguf(bytes(bad), "Q2_0_g128", n, k)
    with pytest.raises(llmm.Error, match=r"612 bytes given, an \[6, 384\] Q2_0 \(group 64\) tensor is 648"):
        llmm.tq2_from_gguf(prism, "Q2_0", n, k)  # upstream's group-64 Q2_0: another size


@pytest.mark.parametrize("route", ["direct", "grouped"])
@pytest.mark.parametrize("layout", ["shared", "slotted"])
def test_matmul_id_numpy(route, layout):
    m, n, k, top_k, e = 9, 7, 35, 2, 4
    w = rand(e, n, k)
    ids = np.array([[(t + s) % e for s in range(top_k)] for t in range(m)], dtype=np.uint32)
    ids[3, 1] = 99  # out of range: a zero row
    x = rand(m, k) if layout == "shared" else rand(m * top_k, k)
    scratch = llmm.matmul_id_scratch(e, m) if route == "grouped" else None
    out = llmm.matmul_id(w, x, ids, layout=layout, route=route, scratch=scratch)
    assert out.shape == (m, top_k, n)
    for t in range(m):
        for s in range(top_k):
            row = x[t] if layout == "shared" else x[t * top_k + s]
            want = np.zeros(n) if ids[t, s] >= e else w[ids[t, s]].astype(np.float64) @ row.astype(np.float64)
            close(out[t, s], want, 1e-6)
    assert np.all(out[3, 1] == 0)
    out32 = llmm.matmul_id(w, x, ids.astype(np.int32), layout=layout, route=route, scratch=scratch)
    np.testing.assert_array_equal(out32, out)  # int32 ids are read as u32


@pytest.mark.parametrize("layout", ["shared", "slotted"])
def test_matmul_id_tq2_numpy(layout):
    m, n, k, top_k, e = 6, 9, 256, 3, 5
    w = rand(e * n, k)
    aos = llmm.quantize_tq2(w, "absmax")
    wq = llmm.dequantize_tq2(aos, e * n, k).reshape(e, n, k).astype(np.float64)  # the exact ternary weights
    experts = llmm.upload_tq2_experts(aos, e, n, k)
    assert (experts.experts, experts.n, experts.k) == (e, n, k)
    ids = np.array([[(2 * t + s) % e for s in range(top_k)] for t in range(m)], dtype=np.int64)
    ids[2, 0] = -1  # out of range: a zero row
    ids[4, 2] = e
    x = rand(m, k) if layout == "shared" else rand(m, top_k, k)
    out = llmm.matmul_id_tq2(experts, x, ids, layout=layout)
    assert out.shape == (m, top_k, n) and out.dtype == np.float32
    for t in range(m):
        for s in range(top_k):
            row = (x[t] if layout == "shared" else x[t, s]).astype(np.float64)
            want = np.zeros(n) if not 0 <= ids[t, s] < e else wq[ids[t, s]] @ row
            close(out[t, s], want, 1e-6)
    assert np.all(out[2, 0] == 0) and np.all(out[4, 2] == 0)
    with pytest.raises(llmm.Error, match="use matmul_id_tq2"):
        llmm.gemm_tq2(experts, x if layout == "shared" else x[:, 0])
    with pytest.raises(llmm.Error, match="route tq2_moe_naive cannot run"):
        llmm.matmul_id_tq2(experts, x, ids, layout=layout, route="tq2_moe_naive")
    with pytest.raises(llmm.Error, match="unknown ternary-experts route"):
        llmm.matmul_id_tq2(experts, x, ids, layout=layout, route="grouped")
    assert llmm.release_tq2(experts)


def test_plan_matmul_id_names_what_matmul_id_launches():
    m, n, k, top_k, e = 9, 7, 35, 2, 4
    w, x = rand(e, n, k), rand(m, k)
    ids = np.array([[(t + s) % e for s in range(top_k)] for t in range(m)], dtype=np.uint32)
    scratch = llmm.matmul_id_scratch(e, m)
    out = np.full((m, top_k, n), np.nan, np.float32)
    direct = llmm.plan_matmul_id(w, x, ids, out, route="direct")
    assert direct["route"] == "direct" and direct["kernels"] == ["cpu_matmul_id_reference"]
    grouped = llmm.plan_matmul_id(w, x, ids, out, route="grouped", scratch=scratch)
    assert grouped["route"] == "grouped"
    assert grouped["kernels"] == ["cpu_matmul_id_map", "cpu_matmul_id_reference"]
    assert not grouped["engine"] and not grouped["staged"] and not grouped["fused"]
    assert np.isnan(out).all()  # a plan writes nothing
    # auto, the default, is the suggested route (grouped here: 18 routed rows on 4 experts), with
    # or without a scratch; without one, llmm's own serves the grouped route (and nothing is written)
    suggested = llmm.suggest_matmul_id_route(m, n, k, top_k, e, x)
    assert suggested == "grouped"
    for s in (None, scratch):
        auto = llmm.plan_matmul_id(w, x, ids, out, scratch=s)
        assert auto["route"] == suggested and auto["pooled"] == (s is None)
    assert llmm.plan_matmul_id(w, x[:3], ids[:3])["route"] == "direct"  # 6 rows on 4 experts
    assert llmm.plan_matmul_id(w, x, ids, out, route="grouped")["kernels"] == grouped["kernels"]
    assert not grouped["pooled"] and np.isnan(out).all()
    assert llmm.plan_matmul_id(w, x[:0], ids[:0], np.zeros((0, top_k, n), np.float32))["kernels"] == []
    with pytest.raises(llmm.Error, match="scratch capacity experts/tokens=4/8 is smaller than 4/9"):
        llmm.plan_matmul_id(w, x, ids, route="grouped", scratch=llmm.matmul_id_scratch(e, 8))


def test_matmul_id_grouped_kernel_by_name():
    """grouped_kernel names a CUDA GEMM: on the CPU only "auto" runs the grouped route (the others
    are refused, output untouched); the direct route ignores it; a wrong name, or a retired
    kernel's (skinny_mma, issue 47), is refused naming the valid ones."""
    m, n, k, top_k, e = 9, 7, 35, 2, 4
    w, x = rand(e, n, k), rand(m, k)
    ids = np.array([[(t + s) % e for s in range(top_k)] for t in range(m)], dtype=np.uint32)
    scratch = llmm.matmul_id_scratch(e, m)
    want = llmm.matmul_id(w, x, ids, route="grouped", scratch=scratch, grouped_kernel="auto")
    for name in ("mma_sync", "tiled_sm90", "tiled_sm90_fused"):
        out = np.full((m, top_k, n), np.nan, np.float32)
        with pytest.raises(llmm.Error, match=f"grouped kernel {name} runs on CUDA devices only"):
            llmm.matmul_id(w, x, ids, out, route="grouped", scratch=scratch, grouped_kernel=name)
        assert np.isnan(out).all()
        with pytest.raises(llmm.Error, match=f"grouped kernel {name} runs on CUDA devices only"):
            llmm.plan_matmul_id(w, x, ids, route="grouped", scratch=scratch, grouped_kernel=name)
        np.testing.assert_array_equal(llmm.matmul_id(w, x, ids, route="direct", grouped_kernel=name), want)  # ignored
    for bad in ("fast", "skinny_mma"):
        with pytest.raises(llmm.Error, match=f"grouped_kernel must be 'auto', 'mma_sync', 'tiled_sm90' or 'tiled_sm90_fused', got '{bad}'"):
            llmm.matmul_id(w, x, ids, route="grouped", scratch=scratch, grouped_kernel=bad)
        with pytest.raises(llmm.Error, match=f"got '{bad}'"):
            llmm.plan_matmul_id(w, x, ids, route="grouped", scratch=scratch, grouped_kernel=bad)


def test_matmul_id_capability_and_refusals():
    c = llmm.matmul_id_capability("f32", 9, 7, 35, 2, 4, 7 * 35 * 4, route="grouped")
    assert (c["weight_bytes"], c["input_bytes"], c["ids_bytes"], c["output_bytes"]) == (3920, 1260, 72, 504)
    assert (c["scratch_counts_bytes"], c["scratch_rows_bytes"]) == (16, 72)  # compact: m * top_k u32 rows
    with pytest.raises(llmm.Error, match="expert stride 12 is smaller than one 28-byte matrix"):
        llmm.matmul_id_capability("f32", 1, 1, 7, 1, 2, 12)
    # the grouped route without a scratch: llmm's own, the same result as with the caller's
    w, x, ids = rand(4, 7, 35), rand(9, 35), np.zeros((9, 2), np.uint32) + np.array([0, 1], np.uint32)
    np.testing.assert_array_equal(llmm.matmul_id(w, x, ids, route="grouped"),
                                  llmm.matmul_id(w, x, ids, route="grouped", scratch=llmm.matmul_id_scratch(4, 9)))




def test_import_llmm_needs_no_torch():
    # A fresh interpreter: import llmm loads no torch, and with torch made unimportable everything
    # but llmm.torch_ops still works; llmm.torch_ops then raises ImportError.
    code = (
        "import sys\n"
        "import llmm\n"
        "assert 'torch' not in sys.modules, 'import llmm imported torch'\n"
        "sys.modules['torch'] = None\n"
        "import importlib, numpy as np\n"
        "importlib.reload(llmm)\n"
        "a = np.ones((2, 3), np.float32)\n"
        "assert llmm.matmul(a, a, transpose_b=True).tolist() == [[3.0, 3.0], [3.0, 3.0]]\n"
        "try:\n"
        "    llmm.torch_ops\n"
        "except ImportError as e:\n"
        "    print('ImportError:', e)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ImportError:"), r.stdout


def test_type_stubs_and_marker_are_installed():
    pkg = pathlib.Path(llmm.__file__).parent
    assert (pkg / "py.typed").is_file()
    stub = (pkg / "_llmm.pyi").read_text()
    tree = ast.parse(stub)
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    public = {n for n in dir(llmm._llmm) if not n.startswith("_")}
    assert public <= names, f"not in _llmm.pyi: {sorted(public - names)}"
    for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
        assert ast.get_docstring(fn), f"_llmm.{fn.name} has no docstring"


def test_public_functions_have_docstrings():
    for name in llmm.__all__:
        obj = getattr(llmm, name)
        assert obj.__doc__ and obj.__doc__.strip(), f"llmm.{name} has no docstring"


def test_torch_cuda_matmul_on_current_stream():
    t = need_cuda_torch()
    s = t.cuda.Stream()
    with t.cuda.stream(s):
        a = t.randn(5, 256, device="cuda", dtype=t.bfloat16)
        w = t.randn(512, 256, device="cuda", dtype=t.bfloat16)
        out = llmm.matmul(a, w, transpose_b=True)
        ref = (a.double() @ w.double().T)
    s.synchronize()
    assert (out.double() - ref).abs().max().item() <= 2e-2 * ref.abs().max().item()


def test_version_is_the_packages():
    """One version: CMakeLists.txt's project(VERSION), compiled into the extension and read by the
    wheel's metadata (pyproject's regex provider)."""
    import importlib.metadata
    import re

    assert re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", llmm.__version__)
    assert importlib.metadata.version("llmm") == llmm.__version__


def test_llmm_log_names_the_route():
    """LLMM_LOG=1: one stderr line per call with the op, the problem and the route (read at start)."""
    import os

    code = ("import numpy as np, llmm; "
            "llmm.matmul(np.ones((2, 3), np.float32), np.ones((4, 3), np.float32), transpose_b=True)")
    env = dict(os.environ, LLMM_LOG="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert "llmm: matmul batch 1 m 2 n 4 k 3 f32 nt exact -> route cpu" in r.stderr, r.stderr
    env["LLMM_LOG"] = "0"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert "llmm:" not in r.stderr


def test_matmul_id_route_auto_and_capability_names():
    """route="auto" is the planner's choice (grouped only with a scratch); the capability names
    routes as route= takes them."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 8, 16)).astype(np.float32)
    x = rng.standard_normal((64, 16)).astype(np.float32)
    ids = rng.integers(0, 4, size=(64, 2)).astype(np.int32)
    want = llmm.matmul_id(w, x, ids, route="direct")
    assert np.array_equal(llmm.matmul_id(w, x, ids, route="auto"), want)
    scratch = llmm.matmul_id_scratch(4, 64, max_top_k=2)
    assert llmm.suggest_matmul_id_route(64, 8, 16, 2, 4, x) == "grouped"  # 128 rows on 4 experts
    np.testing.assert_allclose(llmm.matmul_id(w, x, ids, route="auto", scratch=scratch), want, rtol=1e-6, atol=1e-6)
    cap = llmm.matmul_id_capability("f32", 64, 8, 16, 2, 4, 8 * 16 * 4, route="grouped")
    assert cap["route"] == "grouped"


def test_ml_dtypes_bfloat16_round_trips_through_numpy_calls():
    """NumPy has no bfloat16 of its own; ml_dtypes' (JAX's) is taken as bf16 data, in and out,
    read-only inputs included, and out=None allocates it for bf16 outputs."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 64)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((7, 64)).astype(ml_dtypes.bfloat16)
    a.flags.writeable = False
    c = llmm.matmul(a, w, transpose_b=True)
    assert c.dtype == ml_dtypes.bfloat16 and c.shape == (5, 7)
    ref = a.astype(np.float64) @ w.astype(np.float64).T
    scale = np.abs(a.astype(np.float64)) @ np.abs(w.astype(np.float64)).T
    assert np.all(np.abs(c.astype(np.float64) - ref) <= 2.0 ** -8 * scale + 1e-30)  # one bf16 rounding
    out = np.full((5, 7), np.nan, ml_dtypes.bfloat16)
    llmm.matmul(a, w, out, transpose_b=True)
    assert np.array_equal(out.view(np.uint16), c.view(np.uint16))
    y = llmm.matmul_id(rng.standard_normal((3, 8, 64)).astype(ml_dtypes.bfloat16), a[:2],
                       np.array([[0, 2], [1, 1]], np.int32), out_dtype="bf16")
    assert y.dtype == ml_dtypes.bfloat16 and y.shape == (2, 2, 8)
