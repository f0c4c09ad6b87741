"""FP8 e4m3 (float8_e4m3fn) on the host: conversions bit-exact with ml_dtypes' float8_e4m3fn, weights
quantized with f32 scales per tensor, per output channel or per 128 x 128 block (DeepSeek-V3's
`weight_scale_inv` layout), and DeepSeek-style safetensors loading. No op takes FP8 weights yet
(the kernels are not written): these produce and check the operands they will take."""
from __future__ import annotations

import json
import struct
from typing import Any, Tuple

import numpy as np

from . import _llmm
from ._llmm import Error

__all__ = ["to_fp8_bits", "from_fp8_bits", "quantize_fp8", "dequantize_fp8", "load_fp8_safetensors"]

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
