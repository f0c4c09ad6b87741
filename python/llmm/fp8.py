"""FP8 e4m3 (float8_e4m3fn): host conversions bit-exact with ml_dtypes' float8_e4m3fn, weights
quantized with f32 scales per tensor, per output channel or per 128 x 128 block (DeepSeek-V3's
`weight_scale_inv` layout), DeepSeek-style safetensors loading, and the op on such weights,
matmul_fp8 (y = x @ dequant(w)^T; CUDA kernels on torch / CuPy CUDA arrays, the float64
reference on NumPy arrays) with its planner plan_matmul_fp8."""
from __future__ import annotations

import json
import struct
import sys
from typing import Any, Optional, Tuple

import numpy as np

from . import _array, _dtype_code, _empty, _is_torch, _launch, _llmm, _out, _where, cuda_available
from ._llmm import Error

__all__ = ["to_fp8_bits", "from_fp8_bits", "quantize_fp8", "dequantize_fp8", "quantize_fp8_activations",
           "load_fp8_safetensors", "matmul_fp8", "plan_matmul_fp8"]

_KINDS = ("block", "channel", "tensor")
_BLOCK = 128


def _host_f32(op: str, x: Any) -> np.ndarray:
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # a torch tensor: read on the host
        x = x.detach().cpu().float().numpy()
    try:
        return np.ascontiguousarray(np.asarray(x), dtype=np.float32)
    except (TypeError, ValueError) as e:
        raise Error(f"llmm.{op}: cannot be read as a float32 host array: {e}") from None


def to_fp8_bits(x, *, saturate: bool = False) -> np.ndarray:
    """float8_e4m3fn bits (uint8, x's shape) of x read as float32: round to nearest even; NaN, an
    infinity and a value above 464 become NaN (0x7F / 0xFF), as ml_dtypes' cast does, or +-448
    with saturate=True (NaN stays NaN)."""
    a = _host_f32("to_fp8_bits", x)
    return np.frombuffer(_llmm.fp8_from_f32(a, saturate), dtype=np.uint8).reshape(a.shape)


def from_fp8_bits(codes) -> np.ndarray:
    """float32 values of float8_e4m3fn bits (any uint8 array, or a float8_e4m3fn one viewed as bytes)."""
    if hasattr(codes, "detach") and hasattr(codes, "cpu"):
        codes = codes.detach().cpu().view(__import__("torch").uint8).numpy()
    c = np.ascontiguousarray(np.asarray(codes))
    if c.dtype.itemsize != 1:
        raise Error(f"llmm.from_fp8_bits: codes must be 1-byte items, got {c.dtype}")
    return np.frombuffer(_llmm.fp8_to_f32(c.view(np.uint8)), dtype=np.float32).reshape(c.shape)


def _scale_shape(kind: str, n: int, k: int) -> Tuple[int, int]:
    if kind == "tensor":
        return 1, 1
    if kind == "channel":
        return n, 1
    return -(-n // _BLOCK), -(-k // _BLOCK)


def quantize_fp8(w, scale: str = "block"):
    """(codes, scales) of a float [n, k] weight: scales float32 of shape [1, 1] ("tensor"), [n, 1]
    ("channel") or [ceil(n / 128), ceil(k / 128)] ("block"), each its group's max |w| / 448 (1 for
    an all-zero group); codes the float8_e4m3fn bits of w / scale, rounded to nearest even and
    saturated at +-448, so that w ~ value(code) * scale. NumPy in: codes uint8 (view them with
    ml_dtypes.float8_e4m3fn); a torch tensor in: a torch.float8_e4m3fn tensor and float32 scales
    on w's device. Refuses a non-finite weight, naming its row and column."""
    if scale not in _KINDS:
        raise Error(f"llmm.quantize_fp8: scale must be 'block', 'channel' or 'tensor', got {scale!r}")
    torch_w = w if hasattr(w, "detach") and hasattr(w, "cpu") else None
    a = _host_f32("quantize_fp8", w)
    if a.ndim != 2:
        raise Error(f"llmm.quantize_fp8: w must be [n, k], got shape {a.shape}")
    codes_b, scales_b = _llmm.fp8_quantize(a, scale)
    codes = np.frombuffer(codes_b, dtype=np.uint8).reshape(a.shape)
    scales = np.frombuffer(scales_b, dtype=np.float32).reshape(_scale_shape(scale, *a.shape))
    if torch_w is None:
        return codes, scales
    import torch

    return (torch.from_numpy(codes.copy()).view(torch.float8_e4m3fn).to(torch_w.device),
            torch.from_numpy(scales.copy()).to(torch_w.device))


def quantize_fp8_activations(x):
    """(codes, scales) of float activations x [m, k] quantized per token and 128 channels, the
    groups DeepSeek-V3's FP8 layers, DeepGEMM and vLLM's per_token_group_quant_fp8 use and the
    input matmul_fp8 takes with x_scale: each group's scale is max(max |x| / 448, the smallest
    positive float) (1 for an all-zero group; NaN for a group holding a NaN or an infinity, so
    that its token's outputs are NaN), each code the float8_e4m3fn bits of x / scale rounded to
    nearest even and saturated at +-448; bit for bit the rule of matmul_fp8's W8A8 routes.
    scales is float32 [m, ceil(k / 128)] laid out token-major (strides (1, m): the layout the CUDA
    route reads). NumPy in: codes uint8 (view them with ml_dtypes.float8_e4m3fn); a torch tensor
    in: torch.float8_e4m3fn codes and float32 scales on x's device (computed on the host)."""
    op = "quantize_fp8_activations"
    torch_x = x if _is_torch(x) else None
    a = _host_f32(op, x)
    if a.ndim != 2:
        raise Error(f"llmm.{op}: x must be [m, k], got shape {a.shape}")
    m, k = a.shape
    codes_b, scales_b = _llmm.fp8_quantize_activations(a)
    codes = np.frombuffer(codes_b, dtype=np.uint8).reshape(m, k).copy()
    by_group = np.frombuffer(scales_b, dtype=np.float32).reshape(-(-k // _BLOCK), m).copy()  # [G, m]: token-major
    if torch_x is None:
        return codes, by_group.T
    import torch

    return (torch.from_numpy(codes).view(torch.float8_e4m3fn).to(torch_x.device),
            torch.from_numpy(by_group).to(torch_x.device).t())


def _token_major(op: str, s: Any, m: int, groups: int) -> Any:
    """x's scales [m, groups] as the CUDA route reads them: token-major (strides (1, ld), ld a
    multiple of 4 and >= m, a 16-byte aligned base: DeepGEMM's TMA-aligned layout). A torch CUDA
    tensor in another layout is copied into one; anything else passes as it is (the CPU backend
    reads any strides; the library refuses other CUDA layouts, naming the one it needs)."""
    if not (_is_torch(s) and s.is_cuda):
        return s
    st = s.stride()
    if (m <= 1 or st[0] == 1) and (groups <= 1 or (st[1] % 4 == 0 and st[1] >= m)) and s.data_ptr() % 16 == 0:
        return s
    import torch

    t = torch.empty((groups, -(-m // 4) * 4), dtype=torch.float32, device=s.device)
    t[:, :m].copy_(s.t())
    return t[:, :m].t()


def _x_scales(op: str, x_scale: Any, m: int, k: int) -> Any:
    """x_scale as matmul_fp8 passes it: [m, ceil(k / 128)] float32; [m] or [m, 1] (one scale a
    token) broadcast over the groups."""
    s = _array(op, "x_scale", x_scale)
    groups = -(-k // _BLOCK)
    shape = tuple(int(d) for d in s.shape)
    if str(getattr(s, "dtype", "")).replace("torch.", "") != "float32":
        raise Error(f"llmm.{op}: x_scale must be float32, got {getattr(s, 'dtype', None)}")
    if shape in ((m,), (m, 1)) and shape != (m, groups):
        if _is_torch(s):
            s = s.reshape(m, 1).expand(m, groups)
            s = s if s.is_cuda else s.contiguous()
        else:
            s = np.ascontiguousarray(np.broadcast_to(np.asarray(s).reshape(m, 1), (m, groups)))
    elif shape != (m, groups):
        raise Fp8ScaleShapeError(
            f"llmm.{op}: x_scale of shape {list(shape)} fits no scale layout of x [{m}, {k}]: per token and 128 "
            f"channels [{m}, {groups}], or per token [{m}] / [{m}, 1]")
    return _token_major(op, s, m, groups)


def _expand(scales: np.ndarray, kind: str, n: int, k: int) -> np.ndarray:
    want = _scale_shape(kind, n, k)
    s = np.asarray(scales, dtype=np.float32).reshape(-1)
    if s.size != want[0] * want[1]:
        raise Error(f"llmm.dequantize_fp8: {kind} scales of a [{n}, {k}] weight are {list(want)}, got {s.size} values")
    s = s.reshape(want)
    if kind == "block":
        return np.repeat(np.repeat(s, _BLOCK, axis=0)[:n], _BLOCK, axis=1)[:, :k]
    return np.broadcast_to(s, (n, k))


def dequantize_fp8(codes, scales, *, scale: str = "block") -> np.ndarray:
    """float32 [n, k] = value(codes) * scales (scale: the kind quantize_fp8 was given), computed in
    float64 and rounded once."""
    if scale not in _KINDS:
        raise Error(f"llmm.dequantize_fp8: scale must be 'block', 'channel' or 'tensor', got {scale!r}")
    v = from_fp8_bits(codes)
    if v.ndim != 2:
        raise Error(f"llmm.dequantize_fp8: codes must be [n, k], got shape {v.shape}")
    if hasattr(scales, "detach"):
        scales = scales.detach().cpu().numpy()
    return (v.astype(np.float64) * _expand(scales, scale, *v.shape)).astype(np.float32)


def load_fp8_safetensors(path, name: str):
    """(codes uint8 [n, k], scales float32, kind) of an FP8 weight in a safetensors checkpoint as
    DeepSeek-V3 / Qwen3-FP8 write them: `name` (dtype F8_E4M3, [n, k]) and `name + "_scale_inv"`
    (F32: the value each code is multiplied by), its shape naming the kind ([ceil(n / 128),
    ceil(k / 128)] block, [n] or [n, 1] channel, [] or [1] tensor). Reads the header itself (no
    float8 support needed from NumPy or safetensors)."""
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        base = 8 + size

        def read(tname: str, dtype: str):
            if tname not in header:
                raise Error(f"llmm.load_fp8_safetensors: no tensor {tname!r} in {path}")
            info = header[tname]
            if info["dtype"] != dtype:
                raise Error(f"llmm.load_fp8_safetensors: {tname!r} is {info['dtype']}, expected {dtype}")
            begin, end = info["data_offsets"]
            f.seek(base + begin)
            return f.read(end - begin), [int(d) for d in info["shape"]]

        raw, shape = read(name, "F8_E4M3")
        sraw, sshape = read(name + "_scale_inv", "F32")
    if len(shape) != 2 or len(raw) != shape[0] * shape[1]:
        raise Error(f"llmm.load_fp8_safetensors: {name!r} must be [n, k] with n * k bytes, got {shape}, {len(raw)} bytes")
    n, k = shape
    scales = np.frombuffer(sraw, dtype="<f4").astype(np.float32)
    kinds = [kind for kind in ("block", "channel", "tensor") if scales.size == np.prod(_scale_shape(kind, n, k))
             and (sshape in ([], [1], [1, 1]) if kind == "tensor" else
                  sshape in ([n], [n, 1]) if kind == "channel" else sshape == list(_scale_shape(kind, n, k)))]
    if not kinds:
        raise Error(f"llmm.load_fp8_safetensors: scale shape {sshape} fits no scale kind of a [{n}, {k}] weight "
                    f"(block {list(_scale_shape('block', n, k))}, channel [{n}], tensor [])")
    bad = ~(np.isfinite(scales) & (scales > 0))
    if bad.any():
        raise Error(f"llmm.load_fp8_safetensors: scale {int(np.argmax(bad))} of {name!r} is {scales[bad][0]} "
                    f"(must be finite and > 0)")
    kind = kinds[0]
    return np.frombuffer(raw, dtype=np.uint8).reshape(n, k), scales.reshape(_scale_shape(kind, n, k)), kind


# ---------------------------------------------------------------------------------------------
# The op: y = x @ dequant(w)^T

class Fp8ScaleShapeError(Error, ValueError):
    """A scale array whose shape fits no scale kind of the weight: an llmm.Error that is also a
    ValueError."""


def _scale_kind_of(op: str, shape: tuple, n: int, k: int) -> str:
    """The scale kind a scale array of `shape` gives an [n, k] weight: one value -> "tensor";
    [n] or [n, 1] -> "channel"; [ceil(n / 128), ceil(k / 128)] -> "block". Where shapes coincide
    (one value is also [1, 1] block scales for n, k <= 128) "tensor" is taken: the same values."""
    numel = 1
    for d in shape:
        numel *= int(d)
    block = (-(-n // _BLOCK), -(-k // _BLOCK))
    if numel == 1 and len(shape) <= 2:
        return "tensor"
    if shape in ((n,), (n, 1)):
        return "channel"
    if shape == block:
        return "block"
    raise Fp8ScaleShapeError(
        f"llmm.{op}: scale of shape {list(shape)} fits no scale kind of a [{n}, {k}] weight: tensor [] / [1] / [1, 1], "
        f"channel [{n}] or [{n}, 1], block [{block[0]}, {block[1]}] (128 x 128 blocks)")


def _float8_name(w: Any) -> Optional[str]:
    """The dtype name of an 8-bit float array ("float8_e4m3fn", "float8_e5m2", ...), else None."""
    name = str(getattr(w, "dtype", "")).replace("torch.", "")
    return name if name.startswith("float8") else None


def _fp8_codes(op: str, w: Any, name: str = "weight") -> Any:
    """FP8 weight codes as the binding takes them: a torch.float8_e4m3fn tensor or an ml_dtypes
    float8_e4m3fn NumPy array viewed as uint8 (the same bytes, no copy); uint8 arrays as they are.
    Other 8-bit float kinds (e5m2, fnuz) are refused: their bits mean other values."""
    w = _array(op, name, w)
    f8 = _float8_name(w)
    if f8 is not None:
        if f8 != "float8_e4m3fn":
            raise Error(f"llmm.{op}: {name} has dtype {f8}: FP8 weight codes must be float8_e4m3fn, or uint8 "
                        f"holding float8_e4m3fn bits")
        if _is_torch(w):
            return w.view(sys.modules["torch"].uint8)
        if isinstance(w, np.ndarray):
            return w.view(np.uint8)
    return w


def _expert_scale_kind(op: str, name: str, shape: tuple, e: int, n: int, k: int) -> str:
    """The scale kind a scale array of `shape` gives e FP8 experts of [n, k] each: [e], [e, 1] or
    [e, 1, 1] -> "tensor"; [e, n] or [e, n, 1] -> "channel"; [e, ceil(n / 128), ceil(k / 128)] ->
    "block". Where shapes coincide (n = 1, or n, k <= 128 blocks) "tensor" is taken: the same
    values. Anything else raises Fp8ScaleShapeError naming the shapes that fit."""
    block = (e, -(-n // _BLOCK), -(-k // _BLOCK))
    if shape in ((e,), (e, 1), (e, 1, 1)):
        return "tensor"
    if shape in ((e, n), (e, n, 1)):
        return "channel"
    if shape == block:
        return "block"
    raise Fp8ScaleShapeError(
        f"llmm.{op}: {name} of shape {list(shape)} fits no scale kind of {e} FP8 experts of [{n}, {k}]: tensor "
        f"[{e}] / [{e}, 1] / [{e}, 1, 1], channel [{e}, {n}] / [{e}, {n}, 1] or block [{e}, {block[1]}, {block[2]}] "
        f"(128 x 128 blocks)")


def _fp8_experts(op: str, name: str, w: Any, scale_name: str, scale: Any) -> Tuple[Any, Any, str]:
    """(codes, scales, kind) of FP8 experts w [E, n, k] with their scales, as the bindings take
    them: codes through _fp8_codes, the kind read off the scales' shape (_expert_scale_kind)."""
    w = _fp8_codes(op, w, name)
    scale = _array(op, scale_name, scale)
    ws = tuple(int(d) for d in w.shape)
    if len(ws) != 3:
        raise Error(f"llmm.{op}: {name} must be [n_experts, n, k], got shape {list(ws)}")
    return w, scale, _expert_scale_kind(op, scale_name, tuple(int(d) for d in scale.shape), *ws)


def _fp8_needs_scale(op: str, name: str, w: Any, scale_name: str) -> None:
    """Refuses float8 experts given without their scales, saying what they need."""
    f8 = _float8_name(w)
    if f8 is not None:
        raise Error(f"llmm.{op}: {name} are {f8}: FP8 experts need their float32 scales ({scale_name}: per tensor "
                    f"[E], per channel [E, n, 1] or per 128 x 128 block [E, ceil(n / 128), ceil(k / 128)])")


def matmul_fp8(x, weight, scale, *, x_scale=None, out_dtype=None, precision: str = "fast", route: str = "auto",
               out=None):
    """y[m, n] = x[m, k] @ dequant(weight)[n, k]^T, dequant(w)[j, l] = e4m3(weight[j, l]) * scale
    of (j, l)'s group: an FP8 checkpoint's linear layer (DeepSeek-V3, Qwen3-FP8) in one call.

    x: float32, float16 or bfloat16 [m, k] (innermost stride 1; rows may be padded). weight: the
    [n, k] codes, a torch.float8_e4m3fn tensor, an ml_dtypes float8_e4m3fn NumPy array or uint8
    holding their bits (quantize_fp8's and load_fp8_safetensors' codes), innermost stride 1.
    scale: contiguous float32 whose shape names the kind: one value (per tensor), [n] or [n, 1]
    (per output channel), [ceil(n / 128), ceil(k / 128)] (per 128 x 128 block, DeepSeek's
    weight_scale_inv); a shape that fits none raises an llmm.Error that is also a ValueError.
    Returns out [m, n] in x's dtype (allocated like x: NumPy or torch on x's device; or out=).

    x given in e4m3 (quantized by the caller, e.g. fused into the previous op): x the [m, k] codes
    (float8_e4m3fn, or uint8 bits) and x_scale their float32 scales per token and 128 channels,
    [m, ceil(k / 128)] (quantize_fp8_activations' and vLLM's per_token_group_quant_fp8's groups;
    [m] or [m, 1] for one scale a token), x(i, l) = value(x[i, l]) * x_scale[i, l // 128]. out is
    then out_dtype (default bfloat16; float16, float32). The CPU backend computes it in float64;
    on CUDA route tiled_sm90 runs it (precision "fast"; scales copied to a token-major layout if need be).

    precision "fast" (default) lets a CUDA route quantize x per token to e4m3 (W8A8 on FP8 tensor
    cores, what FP8 serving runs); "exact" keeps x as given. route "auto", "stream" (m <= 16: the
    weights streamed once, x unquantized, CUDA-core FMAs), "stream_mma" (the same on tensor cores,
    f16/bf16 x), "cublaslt" (W8A8, fast only), "tiled_sm90" (W8A8 on llmm's Hopper engine: x in
    1 x 128 groups for every kind, e4m3 wgmmas promoted into f32 every 128 k; fast only, by name
    until it is measured), "dequant_lt" (the weight
    decoded into llmm's workspace, then a 16/32-bit GEMM) or "cpu" (NumPy arrays: the float64
    reference, rounded once into out). The CUDA routes need an H100/H200 (sm_90) except dequant_lt.
    The first call of a size allocates llmm's workspace: warm up before CUDA-graph capture.
    Scale values are read as they are on CUDA (NaN or 0 there gives NaN or 0 outputs); the CPU
    backend refuses non-finite or non-positive scales."""
    op = "matmul_fp8"
    x = _array(op, "x", x)
    f8 = _float8_name(x)
    if x_scale is None and f8 is not None:
        raise Error(f"llmm.{op}: x is {f8}: pass x_scale, its float32 scales per token and 128 channels "
                    f"[m, ceil(k / 128)] (or [m] / [m, 1], one a token)")
    if x_scale is None and out_dtype is not None:
        raise Error(f"llmm.{op}: out_dtype applies to e4m3 x (with x_scale); float x gives out in x's dtype")
    if x_scale is not None:
        x = _fp8_codes(op, x, "x")
    weight = _fp8_codes(op, weight)
    scale = _array(op, "scale", scale)
    xs, ws = tuple(x.shape), tuple(weight.shape)
    if len(xs) != 2:
        raise Error(f"llmm.{op}: x must be [m, k], got shape {list(xs)}")
    if len(ws) != 2:
        raise Error(f"llmm.{op}: weight must be [n, k], got shape {list(ws)}")
    n, k = int(ws[0]), int(ws[1])
    kind = _scale_kind_of(op, tuple(int(d) for d in scale.shape), n, k)
    if x_scale is not None:
        x_scale = _x_scales(op, x_scale, int(xs[0]), int(xs[1]))
        if out is None:
            out = _empty(op, x, (xs[0], n), "bfloat16" if out_dtype is None else out_dtype)
        elif out_dtype is not None:
            raise Error(f"llmm.{op}: pass out= or out_dtype=, not both")
    out = _empty(op, x, (xs[0], n)) if out is None else _out(op, out)
    _launch(_llmm.matmul_fp8, out, x, weight, scale, kind, out, precision=precision, route=route, x_scale=x_scale)
    return out


def plan_matmul_fp8(m: int, n: int, k: int, dtype="bfloat16", scale_kind: str = "block", *, precision: str = "fast",
                    route: str = "auto", device: Optional[Any] = None, x_fp8: bool = False) -> dict:
    """The route matmul_fp8 would take for x [m, k] of `dtype` (float32, float16, bfloat16: a name,
    an llmm code or a NumPy/torch dtype) and an [n, k] FP8 weight with `scale_kind` scales
    ("tensor", "channel", "block") on `device` ("cpu", "cuda", "cuda:N", a torch.device or an array
    there; None: "cuda" where llmm.cuda_available(), else "cpu"), for dense arrays on aligned bases:
    {"route", "reason", "workspace_bytes" (of llmm's per-stream workspace), "gemv_vecs",
    "gemv_k_lanes", "gemv_grid_x" (the stream route's launch), "mma_k_warps" (stream_mma's); 0 for the others}. route: "auto" or a
    route to check: one that cannot take the problem raises llmm.Error saying why. x_fp8: x given
    in e4m3 with x_scale (dtype is then the output's). Pure."""
    op = "plan_matmul_fp8"
    if device is None:
        device = "cuda" if cuda_available() else "cpu"
    return _llmm.plan_matmul_fp8(m, n, k, _dtype_code(op, "dtype", dtype), scale_kind, _where(device),
                                 precision=precision, route=route, x_fp8=x_fp8)
