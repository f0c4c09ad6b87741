"""llmm: matmul kernels for LLM and diffusion-transformer inference.

Tensors are any DLPack-capable arrays: NumPy arrays run on the CPU reference backend; torch,
CuPy or JAX arrays on a CUDA device run the CUDA kernels on the caller's current stream (torch's
current stream for torch tensors). Outputs are passed in (``out=``) or allocated like the input
when it is a NumPy array or a torch tensor. Errors raise ``llmm.Error`` (a RuntimeError) with the
library's message, before anything is enqueued.
"""
from __future__ import annotations

import itertools
from typing import Any, Optional

import numpy as np

from . import _llmm
from ._llmm import Error, MatmulIdScratch, TernaryWeight, built_with_cuda, cuda_available

__all__ = [
    "Error", "TernaryWeight", "MatmulIdScratch", "built_with_cuda", "cuda_available", "matmul", "plan_matmul",
    "quantize_tq2", "dequantize_tq2", "upload_tq2", "gemm_tq2", "matmul_id", "matmul_id_capability",
    "matmul_id_scratch",
]

_TORCH_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}
_keys = itertools.count(1)


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


def _stream(x: Any) -> int:
    """The caller's current CUDA stream for torch tensors on a GPU, else 0 (legacy default)."""
    if _is_torch(x) and x.is_cuda:
        import torch

        return int(torch.cuda.current_stream(x.device).cuda_stream)
    return 0


def _empty(like: Any, shape, dtype: Optional[str] = None):
    if isinstance(like, np.ndarray):
        return np.empty(shape, dtype=np.dtype(dtype) if dtype else like.dtype)
    if _is_torch(like):
        import torch

        dt = getattr(torch, _TORCH_DTYPES.get(dtype, dtype)) if dtype else like.dtype
        return torch.empty(shape, dtype=dt, device=like.device)
    raise Error("llmm: pass out= for arrays that are neither NumPy arrays nor torch tensors")


def _device_like(x: Any):
    """A one-element array on x's device (tells the bindings where a resource must live)."""
    if isinstance(x, str):
        if x == "cpu":
            return np.empty(1, np.float32)
        import torch

        return torch.empty(1, dtype=torch.float32, device=x)
    return x.reshape(-1)[:1] if hasattr(x, "reshape") else x


def matmul(a, b, out=None, *, transpose_a: bool = False, transpose_b: bool = False, precision: str = "exact",
           route: str = "auto"):
    """out[..., m, n] = op(a)[..., m, k] @ op(b)[..., k, n] for float32/float16/bfloat16.

    a is [m, k] or [batch, m, k] ([.., k, m] with transpose_a); b is [k, n] or [batch, k, n]
    ([.., n, k] with transpose_b); a rank-2 operand broadcasts over the batch. Innermost
    strides must be 1 (non-contiguous inputs are refused with a clear message, never copied).
    """
    if out is None:
        m = a.shape[-1] if transpose_a else a.shape[-2]
        n = b.shape[-2] if transpose_b else b.shape[-1]
        batch = a.shape[0] if len(a.shape) == 3 else (b.shape[0] if len(b.shape) == 3 else None)
        out = _empty(a, (batch, m, n) if batch is not None else (m, n))
    _llmm.matmul(a, b, out, transpose_a=transpose_a, transpose_b=transpose_b, precision=precision, route=route,
                 stream=_stream(out))
    return out


def plan_matmul(m: int, n: int, k: int, like, *, transpose_a: bool = False, transpose_b: bool = True,
                precision: str = "exact") -> dict:
    """The route llmm.matmul would take for this shape and dtype on like's device."""
    return _llmm.plan_matmul(m, n, k, _device_like(like), transpose_a=transpose_a, transpose_b=transpose_b,
                             precision=precision)


def quantize_tq2(w, rule: str = "absmean") -> bytes:
    """TQ2_0_g128 blocks (AoS bytes) of a float32 [n, k] weight, k % 128 == 0."""
    return _llmm.tq2_quantize(np.ascontiguousarray(w, dtype=np.float32), rule)


def dequantize_tq2(aos: bytes, n: int, k: int) -> np.ndarray:
    out = np.empty((n, k), dtype=np.float32)
    _llmm.tq2_dequantize(aos, n, k, out)
    return out


def upload_tq2(aos: bytes, n: int, k: int, *, device="cpu", key: Optional[int] = None) -> TernaryWeight:
    """A TernaryWeight on `device` ("cpu", "cuda:0" or an array on that device); uploaded once per key."""
    return _llmm.tq2_upload(aos, n, k, next(_keys) if key is None else key, _device_like(device))


def gemm_tq2(weight: TernaryWeight, x, out=None, *, precision: str = "exact", route: str = "auto",
             out_dtype: Optional[str] = None):
    """out[m, n] = x[m, k] @ W[n, k]^T with the ternary weight; out float32 (default) or x's dtype."""
    if out is None:
        out = _empty(x, (x.shape[0], weight.n), out_dtype or "float32")
    _llmm.gemm_tq2(weight, x, out, precision=precision, route=route, stream=_stream(out))
    return out


def matmul_id_capability(weight_dtype: str, m: int, n: int, k: int, top_k: int, n_experts: int,
                         expert_stride_bytes: int, **kw) -> dict:
    return _llmm.matmul_id_capability(weight_dtype, m, n, k, top_k, n_experts, expert_stride_bytes, **kw)


def matmul_id_scratch(max_experts: int, max_tokens: int, device="cpu") -> MatmulIdScratch:
    return _llmm.matmul_id_scratch(max_experts, max_tokens, _device_like(device))


def matmul_id(weights, x, ids, out=None, *, layout: str = "shared", route: str = "direct", scratch=None,
              may_repeat: bool = False, precision: str = "exact", out_dtype: Optional[str] = None):
    """out[t, s, :] = weights[ids[t, s]] @ x(t, s) for weights [E, n, k] and ids uint32 [m, top_k].

    x is [m, k] (layout "shared") or [m * top_k, k] ("slotted"); ids outside [0, E) give zero rows.
    route "grouped" needs a scratch from matmul_id_scratch and distinct ids per token.
    """
    n_experts, n, k = weights.shape
    m, top_k = ids.shape
    if out is None:
        out = _empty(x, (m, top_k, n), out_dtype or "float32")
    stride = weights.strides[0] if isinstance(weights, np.ndarray) else weights.stride(0) * weights.element_size()
    _llmm.matmul_id(weights, x, ids, out, top_k=top_k, n_experts=n_experts, expert_stride_bytes=int(stride),
                    layout=layout, may_repeat=may_repeat, route=route, scratch=scratch, precision=precision,
                    stream=_stream(out))
    return out
