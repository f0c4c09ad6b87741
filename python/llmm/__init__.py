"""llmm: matmul kernels for LLM and diffusion-transformer inference.

Tensors are any DLPack-capable arrays: NumPy arrays run on the CPU reference backend; torch,
CuPy or JAX arrays on a CUDA device run the CUDA kernels on the caller's current stream (torch's
current stream for torch tensors). Outputs are passed in (``out=``) or allocated like the input
when it is a NumPy array or a torch tensor. Errors raise ``llmm.Error`` (a RuntimeError) with the
library's message, before anything is enqueued.

``import llmm.torch_ops`` (or the attribute ``llmm.torch_ops``) registers the ``torch.library``
custom ops ``torch.ops.llmm.matmul``, ``matmul_id`` and ``gemm_tq2`` for ``torch.compile``;
``import llmm`` does it by itself when torch is already imported. NumPy alone is enough for the
rest of the package.
"""
from __future__ import annotations

import contextlib
import importlib
import itertools
import sys
import threading
from typing import Any, Optional, Tuple

import numpy as np

from . import _llmm
from ._llmm import Error, MatmulIdScratch, TernaryWeight
from .hadamard import HadamardRotation

__version__: str = _llmm.__version__  # from project(llmm VERSION ...) in CMakeLists.txt, like the wheel's

__all__ = [
    "Error", "TernaryWeight", "MatmulIdScratch", "built_with_cuda", "cuda_available", "matmul", "plan_matmul",
    "quantize_tq2", "dequantize_tq2", "upload_tq2", "release_tq2", "gemm_tq2", "plan_tq2", "matmul_id", "plan_matmul_id",
    "upload_tq2_experts", "matmul_id_tq2", "moe_ffn",
    "tq2_from_gguf", "tq2_from_bitnet", "load_tq2_gguf", "load_bitnet_safetensors", "HadamardRotation",
    "matmul_id_capability", "matmul_id_scratch", "suggest_matmul_id_route",
    "to_fp8_bits", "from_fp8_bits", "quantize_fp8", "dequantize_fp8", "quantize_fp8_activations",
    "load_fp8_safetensors", "matmul_fp8", "plan_matmul_fp8",
]

# llmm's dtype codes and the frameworks' names for them (NumPy and CuPy have no bfloat16).
_DTYPE_NAMES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "u8": "uint8", "u32": "uint32",
                "i32": "int32", "i64": "int64"}
_DTYPE_CODES = {name: code for code, name in _DTYPE_NAMES.items()}
_U32_MAX = 0xFFFFFFFF
# Automatic ternary-weight keys start high so that they do not meet small keys a caller picks
# (layer numbers, say), and stay below 2^63 so that they fit a torch op's int argument.
_keys = itertools.count(1 << 48)
# Uploaded ternary weights by (device, key): what torch.ops.llmm.gemm_tq2 finds from its int key.
_tq2_weights: dict = {}
_tq2_lock = threading.Lock()


def built_with_cuda() -> bool:
    """True if this build of llmm has the CUDA backend."""
    return _llmm.built_with_cuda()


def cuda_available() -> bool:
    """True if the CUDA backend is built and a usable CUDA device is present (never raises)."""
    return _llmm.cuda_available()


_fast_ext: Any = None  # llmm._llmm_torch once loaded; False where it is not built or torch is not imported


def _fast() -> Any:
    """llmm._llmm_torch (the C++ host path for torch tensors, built against the installed torch),
    or False. Called only with torch tensors in hand, so torch is imported by then."""
    global _fast_ext
    if _fast_ext is None:
        _fast_ext = False
        if "torch" in sys.modules:
            try:
                from . import _llmm_torch

                _fast_ext = _llmm_torch
            except ImportError:
                pass
    return _fast_ext


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


def _is_cupy(x: Any) -> bool:
    return type(x).__module__.startswith("cupy")


def _type_name(x: Any) -> str:
    t = type(x)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _arr(x: Any) -> Any:
    """x as the bindings take it: torch tensors lose requires_grad (DLPack refuses to export those);
    llmm computes no gradients."""
    if _is_torch(x) and x.requires_grad:
        return x.detach()
    return x


def _array(op: str, name: str, x: Any) -> Any:
    """An array argument (anything with __dlpack__ and a shape), or TypeError naming op and argument."""
    if not (hasattr(x, "__dlpack__") and hasattr(x, "shape")):
        raise TypeError(f"llmm.{op}: {name} must be an array (NumPy, torch, CuPy, JAX: anything with __dlpack__), "
                        f"got {_type_name(x)}")
    return _arr(x)


def _out(op: str, out: Any) -> Any:
    """A caller's out= array; written in place, so never detached or copied."""
    if not (hasattr(out, "__dlpack__") and hasattr(out, "shape")):
        raise TypeError(f"llmm.{op}: out must be a writable array (NumPy, torch, CuPy), got {_type_name(out)}")
    if _is_torch(out) and out.requires_grad:
        raise Error(f"llmm.{op}: out requires grad: llmm computes no gradients, pass a tensor that does not")
    return out


def _bool(op: str, name: str, v: Any) -> bool:
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    raise TypeError(f"llmm.{op}: {name} must be a bool, got {_type_name(v)}")


def _where(x: Any) -> Any:
    """A device argument as the bindings take it: 'cpu', 'cuda', 'cuda:N' (a str; a torch.device
    becomes its str) or an array on that device."""
    if _is_torch(x) and type(x).__name__ == "device":
        return str(x)
    return x if isinstance(x, str) else _arr(x)


_KDL_CUDA = 2  # DLPack device type of CUDA memory


def _bf16_capsule(a: np.ndarray) -> Any:
    """A DLPack capsule of an ml_dtypes.bfloat16 NumPy array: NumPy exports its bits as uint16 and
    the capsule's dtype code is set to bfloat (DLPack's kDLBfloat, 4) before anyone reads it. The
    capsule keeps the array alive; no byte is copied."""
    import ctypes

    u16 = a.view(np.uint16)
    try:
        cap = u16.__dlpack__(max_version=(1, 0))  # versioned: carries the read-only flag
    except TypeError:  # NumPy < 2.1: the legacy capsule (which cannot export read-only arrays)
        cap = u16.__dlpack__()
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    get_ptr = ctypes.pythonapi.PyCapsule_GetPointer
    get_ptr.restype, get_ptr.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    name = get_name(cap)
    # DLTensor.dtype.code sits 20 bytes into DLTensor (data 8, device 8, ndim 4), which starts the
    # legacy DLManagedTensor and follows version, manager_ctx, deleter and flags (32 bytes) in the
    # versioned one.
    offset = {b"dltensor": 20, b"dltensor_versioned": 32 + 20}[name]
    code = ctypes.c_uint8.from_address(get_ptr(cap, name) + offset)
    if code.value != 1 or ctypes.c_uint8.from_address(get_ptr(cap, name) + offset + 1).value != 16:
        raise Error(f"llmm: unexpected DLPack layout exporting a bfloat16 array ({name!r})")
    code.value = 4
    return cap


def _export(a: Any, stream: int, torch_stream: bool, torch: Any) -> Any:
    """An argument as the bindings take it. Arrays of a framework other than the one whose stream
    the call runs on are exported through the DLPack protocol for that stream, so that their
    producer orders its pending work before it (stream 0, the legacy default stream, is 1 there)."""
    if torch is not None and isinstance(a, torch.Tensor):
        if torch_stream or not a.is_cuda:
            # One C call (~0.3 us), where nanobind's generic path calls Tensor.__dlpack__, Python
            # code (~3 us a tensor). The call runs on torch's current stream: nothing to order.
            return torch.utils.dlpack.to_dlpack(a)
    elif isinstance(a, np.ndarray):
        return _bf16_capsule(a) if a.dtype.name == "bfloat16" else a  # ml_dtypes' bfloat16
    elif not hasattr(a, "__dlpack_device__"):
        return a
    try:
        if a.__dlpack_device__()[0] != _KDL_CUDA:
            return a
        return a.__dlpack__(stream=stream if stream else 1)
    except Exception:  # a producer without stream support: the bindings' own import says what fails
        return a


def _launch(fn, out: Any, *args, **kw):
    """Calls a binding on out's device and the caller's current stream there: torch's for a torch
    CUDA out, CuPy's for a CuPy out, else the legacy default stream (0) or the CPU backend. Inputs
    of other frameworks are exported for that stream (_export)."""
    torch = sys.modules.get("torch")
    device = contextlib.nullcontext()
    torch_stream = torch is not None and isinstance(out, torch.Tensor) and out.is_cuda
    if torch_stream:
        dev = out.device
        stream = torch.cuda.current_stream(dev).cuda_stream
        if dev.index != torch.cuda.current_device():  # the bindings launch on the current device
            device = torch.cuda.device(dev)
    elif _is_cupy(out):
        import cupy

        device = cupy.cuda.Device(out.device.id)
        with device:
            stream = cupy.cuda.get_current_stream().ptr
    else:
        stream = 0
    args = tuple(_export(a, stream, torch_stream, torch) for a in args)
    kw = {k: _export(v, stream, torch_stream, torch) if hasattr(v, "__dlpack__") else v for k, v in kw.items()}
    with device:
        return fn(*args, stream=stream, **kw)


def _numpy_dtype(like: Any, dtype) -> np.dtype:
    """The NumPy dtype of an output like `like` (a NumPy or CuPy array): like's for None, else
    dtype as a code ("f16"), a name ("float16") or a NumPy dtype."""
    if dtype is None:
        return like.dtype
    code = _DTYPE_CODES.get(str(dtype), str(dtype))
    if code == "bf16":
        if isinstance(like, np.ndarray):
            try:
                import ml_dtypes  # NumPy's bfloat16 (JAX's, TensorFlow's)

                return np.dtype(ml_dtypes.bfloat16)
            except ImportError:
                pass
        raise Error(f"llmm: dtype {dtype!r} has no NumPy/CuPy equivalent (NumPy and CuPy have no bfloat16; "
                    f"pip install ml_dtypes for NumPy's): pass out=")
    try:
        return np.dtype(_DTYPE_NAMES.get(code, dtype))
    except (TypeError, ValueError):
        raise Error(f"llmm: unknown dtype {dtype!r}") from None


def _dtype_code(op: str, name: str, dtype) -> str:
    """llmm's code ("f32", "i64", ...) for a code, a name ("float32"), a NumPy or torch dtype; other
    strings pass through (the bindings refuse them, listing the codes)."""
    if isinstance(dtype, str):
        s = dtype.replace("torch.", "")
        return _DTYPE_CODES.get(s, s)
    s = str(dtype).replace("torch.", "")
    if s in _DTYPE_CODES:
        return _DTYPE_CODES[s]
    try:
        s = np.dtype(dtype).name if dtype is not None else "None"
    except (TypeError, ValueError):
        pass
    if s in _DTYPE_CODES:
        return _DTYPE_CODES[s]
    raise Error(f"llmm.{op}: unknown {name} {dtype!r} (f32, f16, bf16, u32, i32, i64 or their NumPy/torch dtypes)")


def _empty(op: str, like: Any, shape, dtype=None):
    """A new output like `like` (NumPy array, torch tensor or CuPy array) with `dtype` (None: like's;
    a name such as "float32"/"bf16", a NumPy dtype or a torch.dtype)."""
    try:
        if isinstance(like, np.ndarray):
            return np.empty(shape, dtype=_numpy_dtype(like, dtype))
        if _is_torch(like):
            import torch

            if dtype is None:
                dt = like.dtype
            elif isinstance(dtype, torch.dtype):
                dt = dtype
            else:
                name = _DTYPE_NAMES.get(str(dtype), str(dtype))
                dt = getattr(torch, name, None)
                if not isinstance(dt, torch.dtype):
                    raise Error(f"llmm: unknown dtype {dtype!r}")
            return torch.empty(shape, dtype=dt, device=like.device)
        if _is_cupy(like):
            import cupy

            dt = _numpy_dtype(like, dtype)
            with cupy.cuda.Device(like.device.id):
                return cupy.empty(shape, dtype=dt)
    except Error:
        raise
    except (MemoryError, ValueError, RuntimeError) as e:  # torch's and CuPy's out-of-memory are RuntimeErrors
        raise Error(f"llmm.{op}: cannot allocate out of shape {tuple(shape)}: {type(e).__name__}: {e}") from None
    raise Error(f"llmm.{op}: pass out= for {type(like).__module__}.{type(like).__name__} inputs: outputs are allocated "
                f"only like NumPy arrays, torch tensors and CuPy arrays (a JAX array is immutable: pass a torch or CuPy "
                f"out)")


def _device_name(x: Any) -> str:
    """'cpu' or 'cuda:N' for a NumPy array, a torch tensor, a CuPy array or a device string."""
    if isinstance(x, str):
        if x == "cuda":
            return "cuda:0"
        return x
    if _is_torch(x) and x.is_cuda:
        return f"cuda:{x.device.index}"
    if _is_cupy(x):
        return f"cuda:{x.device.id}"
    return "cpu"


def _inner_strides(x: Any) -> Optional[Tuple[int, int]]:
    """Element strides of the last two dimensions of a NumPy/CuPy array or torch tensor, else None
    (also for byte strides that are not whole elements: the bindings refuse those, naming them)."""
    if isinstance(x, np.ndarray) or _is_cupy(x):  # byte strides
        if x.ndim < 2 or x.strides[-2] % x.itemsize or x.strides[-1] % x.itemsize:
            return None
        return x.strides[-2] // x.itemsize, x.strides[-1] // x.itemsize
    if _is_torch(x) and x.dim() >= 2:
        return x.stride(-2), x.stride(-1)
    return None


def _canonical(x: Any, transposed: bool):
    """A transposed view (innermost stride != 1, next stride 1: x = y.T for a row-major y) becomes
    y with the transpose flag flipped: the same matrix, no copy. Anything else is passed as it is
    (the library refuses an innermost stride other than 1, naming the strides)."""
    s = _inner_strides(x)
    if s is not None and s[1] != 1 and s[0] == 1 and x.shape[-1] > 1:
        return x.transpose(-1, -2) if _is_torch(x) else x.swapaxes(-1, -2), not transposed
    return x, transposed


def _matmul_out_shape(a_shape, b_shape, transpose_a: bool, transpose_b: bool) -> tuple:
    """The shape llmm.matmul allocates for out (also the torch op's fake implementation)."""
    for name, s in (("a", a_shape), ("b", b_shape)):
        if len(s) not in (2, 3):
            raise Error(f"llmm.matmul: {name} must be rank 2 or 3, got shape {tuple(s)}")
    m = a_shape[-1] if transpose_a else a_shape[-2]
    n = b_shape[-2] if transpose_b else b_shape[-1]
    if len(a_shape) == 3 and len(b_shape) == 3:
        batch = a_shape[0] if a_shape[0] != 1 else b_shape[0]
    elif len(a_shape) == 3:
        batch = a_shape[0]
    elif len(b_shape) == 3:
        batch = b_shape[0]
    else:
        return (m, n)
    return (batch, m, n)


def matmul(a, b, out=None, *, transpose_a: bool = False, transpose_b: bool = False, precision: str = "exact",
           route: str = "auto"):
    """out[..., m, n] = op(a)[..., m, k] @ op(b)[..., k, n] for float32, float16 or bfloat16.

    a is [m, k] or [batch, m, k] ([.., k, m] with transpose_a); b is [k, n] or [batch, k, n]
    ([.., n, k] with transpose_b); an operand of rank 2, batch 1 or batch stride 0 broadcasts over
    the batch. a, b and out share one dtype (f32 accumulation). A transposed view (``w.T``) is
    taken as the transpose of its row-major base (no copy); any other innermost stride other than
    1 is refused with llmm.Error, never copied. precision "exact" keeps f32 accuracy for f32,
    "fast" allows tf32; route "auto" or a route name (see plan_matmul) forces one kernel. Inputs
    may be read-only; m, n or batch 0 give an empty result, k = 0 gives zeros.

    out: an output array (returned), or None to allocate one like a (NumPy array or torch tensor).
    Torch CUDA tensors run on torch's current stream without host synchronisation.
    """
    if out is None and type(transpose_a) is bool and type(transpose_b) is bool and _is_torch(a) and _is_torch(b):
        f = _fast_ext or _fast()
        if f:  # torch tensors in C++ (llmm._llmm_torch): the same checks and refusals, no DLPack
            return f.matmul(a, b, transpose_a, transpose_b, precision, route)
    a, b = _array("matmul", "a", a), _array("matmul", "b", b)
    transpose_a, transpose_b = _bool("matmul", "transpose_a", transpose_a), _bool("matmul", "transpose_b", transpose_b)
    if out is None:
        out = _empty("matmul", a, _matmul_out_shape(tuple(a.shape), tuple(b.shape), transpose_a, transpose_b))
    else:
        out = _out("matmul", out)
    a, transpose_a = _canonical(a, transpose_a)
    b, transpose_b = _canonical(b, transpose_b)
    _launch(_llmm.matmul, out, a, b, out, transpose_a=transpose_a, transpose_b=transpose_b, precision=precision,
            route=route)
    return out


def plan_matmul(m: int, n: int, k: int, like, *, transpose_a: bool = False, transpose_b: bool = False,
                precision: str = "exact") -> dict:
    """The route llmm.matmul would take for an [m, k] x [k, n] product with like's dtype on like's
    device (like: an array, or "cpu"/"cuda:N" for float32): {"route": name, "reason": text}. Pure:
    launches nothing. The flags default as matmul's do (before 0.2, transpose_b defaulted to True:
    pass transpose_b=True for x . w^T, the layout of LLM weights)."""
    return _llmm.plan_matmul(m, n, k, _where(like), transpose_a=transpose_a, transpose_b=transpose_b,
                             precision=precision)


def plan_tq2(m: int, n: int, k: int, like, *, out_dtype=None, precision: str = "exact", route: str = "auto") -> dict:
    """The route gemm_tq2 takes for x [m, k] with like's dtype on like's device (like: an array, or
    "cpu"/"cuda:N" for float32), and the device workspace it needs in bytes (0 for most routes;
    llmm keeps a grow-only one per device unless you pass your own at the C++ level):
    {"route": name, "workspace_bytes": int, "reason": why this route}. out_dtype: None or float32
    (default) or like's dtype.
    route: "auto" or a route to check. Pure: launches nothing."""
    code = "f32" if out_dtype is None else _dtype_code("plan_tq2", "out_dtype", out_dtype)
    return _llmm.plan_tq2(m, n, k, _where(like), out_dtype=code, precision=precision, route=route)


def suggest_matmul_id_route(m: int, n: int, k: int, top_k: int, n_experts: int, like, *,
                            may_repeat: bool = False) -> str:
    """"direct" or "grouped": the matmul_id route measured fastest for these sizes with like's dtype
    on like's device (like: an array, or "cpu"/"cuda:N" for float32). It cannot see the routing:
    when many tokens pick the same experts, "grouped" wins earlier. Pure."""
    return _llmm.suggest_matmul_id_route(m, n, k, top_k, n_experts, _where(like), may_repeat=may_repeat)


def quantize_tq2(w, rule: str = "absmean") -> bytes:
    """TQ2_0_g128 blocks (AoS bytes, 34 per 128 weights) of a float32 [n, k] weight, k % 128 == 0.

    rule "absmean" (BitNet b1.58: scale = mean |w| of the block) or "absmax" (round-trips a weight
    that is already ternary x scale). Host-side: w is read as float32 (a copy of the input when it
    is another float or integer dtype, or not C-contiguous); a CPU torch tensor is accepted too.
    Refuses a non-finite weight and a block whose scale exceeds the f16 range.
    """
    if _is_torch(w):
        w = w.detach().cpu().float().numpy()
    if not isinstance(w, np.ndarray):
        if not (hasattr(w, "__array__") or hasattr(w, "__dlpack__") or isinstance(w, (list, tuple))):
            raise TypeError(f"llmm.quantize_tq2: w must be a float array [n, k] (NumPy, a CPU torch tensor, or "
                            f"anything np.asarray takes), got {_type_name(w)}")
        try:
            w = np.asarray(w)
        except Exception as e:  # ragged lists, device arrays NumPy cannot read, ...
            raise Error(f"llmm.quantize_tq2: w cannot be read as a host array: {type(e).__name__}: {e}") from None
    if w.dtype.kind not in "fiu":
        raise Error(f"llmm.quantize_tq2: w must hold real numbers (float or integer), got dtype {w.dtype}")
    return _llmm.tq2_quantize(np.ascontiguousarray(w, dtype=np.float32), rule)


def dequantize_tq2(aos, n: int, k: int) -> np.ndarray:
    """The float32 [n, k] weight that TQ2_0_g128 bytes encode (what gemm_tq2 computes with). aos is
    any C-contiguous bytes-like object (bytes, bytearray, memoryview, a uint8 array). Refuses a
    wrong byte count, an invalid code 3 or a non-finite scale, naming the row, block and byte."""
    return _llmm.tq2_dequantize(aos, n, k)


def tq2_from_gguf(data, kind: str, n: int, k: int) -> bytes:
    """TQ2_0_g128 AoS bytes of a GGUF tensor's raw bytes (n rows of k weights). kind:
    "TQ2_0" (GGML type 35: 66-byte blocks of 256) and "TQ1_0" (34: 54-byte base-3 blocks of 256),
    both with k % 256 == 0; "PQ2_0" (PrismML's type 142: 34-byte blocks {d, qs[32]} of 128) and
    "Q2_0_g128" (the same layout under type 42 in PrismML's first Ternary-Bonsai files);
    "PTQ1_0" (PrismML's type 143: 28-byte base-3 blocks of 128); "Q2_0" (upstream ggml's type 42:
    18-byte blocks {d, qs[16]} of 64). All but TQ2_0 / TQ1_0 need k % 128 == 0. Lossless: every
    weight keeps its code and its block's f16 scale. For "Q2_0" two group-64 blocks become one
    128-weight block, so their scales must have the same f16 bits (or one of the two blocks be all
    zeros); otherwise it is refused naming the row, the blocks and both scales (a group-64 variant
    of TQ2_0_g128 is not implemented). Refuses a wrong byte count, a code 3 (invalid in TQ2_0; +2
    in the Q2_0 family, which a ternary block cannot hold) or a non-finite scale, naming the row
    and block."""
    return _llmm.tq2_from_gguf(data, kind, n, k)


def tq2_from_bitnet(packed, weight_scale: float) -> bytes:
    """TQ2_0_g128 AoS bytes ([out, in] weights) of a Hugging Face BitNet packed weight: a uint8
    [out / 4, in] array (weight row r in packed row r % (out / 4) at bits 2 * (r // (out / 4)),
    code - 1 in {-1, 0, 1}) and the layer's per-tensor weight_scale, by which BitNet divides its
    output: each block's scale is 1 / weight_scale rounded to f16 (the only rounding)."""
    a = np.ascontiguousarray(np.asarray(packed))
    if a.dtype != np.uint8 or a.ndim != 2:
        raise Error(f"llmm.tq2_from_bitnet: packed must be a uint8 [out / 4, in] array, got {a.dtype} {a.shape}")
    return _llmm.tq2_from_bitnet(a, 4 * a.shape[0], a.shape[1], float(weight_scale))


# GGML type id -> (tq2_from_gguf kind, weights a block, bytes a block).
_GGUF_TERNARY = {35: ("TQ2_0", 256, 66), 34: ("TQ1_0", 256, 54), 142: ("PQ2_0", 128, 34), 143: ("PTQ1_0", 128, 28)}
# Type 42 is upstream ggml's Q2_0 (group 64) or, in PrismML's first files, Q2_0 with groups of 128.
_GGUF_TYPE42 = (("Q2_0", 64, 18, "upstream Q2_0 (group 64)"), ("Q2_0_g128", 128, 34, "PrismML's first Q2_0 (group 128)"))
_GGUF_TERNARY_TYPE_IDS = frozenset(_GGUF_TERNARY) | {42}  # every type id load_tq2_gguf reads


def _gguf_ternary_layout(t, n: int, k: int) -> Tuple[str, int]:
    """(tq2_from_gguf kind, byte count) of GGUF tensor t (an llmm._gguf.TensorInfo) of n rows of k.
    Type 42 has two layouts of different sizes: the one that fills the room t has before the next
    tensor (short of it by less than one alignment step) is taken; none or both fitting is refused."""
    from ._gguf import type_name

    op = "llmm.load_tq2_gguf"
    if t.type_id in _GGUF_TERNARY:
        kind, weights, block = _GGUF_TERNARY[t.type_id]
        return kind, n * (k // weights) * block
    if t.type_id != 42:
        raise Error(f"{op}: tensor {t.name!r} is {type_name(t.type_id)}, not TQ2_0, TQ1_0, Q2_0, PQ2_0 or PTQ1_0")
    sizes = [(kind, n * (k // w) * b, what) for kind, w, b, what in _GGUF_TYPE42 if k % w == 0]
    fits = [(kind, size) for kind, size, _ in sizes if size <= t.span < size + t.alignment]
    if len(fits) == 1:
        return fits[0]
    layouts = " and ".join(f"{size} bytes as {what}" for _, size, what in sizes)
    room = f"{t.span} bytes up to the next tensor or the file's end (alignment {t.alignment})"
    if fits:
        raise Error(f"{op}: tensor {t.name!r} ([{n}, {k}], GGML type 42) is ambiguous: {layouts} both fit its {room}; "
                    f"refused rather than guessed")
    raise Error(f"{op}: tensor {t.name!r} ([{n}, {k}], GGML type 42) fits neither {layouts}: it has {room}")


def load_tq2_gguf(path, tensor_name: str, *, device="cpu", key: Optional[int] = None, hadamard: str = "refuse",
                  v_head_order: Optional[str] = None):
    """A ternary tensor of a GGUF file as a TernaryWeight on `device` ([n, k] with k = the tensor's
    first GGUF dimension): GGML types 35 TQ2_0, 34 TQ1_0, PrismML's 142 PQ2_0 and 143 PTQ1_0, and
    42, which is upstream ggml's Q2_0 (group 64) or the Q2_0 with groups of 128 of PrismML's first
    Ternary-Bonsai files: told apart by the tensor's byte size (the room before the next tensor),
    refused where both sizes fit (possible below 64 x alignment weights: 2048 at GGUF's default
    alignment of 32). Converted as
    tq2_from_gguf does. The file is read by llmm's own minimal GGUF reader (llmm._gguf: header,
    metadata, tensor-info table), not gguf-py's GGUFReader, which cannot open a file holding a
    tensor of a type it does not know (gguf 0.17.1: 42, 142 and 143).

    Ternary-Bonsai-2 folds a blockwise signed Walsh-Hadamard rotation into the weights its
    prism.hadamard.* metadata lists (llmm.hadamard): their activations must be rotated before the
    matmul. hadamard="refuse" (default) refuses such a weight, since the bare weight gives wrong
    results without an error; hadamard="return" returns (weight, rotation), the rotation a
    llmm.hadamard.HadamardRotation or None for a weight the file does not list. v_head_order
    ("grouped" or "tiled") says in which order a gated-DeltaNet ssm_out weight's input comes
    (llmm.hadamard.rotation_for); such a weight is refused without it.
    llmm.torch_ops.TernaryLinear.from_gguf does that and applies the rotation."""
    from . import _gguf

    if hadamard not in ("refuse", "return"):
        raise Error(f"llmm.load_tq2_gguf: hadamard must be 'refuse' or 'return', got {hadamard!r}")
    infos, meta = _gguf.read_header(path)
    t = next((t for t in infos if t.name == tensor_name), None)
    if t is None:
        raise Error(f"llmm.load_tq2_gguf: no tensor {tensor_name!r} in {path}")
    return _load_gguf_tensor(path, t, meta, device, key, hadamard, v_head_order, "llmm.load_tq2_gguf")


def _load_gguf_tensor(path, t, meta, device, key, hadamard, v_head_order, op):
    """load_tq2_gguf for tensor info t of a header already read (meta: its kept metadata)."""
    from . import _gguf
    from .hadamard import folded, rotation_for

    tensor_name = t.name
    k = int(t.shape[0]) if t.shape else 0
    n = int(np.prod(t.shape[1:], dtype=np.int64)) if len(t.shape) > 1 else 1
    if hadamard == "refuse" and folded(meta, tensor_name, op):
        block = meta.get("prism.hadamard.block_size", "?")
        raise Error(f"{op}: tensor {tensor_name!r} is listed in prism.hadamard.weight_names: a Hadamard-folded weight "
                    f"(block size {block}) whose activations must be rotated before the matmul; loaded bare it gives "
                    f"wrong results without an error. Pass hadamard='return' for (weight, rotation), or use "
                    f"llmm.torch_ops.TernaryLinear.from_gguf, which applies it")
    rotation = rotation_for(meta, tensor_name, k, op, v_head_order) if hadamard == "return" else None
    kind, nbytes = _gguf_ternary_layout(t, n, k)
    # Past its room the data is not there: the converter then names the byte count it wanted.
    aos = tq2_from_gguf(_gguf.read_bytes(path, t.offset, min(nbytes, t.span)), kind, n, k)
    weight = upload_tq2(aos, n, k, device=device, key=key)
    return (weight, rotation) if hadamard == "return" else weight


def _safetensors_scalar(path, name: str) -> float:
    """One scalar of a safetensors file, read off its header (f32, f16 or bf16: NumPy has no bf16)."""
    import json
    import struct

    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        if name not in header:
            raise Error(f"llmm.load_bitnet_safetensors: no tensor {name!r} in {path}")
        info = header[name]
        begin, end = info["data_offsets"]
        f.seek(8 + size + begin)
        raw = f.read(end - begin)
    dt = info["dtype"]
    if dt == "F32" and len(raw) == 4:
        return struct.unpack("<f", raw)[0]
    if dt == "F16" and len(raw) == 2:
        return float(np.frombuffer(raw, dtype=np.float16)[0])
    if dt == "BF16" and len(raw) == 2:
        return struct.unpack("<f", b"\x00\x00" + raw)[0]
    raise Error(f"llmm.load_bitnet_safetensors: {name!r} must be one f32/f16/bf16 value, got {dt} {info['shape']}")


def load_bitnet_safetensors(path, tensor_name: str, *, device="cpu", key: Optional[int] = None) -> TernaryWeight:
    """A BitNet linear weight of a safetensors checkpoint (the packed uint8 `tensor_name` and its
    `<tensor_name>_scale`, as Hugging Face's BitNet writes them; pip install safetensors) as a
    TernaryWeight [out, in] on `device`."""
    try:
        from safetensors import safe_open
    except ImportError as e:
        raise ImportError("llmm.load_bitnet_safetensors needs the safetensors package (pip install safetensors)") from e
    with safe_open(str(path), framework="numpy") as f:
        packed = f.get_tensor(tensor_name)
    scale = _safetensors_scalar(path, tensor_name + "_scale")
    aos = tq2_from_bitnet(packed, scale)
    return upload_tq2(aos, 4 * packed.shape[0], packed.shape[1], device=device, key=key)


def upload_tq2(aos, n: int, k: int, *, device="cpu", key: Optional[int] = None) -> TernaryWeight:
    """A TernaryWeight on `device` ("cpu", "cuda", "cuda:N", or an array on that device), converted
    to the kernels' layout and uploaded once per (device, key); a key given again returns the
    weight already there. Without a key a fresh one is drawn. aos: any C-contiguous bytes-like
    object. The weight stays resident (and reachable by torch.ops.llmm.gemm_tq2 through weight.key)
    until release_tq2(weight)."""
    w = _llmm.tq2_upload(aos, n, k, next(_keys) if key is None else key, _where(device))
    with _tq2_lock:
        _tq2_weights[(w.device, int(w.key))] = w
    return w


def upload_tq2_experts(aos, n_experts: int, n: int, k: int, *, device="cpu", key: Optional[int] = None) -> TernaryWeight:
    """A stack of n_experts ternary experts of [n, k] each (matmul_id_tq2's weights) on `device`,
    from their AoS blocks one expert after another (n_experts * n rows of k/128 blocks of 34
    bytes). As upload_tq2: once per (device, key), resident until release_tq2(weight);
    weight.experts is n_experts, weight.n the rows of one expert."""
    w = _llmm.tq2_upload_experts(aos, n_experts, n, k, next(_keys) if key is None else key, _where(device))
    with _tq2_lock:
        _tq2_weights[(w.device, int(w.key))] = w
    return w


def release_tq2(weight: TernaryWeight) -> bool:
    """Forgets an uploaded ternary weight: torch.ops.llmm.gemm_tq2 no longer finds its key, and its
    memory is freed once no Python reference to it is left. Only that very upload is released: a
    stale handle (its key released and uploaded again since) releases nothing. True if it was
    resident."""
    if not isinstance(weight, TernaryWeight):
        raise TypeError(f"llmm.release_tq2: weight must be a llmm.TernaryWeight (from llmm.upload_tq2), got "
                        f"{_type_name(weight)}")
    slot = (weight.device, int(weight.key))
    with _tq2_lock:
        held = _tq2_weights.get(slot)
        known = held is not None and held.upload_id == weight.upload_id
        if known:
            del _tq2_weights[slot]
        evicted = _llmm.tq2_release(weight)
    return known or evicted


def _tq2_lookup(device: str, key: int) -> TernaryWeight:
    with _tq2_lock:
        w = _tq2_weights.get((device, int(key)))
    if w is None:
        raise Error(f"llmm.gemm_tq2: no ternary weight with key {key} on {device}: upload it there with "
                    f"llmm.upload_tq2(..., device=\"{device}\") (or it was released)")
    return w


def gemm_tq2(weight: TernaryWeight, x, out=None, *, precision: str = "exact", route: str = "auto",
             out_dtype=None, rotation_signs=None, rotation_block: int = 0):
    """out[m, n] = x[m, k] @ W[n, k]^T with a ternary weight on x's device.

    x is float32, float16 or bfloat16 (innermost stride 1; rows may be padded; read-only is fine);
    out is float32 (default, or out_dtype "float32") or x's dtype. precision "exact" keeps f32
    activations accurate on tensor cores; route "auto" or one kernel by name: "tq2_stream_v5" and "tq2_stream_v4" (m <= 8, sm_90),
    "tq2_stream_v2" (m <= 16), "tq2_tiled", "tq2_dequant_lt",
    "tq2_tiled_sm90" (the Hopper tiled engine, sm_90; float16/bfloat16 x, or float32 with precision
    "fast"; auto takes it for 16-bit prefill where its tiles fill the GPU), "tq2_tiled_sm90_splitk" (the
    same engine with K in parts, for weights with few 128-row tiles; auto takes it at 16 < m <= 128 where
    its parts fill the GPU), "cpu" (NumPy). out=None allocates like x; m = 0 gives an empty result.
    rotation_signs (float32 [k], where out lives) and rotation_block (a power of two dividing k):
    x is taken as H (s * x) blockwise, H the normalized Sylvester-Hadamard matrix (a
    llmm.HadamardRotation's signs and block), rotated in float64 and rounded to f32 once by the
    CPU reference; CUDA refuses a rotation for now (rotate x first with llmm.HadamardRotation).
    """
    if not isinstance(weight, TernaryWeight):
        raise TypeError(f"llmm.gemm_tq2: weight must be a llmm.TernaryWeight (from llmm.upload_tq2), got "
                        f"{_type_name(weight)}")
    if out is None and _is_torch(x) and (out_dtype is None or isinstance(out_dtype, sys.modules["torch"].dtype)):
        f = _fast_ext or _fast()
        if f and (rotation_signs is None or _is_torch(rotation_signs)):
            # torch tensors in C++ (llmm._llmm_torch): the same checks and refusals, no DLPack
            return f.gemm_tq2(x, weight, weight.n, precision, route, out_dtype, rotation_signs, rotation_block)
    x = _array("gemm_tq2", "x", x)
    shape = tuple(x.shape)
    if len(shape) != 2:
        raise Error(f"llmm.gemm_tq2: x must be [m, k], got shape {shape}")
    if out is None:
        out = _empty("gemm_tq2", x, (shape[0], weight.n), out_dtype if out_dtype is not None else "float32")
    else:
        out = _out("gemm_tq2", out)
    _launch(_llmm.gemm_tq2, out, weight, x, out, precision=precision, route=route,
            rotation_signs=None if rotation_signs is None else _array("gemm_tq2", "rotation_signs", rotation_signs),
            rotation_block=rotation_block)
    return out


def matmul_id_capability(weight_dtype: str, m: int, n: int, k: int, top_k: int, n_experts: int,
                         expert_stride_bytes: int, *, layout: str = "shared", may_repeat: bool = False,
                         route: str = "direct", input_dtype="f32", output_dtype="f32", ids_dtype="u32",
                         input_token_stride: Optional[int] = None, input_slot_stride: Optional[int] = None) -> dict:
    """The exact byte extents a matmul_id call reads and writes (weights, input, ids, output, and
    the grouped route's scratch), or llmm.Error naming what is invalid. Pure. Dtypes are llmm codes
    ("f32", "f16", "bf16"; ids "u32", "i32", "i64"), names ("float32", "int64") or NumPy/torch
    dtypes; input strides are in elements (None: dense rows)."""
    op = "matmul_id_capability"
    return _llmm.matmul_id_capability(
        _dtype_code(op, "weight_dtype", weight_dtype), m, n, k, top_k, n_experts, expert_stride_bytes, layout=layout,
        may_repeat=may_repeat, route=route, input_dtype=_dtype_code(op, "input_dtype", input_dtype),
        output_dtype=_dtype_code(op, "output_dtype", output_dtype), ids_dtype=_dtype_code(op, "ids_dtype", ids_dtype),
        input_token_stride=input_token_stride, input_slot_stride=input_slot_stride)


def matmul_id_scratch(max_experts: int, max_tokens: int, device="cpu", *, max_top_k: int = 0,
                      max_k: int = 0, dtype=None) -> MatmulIdScratch:
    """Scratch for matmul_id's grouped route on `device` ("cpu", "cuda:N" or an array there): expert
    counts for up to max_experts experts and routed-row lists for max_tokens x max_top_k rows
    (max_top_k 0: max_experts, enough for distinct ids; repeated ids with top_k > n_experts need
    more). Calls that share one scratch must be ordered (one stream).

    max_k > 0 with an input dtype (e.g. "bfloat16") also reserves room to stage every routed input
    row of up to max_k elements in expert order: on an H200 the grouped route then loads each tile
    with one TMA copy, ~2x faster at large m than gathering rows inside the GEMM (it costs
    max_tokens x max_top_k x max_k elements of memory)."""
    row_bytes = 0
    if max_k:
        if dtype is None:
            raise TypeError("llmm.matmul_id_scratch: max_k needs the input dtype (dtype=...)")
        sizes = {"f32": 4, "f16": 2, "bf16": 2}
        code = _dtype_code("matmul_id_scratch", "dtype", dtype)
        if code not in sizes:
            raise Error(f"llmm.matmul_id_scratch: dtype must be f32, f16 or bf16, got {dtype!r}")
        row_bytes = int(max_k) * sizes[code]
    return _llmm.matmul_id_scratch(max_experts, max_tokens, _where(device), max_top_k=max_top_k,
                                   staged_row_bytes=row_bytes)


def matmul_id(weights, x, ids, out=None, *, layout: str = "shared", route: str = "auto", scratch=None,
              may_repeat: bool = False, precision: str = "exact", out_dtype=None, grouped_kernel: str = "auto",
              weight_scale=None):
    """out[t, s, :] = weights[ids[t, s]] @ x(t, s) for weights [E, n, k] and ids [m, top_k].

    Every size is read off the arrays' shapes and checked. ids are uint32, int32 or int64 (what
    torch.topk returns), read directly by the kernels; ids outside [0, E) (negative ones too) give
    zero rows. x is [m, k] (layout "shared": every slot of token t reads x[t]), [m * top_k, k]
    ("slotted": slot s of token t reads x[t * top_k + s]) or [m, top_k, k] (slotted). Weights may
    have a padded expert stride (a slice of a larger stack) and x padded rows, as long as the
    innermost stride is 1; inputs may be read-only. route "auto" (the default:
    suggest_matmul_id_route's choice for the call on its device), "direct" or "grouped" (both
    correct for any ids; may_repeat is a hint). The grouped route needs no scratch from you: a call
    without one uses llmm's own for the device and stream (grow-only; where the Hopper engine stages
    the routed rows, m x top_k x k elements of x's dtype; made or grown by the first call of a
    size, so warm up before CUDA-graph capture). scratch=matmul_id_scratch(...) gives your own
    instead. out is [m, top_k, n],
    float32 (default) or x's dtype; out=None allocates like x. m, top_k or n = 0 give an empty
    result; k = 0 or E = 0 give zeros. grouped_kernel picks the grouped route's GEMM on a CUDA
    device by name: "auto" (the planner's), "mma_sync", "tiled_sm90" (the Hopper engine after the
    map) or "tiled_sm90_fused" (the engine sorting the rows itself, up to 2048 routed rows: auto's
    choice at m <= 16, 0.83-1.06x the mapped route's time there); a kernel that cannot take the
    call, and any but "auto" on the CPU, is refused.

    FP8 e4m3 experts (DeepSeek-V3 / Qwen3 FP8 checkpoints): weights [E, n, k] as torch.float8_e4m3fn,
    ml_dtypes float8_e4m3fn or uint8 holding their bits, with weight_scale: contiguous float32
    whose shape names the kind, per expert: [E], [E, 1] or [E, 1, 1] (per tensor), [E, n] or
    [E, n, 1] (per output channel), [E, ceil(n / 128), ceil(k / 128)] (per 128 x 128 block,
    weight_scale_inv: multiplied). W[e] = e4m3(code) * scale; x stays in its dtype. Where shapes
    coincide the tensor kind is taken (the same values); a shape that fits none raises an
    llmm.Error that is also a ValueError; float8 weights without weight_scale are refused. Routes
    "direct" (the codes decoded in the streaming kernel) and "grouped" (decoded and scaled into
    bf16 tiles, x rounded to bf16: on sm_90 with bf16 x the Hopper engine over staged rows, else
    the mma.sync kernel). On the CPU: the float64 reference of the dequantized weights.
    """
    if weight_scale is None:
        _fp8_needs_scale("matmul_id", "weights", weights, "weight_scale")
        if (out is None and scratch is None and type(may_repeat) is bool and _is_torch(weights) and _is_torch(x)
                and _is_torch(ids) and (out_dtype is None or isinstance(out_dtype, sys.modules["torch"].dtype))):
            f = _fast_ext or _fast()
            if f:  # torch tensors in C++ (llmm._llmm_torch): the same checks and refusals, no DLPack
                return f.matmul_id(weights, x, ids, layout, route, may_repeat, precision, out_dtype, grouped_kernel)
        fp8 = {}
    else:  # FP8 experts: the DLPack path
        weights, weight_scale, kind = _fp8_experts("matmul_id", "weights", weights, "weight_scale", weight_scale)
        fp8 = dict(weight_scale=weight_scale, scale_kind=kind)
    weights, x, ids, out, route = _matmul_id_args("matmul_id", weights, x, ids, out, route, scratch, may_repeat, out_dtype)
    _launch(_llmm.matmul_id, out, weights, x, ids, out, layout=layout, may_repeat=may_repeat, route=route,
            scratch=scratch, precision=precision, grouped_kernel=grouped_kernel, **fp8)
    return out


def _matmul_id_args(op: str, weights, x, ids, out, route: str, scratch, may_repeat: bool, out_dtype):
    """matmul_id's and plan_matmul_id's arrays, checked ranks, out (allocated like x when None)
    and the route (the library resolves "auto")."""
    weights, x, ids = _array(op, "weights", weights), _array(op, "x", x), _array(op, "ids", ids)
    ws, xs, ids_shape = tuple(weights.shape), tuple(x.shape), tuple(ids.shape)
    if len(ws) != 3:
        raise Error(f"llmm.{op}: weights must be [n_experts, n, k], got shape {ws}")
    if len(ids_shape) != 2:
        raise Error(f"llmm.{op}: ids must be [m, top_k], got shape {ids_shape}")
    if len(xs) not in (2, 3):
        raise Error(f"llmm.{op}: x must be [m, k], [m * top_k, k] or [m, top_k, k], got shape {xs}")
    if out is None:
        for name, v in (("m (tokens)", ids_shape[0]), ("top_k", ids_shape[1]), ("n", ws[1])):
            if v > _U32_MAX:  # refused before a huge output is allocated
                raise Error(f"llmm.{op}: {name} {v} is outside 0..{_U32_MAX}")
        out = _empty(op, x, (ids_shape[0], ids_shape[1], ws[1]), out_dtype if out_dtype is not None else "float32")
    else:
        out = _out(op, out)
    return weights, x, ids, out, route


def plan_matmul_id(weights, x, ids, out=None, *, layout: str = "shared", route: str = "auto", scratch=None,
                   may_repeat: bool = False, precision: str = "exact", out_dtype=None, grouped_kernel: str = "auto") -> dict:
    """What matmul_id with the same arguments would launch, without running it: a dict with
    "route" ("direct" or "grouped"; "direct" when k or E is 0), "kernels" (in launch order, the
    names its receipt joins with "+"; empty when the output has no element), "engine" (the grouped
    route on the Hopper tiled engine), "staged" (its routed rows copied into expert order first:
    llmm's own scratch, or one made with max_k), "fused" (the engine sorting the routed rows itself: one
    kernel, at m <= 16, the scratch unused), "pooled" (grouped without a scratch: llmm's own serves
    it) and "reason". The call's checks run here and raise the
    same errors. out=None plans for the output matmul_id would allocate (one is allocated here too).
    """
    weights, x, ids, out, route = _matmul_id_args("plan_matmul_id", weights, x, ids, out, route, scratch, may_repeat,
                                                  out_dtype)
    return _launch(_llmm.plan_matmul_id, out, weights, x, ids, out, layout=layout, may_repeat=may_repeat, route=route,
                   scratch=scratch, precision=precision, grouped_kernel=grouped_kernel)


def moe_ffn(x, w_gate_up, w_down, topk_ids, topk_weights, *, activation: str = "silu", out=None, route: str = "auto",
            precision: str = "exact", w_gate_up_scale=None, w_down_scale=None, alpha: float = 1.702,
            limit: float = 7.0, bias_gate_up=None, bias_down=None, fuse_decode: bool = False):
    """The expert FFN of a MoE block in one call: out[t] = sum_s topk_weights[t, s] *
    w_down[e] @ act(gate, up), (gate, up) = w_gate_up[e] @ x[t] split in halves, e = topk_ids[t, s].

    x [m, hidden] (float32, float16 or bfloat16); w_gate_up [E, 2 * inter, hidden] (gate rows then
    up rows: vLLM's w13, transformers' gate_up_proj) and w_down [E, hidden, inter], of x's dtype
    (or 16-bit with a float32 x); topk_ids [m, top_k] int32 / int64 / uint32 (an id outside
    [0, E) contributes nothing); topk_weights [m, top_k] float32 / float16 / bfloat16.
    activation, by vLLM's names: "silu" (SwiGLU: silu(gate) * up), "gelu" (erf), "gelu_tanh",
    "relu2" (relu(gate)^2 * up); each with "_no_mul" for experts without a gate (w_gate_up then
    [E, inter, hidden], act(h) alone); "swigluoai" (gpt-oss: gate' = min(gate, limit), up' =
    clamp(up, -limit, limit), (up' + 1) * gate' * sigmoid(alpha * gate'), on gate and up rows
    interleaved as gpt-oss stores them) and "swigluoai_uninterleave" (the same on halves).
    bias_gate_up [E, rows of w_gate_up] and bias_down [E, hidden] (float32 / float16 / bfloat16,
    contiguous): optional expert biases, added before the activation and before the routing
    weight. Returns out [m, hidden] in x's dtype (or writes out=). fuse_decode: where a GEMM takes
    the direct route (decode), the activation and the slot sum run in its epilogue (two kernels);
    False (for now the default: not yet measured on a GPU) keeps the four-kernel composition. The slot sum runs in slot order: the same bits on every run. route
    ("auto", "direct", "grouped") and precision as for matmul_id, for both GEMMs. No scratch: the
    intermediates live in llmm's workspace per device and stream (the first call of a size
    allocates it: warm up before CUDA-graph capture). On the CPU: the float64 reference.
    w_gate_up and w_down may instead both be ternary expert stacks (llmm.upload_tq2_experts of
    [E, 2 * inter, hidden] and [E, hidden, inter] TQ2_0_g128 weights): the GEMMs are then
    matmul_id_tq2's (route "auto" only).
    Or both FP8 e4m3 expert stacks (torch.float8_e4m3fn, ml_dtypes float8_e4m3fn or uint8 bits)
    with w_gate_up_scale and w_down_scale: float32 scales whose shapes name each stack's kind as
    matmul_id's weight_scale does ([E] / [E, 1] / [E, 1, 1] per tensor, [E, n] / [E, n, 1] per
    channel, [E, ceil(n / 128), ceil(k / 128)] per 128 x 128 block, with [n, k] = [2 * inter, hidden]
    and [hidden, inter]); x stays in its dtype; the GEMMs are matmul_id's FP8 routes."""
    op = "moe_ffn"
    x = _array(op, "x", x)
    fp8 = {}
    if w_gate_up_scale is not None or w_down_scale is not None:
        if w_gate_up_scale is None or w_down_scale is None:
            raise Error(f"llmm.moe_ffn: FP8 experts need both w_gate_up_scale and w_down_scale (got only "
                        f"{'w_down_scale' if w_gate_up_scale is None else 'w_gate_up_scale'})")
        if isinstance(w_gate_up, TernaryWeight) or isinstance(w_down, TernaryWeight):
            raise Error("llmm.moe_ffn: w_gate_up_scale and w_down_scale are the scales of FP8 expert arrays, not of "
                        "llmm.TernaryWeight stacks")
        w_gate_up, sgu, kgu = _fp8_experts(op, "w_gate_up", w_gate_up, "w_gate_up_scale", w_gate_up_scale)
        w_down, sd, kd = _fp8_experts(op, "w_down", w_down, "w_down_scale", w_down_scale)
        fp8 = dict(w_gate_up_scale=sgu, w_down_scale=sd, gate_up_scale_kind=kgu, down_scale_kind=kd)
    else:
        if not isinstance(w_gate_up, TernaryWeight):
            _fp8_needs_scale(op, "w_gate_up", w_gate_up, "w_gate_up_scale")
            w_gate_up = _array(op, "w_gate_up", w_gate_up)
        if not isinstance(w_down, TernaryWeight):
            _fp8_needs_scale(op, "w_down", w_down, "w_down_scale")
            w_down = _array(op, "w_down", w_down)
    topk_ids, topk_weights = _array(op, "topk_ids", topk_ids), _array(op, "topk_weights", topk_weights)
    biases = {}
    if bias_gate_up is not None:
        biases["bias_gate_up"] = _array(op, "bias_gate_up", bias_gate_up)
    if bias_down is not None:
        biases["bias_down"] = _array(op, "bias_down", bias_down)
    xs = tuple(x.shape)
    if len(xs) != 2:
        raise Error(f"llmm.moe_ffn: x must be [m, hidden], got shape {xs}")
    out = _empty(op, x, xs) if out is None else _out(op, out)
    _launch(_llmm.moe_ffn, out, x, w_gate_up, w_down, topk_ids, topk_weights, out, activation=activation, route=route,
            precision=precision, alpha=alpha, limit=limit, fuse_decode=fuse_decode, **fp8, **biases)
    return out


def matmul_id_tq2(experts: TernaryWeight, x, ids, out=None, *, layout: str = "shared", route: str = "auto",
                  scratch=None, out_dtype=None):
    """out[t, s, :] = W[ids[t, s]] @ x(t, s) for a ternary expert stack W (upload_tq2_experts) and
    ids [m, top_k]: matmul_id with ternary experts, by the same rules for x (layouts "shared" and
    "slotted", padded rows), ids (uint32/int32/int64, out-of-range ids give zero rows) and out
    ([m, top_k, n], float32 by default or x's dtype). route "auto" (on an H100/H200: for m <= 64 tokens the
    streaming decode route; else, with a float16 or bfloat16 x, the Hopper engine on llmm's own
    scratch (or the caller's, from matmul_id_scratch(..., max_k=k, dtype=x's dtype)); else the
    reference kernel),
    "tq2_moe_stream_sm90", "tq2_moe_grouped_sm90", "tq2_moe_naive" (CUDA) or "cpu" (NumPy)."""
    op = "matmul_id_tq2"
    if not isinstance(experts, TernaryWeight):
        raise TypeError(f"llmm.matmul_id_tq2: experts must be a llmm.TernaryWeight (from llmm.upload_tq2_experts), got "
                        f"{_type_name(experts)}")
    x, ids = _array(op, "x", x), _array(op, "ids", ids)
    ids_shape = tuple(ids.shape)
    if len(ids_shape) != 2:
        raise Error(f"llmm.matmul_id_tq2: ids must be [m, top_k], got shape {ids_shape}")
    if out is None:
        for name, v in (("m (tokens)", ids_shape[0]), ("top_k", ids_shape[1])):
            if v > _U32_MAX:
                raise Error(f"llmm.matmul_id_tq2: {name} {v} is outside 0..{_U32_MAX}")
        out = _empty(op, x, (ids_shape[0], ids_shape[1], experts.n), out_dtype if out_dtype is not None else "float32")
    else:
        out = _out(op, out)
    _launch(_llmm.matmul_id_tq2, out, experts, x, ids, out, layout=layout, route=route, scratch=scratch)
    return out


def __getattr__(name: str):
    if name == "torch_ops":  # imports torch on first use only
        return importlib.import_module(".torch_ops", __name__)
    raise AttributeError(f"module 'llmm' has no attribute {name!r}")


if "torch" in sys.modules:  # torch already loaded: register the custom ops now (cheap)
    try:
        from . import torch_ops  # noqa: E402,F401
    except ImportError:  # torch too old for torch.library.custom_op: `import llmm.torch_ops` says so
        pass


from .fp8 import (_fp8_experts, _fp8_needs_scale, dequantize_fp8, from_fp8_bits, load_fp8_safetensors,  # noqa: E402
                  matmul_fp8, plan_matmul_fp8, quantize_fp8, quantize_fp8_activations, to_fp8_bits)
