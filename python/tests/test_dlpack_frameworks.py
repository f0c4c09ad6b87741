"""DLPack producers other than NumPy and torch, on the GPU: CuPy (inputs, out=, outputs allocated
as CuPy arrays, CuPy's current stream) and JAX (inputs exported for the call's stream; outputs
go into a CuPy or torch array, since JAX arrays are immutable). Skipped where CuPy or JAX is not
installed (CI); the GPU machine has both."""
import os

import numpy as np
import pytest

import llmm
from conftest import need_cuda_torch

RNG = np.random.default_rng(11)
SLEEP_CYCLES = 400_000_000  # about 0.2 s of GPU time: long enough to see the ordering


def rand(*shape, dtype=np.float32):
    x = (RNG.random(shape) + 0.25) * np.where(RNG.random(shape) < 0.5, -1, 1)
    return x.astype(dtype)


def close(got, want, tol):
    assert np.all(np.isfinite(got)), "non-finite output"
    err = np.max(np.abs(got.astype(np.float64) - want)) / max(1.0, np.max(np.abs(want)))
    assert err <= tol, f"max scaled err {err} > {tol}"


def need_cupy():
    cp = pytest.importorskip("cupy", reason="CuPy is not installed: CuPy tests skipped")
    need_cuda_torch()  # a GPU llmm can use (a failure instead of a skip under LLMM_REQUIRE_GPU=1)
    return cp


def need_jax_gpu():
    # JAX takes 75% of the GPU's memory at start unless told not to; torch runs in this process too.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    jax = pytest.importorskip("jax", reason="JAX is not installed: JAX tests skipped")
    need_cuda_torch()
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        pytest.skip("JAX sees no GPU (CPU-only jaxlib)")
    return jax, gpus[0]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-5), (np.float16, 2e-3)])
def test_cupy_matmul_out_allocation_and_transposed_view(dtype, tol):
    cp = need_cupy()
    a, b = rand(37, 70, dtype=dtype), rand(29, 70, dtype=dtype)
    want = a.astype(np.float64) @ b.astype(np.float64).T
    y = llmm.matmul(cp.asarray(a), cp.asarray(b).T)  # a transposed view: taken as transpose_b, no copy
    assert isinstance(y, cp.ndarray) and y.dtype == dtype and y.shape == (37, 29)
    close(cp.asnumpy(y), want, tol)
    out = cp.full((37, 29), cp.nan, dtype=dtype)
    assert llmm.matmul(cp.asarray(a), cp.asarray(b), out, transpose_b=True) is out
    close(cp.asnumpy(out), want, tol)
    with pytest.raises(llmm.Error, match="invalid left matmul argument"):
        llmm.matmul(cp.asarray(rand(5, 16, dtype=dtype))[:, ::2], cp.asarray(b[:, :8]).T)  # inner stride 2: refused


@pytest.mark.cuda
def test_cupy_matmul_id_and_gemm_tq2():
    cp = need_cupy()
    e, n, k, m, top_k = 6, 40, 256, 5, 2
    w = rand(e, n, k)
    x = rand(m, k)
    ids = np.stack([RNG.permutation(e)[:top_k] for _ in range(m)]).astype(np.uint32)
    y = llmm.matmul_id(cp.asarray(w), cp.asarray(x), cp.asarray(ids))
    assert isinstance(y, cp.ndarray) and y.shape == (m, top_k, n) and y.dtype == np.float32
    want = np.einsum("tsnk,tk->tsn", w.astype(np.float64)[ids.astype(np.int64)], x.astype(np.float64))
    close(cp.asnumpy(y), want, 1e-5)

    t = RNG.integers(-1, 2, (n, k)).astype(np.float32)
    t[:, ::128] = 1.0
    wt = t * np.float32(0.125)
    weight = llmm.upload_tq2(llmm.quantize_tq2(wt, "absmax"), n, k, device=cp.asarray(x))
    assert weight.device == "cuda:0"
    y = llmm.gemm_tq2(weight, cp.asarray(x))
    assert isinstance(y, cp.ndarray) and y.shape == (m, n)
    close(cp.asnumpy(y), x.astype(np.float64) @ wt.T.astype(np.float64), 1e-5)
    with pytest.raises(llmm.Error, match="NumPy and CuPy have no bfloat16"):
        llmm.gemm_tq2(weight, cp.asarray(x), out_dtype="bf16")
    llmm.release_tq2(weight)


@pytest.mark.cuda
def test_cupy_calls_run_on_cupys_current_stream():
    cp = need_cupy()
    torch = need_cuda_torch()
    a, w = rand(64, 256), rand(128, 256)
    src, wd = cp.asarray(a), cp.asarray(w)
    x = cp.zeros_like(src)
    out = cp.full((64, 128), cp.nan, cp.float32)
    s = cp.cuda.Stream(non_blocking=True)  # no implicit ordering with the legacy default stream
    with s:
        llmm.matmul(x, wd, out, transpose_b=True)  # warm-up on s
    s.synchronize()
    with s:
        with torch.cuda.stream(torch.cuda.ExternalStream(s.ptr)):
            torch.cuda._sleep(SLEEP_CYCLES)  # s is busy; x is written only after the sleep
        x[...] = src
        llmm.matmul(x, wd, out, transpose_b=True)
        pending = not s.done
    s.synchronize()
    assert pending, "the call returned only after the stream drained: it synchronised with the host"
    # On any other stream the call would have read x before the copy (zeros) and this fails.
    close(cp.asnumpy(out), a.astype(np.float64) @ w.astype(np.float64).T, 1e-5)


@pytest.mark.cuda
def test_jax_inputs_with_cupy_and_torch_outputs():
    jax, gpu = need_jax_gpu()
    cp = need_cupy()
    torch = need_cuda_torch()
    jnp = jax.numpy
    a, b = rand(33, 64), rand(64, 20)
    want = 2 * a.astype(np.float64) @ b.astype(np.float64)
    ja = jax.device_put(jnp.asarray(a), gpu) * 2  # the result of a JAX computation (asynchronous)
    jb = jax.device_put(jnp.asarray(b), gpu)
    out = cp.full((33, 20), cp.nan, cp.float32)
    llmm.matmul(ja, jb, out)
    close(cp.asnumpy(out), want, 1e-5)
    tout = torch.full((33, 20), float("nan"), device="cuda")
    llmm.matmul(ja, jb, tout)
    close(tout.cpu().numpy(), want, 1e-5)
    with pytest.raises(llmm.Error, match="a JAX array is immutable"):
        llmm.matmul(ja, jb)  # no out=: refused, never written into JAX's buffer
