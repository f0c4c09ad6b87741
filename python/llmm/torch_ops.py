"""torch.library custom ops over llmm, for eager torch and torch.compile (no graph break).

Importing this module (it imports torch; torch >= 2.4) registers four functional ops, each with
a fake (meta) implementation that gives the output's exact shape, dtype and device:

    torch.ops.llmm.matmul(a, b, transpose_a=False, transpose_b=False, precision="exact",
                          route="auto") -> Tensor
    torch.ops.llmm.matmul_id(weights, x, ids, layout="shared", route="auto", may_repeat=False,
                             precision="exact", out_dtype=None) -> Tensor
    torch.ops.llmm.gemm_tq2(x, weight_key, n, precision="exact", route="auto",
                            out_dtype=None) -> Tensor
    torch.ops.llmm.moe_ffn(x, w_gate_up, w_down, topk_ids, topk_weights, activation="silu",
                           route="auto", precision="exact", w_gate_up_scale=None,
                           w_down_scale=None) -> Tensor

They return new tensors (mutates_args=()), run on CPU tensors (the float64-accumulating reference
backend) and CUDA tensors (the kernels, on torch's current stream, without host synchronisation),
and raise llmm.Error for what the library refuses. No autograd formula is registered: llmm is for
inference, and a backward through these ops raises.

Design choice for gemm_tq2: a TernaryWeight (device memory in llmm's layout, owned by llmm's
per-device cache) is not a tensor, and custom ops take tensors and plain values only. The op
therefore names the weight by its int key (weight.key, from llmm.upload_tq2) and its row count n
(so that the fake implementation knows the output shape without looking anything up); the real
implementation finds the weight by (x's device, key) and refuses an unknown key or a wrong n.
In a compiled graph the key is a constant, like a module's int attribute; the weight stays
resident until llmm.release_tq2(weight). TernaryLinear wraps this as an nn.Module.

Expert ids may be int32, int64 (what torch.topk returns: no conversion needed) or uint32; the
kernels read them as they are, and an id outside [0, E) gives a zero row.

The grouped matmul_id route needs scratch memory: the library keeps one grow-only scratch per
(device, stream), so calls on one stream reuse it in stream order and calls on different
streams never share one. A call that creates or grows it allocates, which CUDA-graph capture
forbids: warm up on the capture stream first (a call during capture that would allocate raises
llmm.Error saying so, before anything is enqueued).

Layouts: a transposed view (innermost stride != 1, the next one 1) is taken as the transpose of
its base (no copy); any other innermost stride other than 1 is refused with llmm.Error (no silent
copy). The ops are tagged needs_exact_strides, so torch.compile hands them the strides that eager
mode would.
"""
from typing import Optional

import torch

import llmm
from llmm import _llmm  # noqa: F401  (the extension must load before any op is registered)
from llmm.hadamard import pick_operands, rotate_torch

if not hasattr(torch, "library") or not hasattr(torch.library, "custom_op"):
    raise ImportError(f"llmm.torch_ops needs torch >= 2.4 (torch.library.custom_op); this is torch {torch.__version__}")

__all__ = ["matmul", "matmul_id", "gemm_tq2", "moe_ffn", "fused_experts", "matmul_fp8", "TernaryLinear", "Fp8Linear",
           "ternary_linears_from_gguf",
           "quantize_linears_fp8"]

Tensor = torch.Tensor

_tag = getattr(torch.Tag, "needs_exact_strides", None) or getattr(torch.Tag, "needs_fixed_stride_order", None)
_TAGS = (_tag,) if _tag is not None else ()


def _custom_op(name, schema=None):
    try:
        return torch.library.custom_op(name, mutates_args=(), schema=schema, tags=_TAGS)
    except TypeError:  # torch 2.4 has no tags= here
        return torch.library.custom_op(name, mutates_args=(), schema=schema)


# ---------------------------------------------------------------------------------------------
# llmm::matmul

@_custom_op("llmm::matmul")
def _matmul(a: Tensor, b: Tensor, transpose_a: bool = False, transpose_b: bool = False, precision: str = "exact",
            route: str = "auto") -> Tensor:
    return llmm.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b, precision=precision, route=route)


@_matmul.register_fake
def _matmul_fake(a, b, transpose_a=False, transpose_b=False, precision="exact", route="auto"):
    return a.new_empty(llmm._matmul_out_shape(a.shape, b.shape, transpose_a, transpose_b))


# ---------------------------------------------------------------------------------------------
# llmm::matmul_id

def _matmul_id_out_dtype(out_dtype: Optional[torch.dtype]) -> torch.dtype:
    return torch.float32 if out_dtype is None else out_dtype


_ID_DTYPES = tuple(d for d in (torch.int32, torch.int64, getattr(torch, "uint32", None)) if d is not None)


def _matmul_id_check(weights: Tensor, x: Tensor, ids: Tensor) -> None:
    """What the output shape depends on: checked alike by the real and the fake implementation."""
    if ids.dtype not in _ID_DTYPES:
        raise llmm.Error(f"llmm.matmul_id: ids must be int32, int64 or uint32, got {ids.dtype}")
    if ids.dim() != 2 or weights.dim() != 3 or x.dim() not in (2, 3):
        raise llmm.Error(f"llmm.matmul_id: weights must be [E, n, k], ids [m, top_k] and x [m, k], [m * top_k, k] or "
                         f"[m, top_k, k], got {tuple(weights.shape)}, {tuple(ids.shape)} and {tuple(x.shape)}")


@_custom_op("llmm::matmul_id")
def _matmul_id(weights: Tensor, x: Tensor, ids: Tensor, layout: str = "shared", route: str = "auto",
               may_repeat: bool = False, precision: str = "exact", out_dtype: Optional[torch.dtype] = None) -> Tensor:
    _matmul_id_check(weights, x, ids)
    return llmm.matmul_id(weights, x, ids, layout=layout, route=route, may_repeat=may_repeat, precision=precision,
                          out_dtype=_matmul_id_out_dtype(out_dtype))


@_matmul_id.register_fake
def _matmul_id_fake(weights, x, ids, layout="shared", route="auto", may_repeat=False, precision="exact",
                    out_dtype=None):
    _matmul_id_check(weights, x, ids)
    return x.new_empty((ids.shape[0], ids.shape[1], weights.shape[1]), dtype=_matmul_id_out_dtype(out_dtype))


# ---------------------------------------------------------------------------------------------
# llmm::gemm_tq2

# int, not SymInt: the key and n are constants of a graph, never symbolic sizes.
# rotation_signs / rotation_block: a Hadamard rotation applied to x inside the call (gemm_tq2's
# rotation_signs and rotation_block: the CPU reference; CUDA refuses it until its kernel lands).
@_custom_op("llmm::gemm_tq2", schema="(Tensor x, int weight_key, int n, str precision=\"exact\", str route=\"auto\", "
                                    "ScalarType? out_dtype=None, Tensor? rotation_signs=None, int rotation_block=0) "
                                    "-> Tensor")
def _gemm_tq2(x: Tensor, weight_key: int, n: int, precision: str = "exact", route: str = "auto",
              out_dtype: Optional[torch.dtype] = None, rotation_signs: Optional[Tensor] = None,
              rotation_block: int = 0) -> Tensor:
    w = llmm._tq2_lookup(llmm._device_name(x), weight_key)
    if w.n != n:
        raise llmm.Error(f"llmm.gemm_tq2: weight key {weight_key} is [{w.n}, {w.k}], the call says n = {n}")
    return llmm.gemm_tq2(w, x, precision=precision, route=route,
                         out_dtype=torch.float32 if out_dtype is None else out_dtype,
                         rotation_signs=rotation_signs, rotation_block=rotation_block)


@_gemm_tq2.register_fake
def _gemm_tq2_fake(x, weight_key, n, precision="exact", route="auto", out_dtype=None, rotation_signs=None,
                   rotation_block=0):
    if x.dim() != 2:
        raise llmm.Error(f"llmm.gemm_tq2: x must be [m, k], got shape {tuple(x.shape)}")
    return x.new_empty((x.shape[0], n), dtype=torch.float32 if out_dtype is None else out_dtype)


# ---------------------------------------------------------------------------------------------
# llmm::moe_ffn

_MOE_GATED = ("silu", "gelu", "gelu_tanh", "relu2")
_MOE_ACTIVATIONS = _MOE_GATED + tuple(a + "_no_mul" for a in _MOE_GATED) + ("swigluoai", "swigluoai_uninterleave")


# w_gate_up_scale / w_down_scale: FP8 e4m3 experts (float8_e4m3fn w_gate_up and w_down) with their
# float32 scales, the kind read off each scale's shape (llmm.moe_ffn's rules); None for 16/32-bit.
@_custom_op("llmm::moe_ffn")
def _moe_ffn(x: Tensor, w_gate_up: Tensor, w_down: Tensor, topk_ids: Tensor, topk_weights: Tensor,
             activation: str = "silu", route: str = "auto", precision: str = "exact",
             w_gate_up_scale: Optional[Tensor] = None, w_down_scale: Optional[Tensor] = None, alpha: float = 1.702,
             limit: float = 7.0, bias_gate_up: Optional[Tensor] = None, bias_down: Optional[Tensor] = None) -> Tensor:
    return llmm.moe_ffn(x, w_gate_up, w_down, topk_ids, topk_weights, activation=activation, route=route,
                        precision=precision, w_gate_up_scale=w_gate_up_scale, w_down_scale=w_down_scale, alpha=alpha,
                        limit=limit, bias_gate_up=bias_gate_up, bias_down=bias_down)


@_moe_ffn.register_fake
def _moe_ffn_fake(x, w_gate_up, w_down, topk_ids, topk_weights, activation="silu", route="auto", precision="exact",
                  w_gate_up_scale=None, w_down_scale=None, alpha=1.702, limit=7.0, bias_gate_up=None, bias_down=None):
    if x.dim() != 2:
        raise llmm.Error(f"llmm.moe_ffn: x must be [m, hidden], got shape {tuple(x.shape)}")
    return x.new_empty(x.shape)


# ---------------------------------------------------------------------------------------------
# llmm::matmul_fp8: x [m, k] @ dequant(weight)^T, weight float8_e4m3fn [n, k] (or uint8 bits), the
# scale kind read off scale's shape ([1] / [1, 1] tensor, [n] / [n, 1] channel, [ceil(n/128),
# ceil(k/128)] block: llmm.matmul_fp8's rules).

@_custom_op("llmm::matmul_fp8")
def _matmul_fp8(x: Tensor, weight: Tensor, scale: Tensor, precision: str = "fast", route: str = "auto",
                x_scale: Optional[Tensor] = None, out_dtype: Optional[torch.dtype] = None) -> Tensor:
    return llmm.matmul_fp8(x, weight, scale, precision=precision, route=route, x_scale=x_scale, out_dtype=out_dtype)


@_matmul_fp8.register_fake
def _matmul_fp8_fake(x, weight, scale, precision="fast", route="auto", x_scale=None, out_dtype=None):
    if x.dim() != 2 or weight.dim() != 2:
        raise llmm.Error(f"llmm.matmul_fp8: x must be [m, k] and weight [n, k], got shapes {list(x.shape)} and "
                         f"{list(weight.shape)}")
    if x_scale is None:
        if out_dtype is not None:
            raise llmm.Error("llmm.matmul_fp8: out_dtype applies to e4m3 x (with x_scale); float x gives out in x's dtype")
        return x.new_empty((x.shape[0], weight.shape[0]))
    return x.new_empty((x.shape[0], weight.shape[0]), dtype=torch.bfloat16 if out_dtype is None else out_dtype)


# llmm._llmm_torch, where built, registers the CPU and CUDA kernels of llmm::matmul,
# llmm::matmul_id and llmm::gemm_tq2 in C++: they take the ops' calls from the Python kernels
# above (a backend kernel outranks the CompositeExplicitAutograd one custom_op registers), with
# the same results and refusals. The Python kernels stay for builds without it.
llmm._fast()


# ---------------------------------------------------------------------------------------------
# Python conveniences (traceable by torch.compile: they only call the ops)

def matmul(a: Tensor, b: Tensor, *, transpose_a: bool = False, transpose_b: bool = False, precision: str = "exact",
           route: str = "auto") -> Tensor:
    """torch.ops.llmm.matmul: op(a) @ op(b) as a new tensor (see llmm.matmul for shapes and dtypes)."""
    return torch.ops.llmm.matmul(a, b, transpose_a, transpose_b, precision, route)


def matmul_id(weights: Tensor, x: Tensor, ids: Tensor, *, layout: str = "shared", route: str = "auto",
              may_repeat: bool = False, precision: str = "exact", out_dtype: Optional[torch.dtype] = None) -> Tensor:
    """torch.ops.llmm.matmul_id: out [m, top_k, n] (float32 unless out_dtype = x.dtype); ids int32,
    int64 (torch.topk's indices, taken as they are) or uint32 (see llmm.matmul_id). The grouped
    route's scratch is llmm's own, one per (device, stream)."""
    return torch.ops.llmm.matmul_id(weights, x, ids, layout, route, may_repeat, precision, out_dtype)


def moe_ffn(x: Tensor, w_gate_up: Tensor, w_down: Tensor, topk_ids: Tensor, topk_weights: Tensor, *,
            activation: str = "silu", route: str = "auto", precision: str = "exact",
            w_gate_up_scale: Optional[Tensor] = None, w_down_scale: Optional[Tensor] = None, alpha: float = 1.702,
            limit: float = 7.0, bias_gate_up: Optional[Tensor] = None, bias_down: Optional[Tensor] = None) -> Tensor:
    """torch.ops.llmm.moe_ffn: the MoE expert FFN, out [m, hidden] in x's dtype (see llmm.moe_ffn for
    the activations and biases); FP8 e4m3 experts with w_gate_up_scale and w_down_scale."""
    return torch.ops.llmm.moe_ffn(x, w_gate_up, w_down, topk_ids, topk_weights, activation, route, precision,
                                  w_gate_up_scale, w_down_scale, alpha, limit, bias_gate_up, bias_down)


def matmul_fp8(x: Tensor, weight: Tensor, scale: Tensor, *, precision: str = "fast", route: str = "auto",
               x_scale: Optional[Tensor] = None, out_dtype: Optional[torch.dtype] = None) -> Tensor:
    """torch.ops.llmm.matmul_fp8: x [m, k] @ dequant(weight [n, k])^T as a new [m, n] tensor in x's dtype;
    with x_scale, x is float8_e4m3fn codes with their scales per token and 128 channels and the output
    out_dtype (default bfloat16) (see llmm.matmul_fp8)."""
    return torch.ops.llmm.matmul_fp8(x, weight, scale, precision, route, x_scale, out_dtype)


class Fp8Linear(torch.nn.Module):
    """y = x @ dequant(W)^T (+ bias) with an FP8 e4m3 weight: codes float8_e4m3fn [n, k] and float32
    scales per tensor, per output channel or per [128, 128] block (DeepSeek's `weight_scale_inv`),
    kept as buffers (`.to(device)` moves them).

    x is [..., k] (f32, f16 or bf16); y is [..., n] in x's dtype. precision "fast" (the default) lets
    the op quantize x per token on tensor cores (W8A8, what FP8 serving runs); "exact" keeps x as
    given. Uses torch.ops.llmm.matmul_fp8, so torch.compile(fullgraph=True) traces it.
    """

    def __init__(self, weight: Tensor, scale: Tensor, bias: Optional[Tensor] = None, *, precision: str = "fast",
                 route: str = "auto"):
        super().__init__()
        if weight.dim() != 2:
            raise llmm.Error(f"llmm.Fp8Linear: weight must be [n, k], got shape {list(weight.shape)}")
        if weight.dtype == torch.uint8:
            weight = weight.view(torch.float8_e4m3fn)
        if weight.dtype != torch.float8_e4m3fn:
            raise llmm.Error(f"llmm.Fp8Linear: weight must be float8_e4m3fn (or uint8 bits), got {weight.dtype}")
        self.out_features, self.in_features = int(weight.shape[0]), int(weight.shape[1])
        self.register_buffer("weight", weight.contiguous())
        self.register_buffer("scale", scale.to(torch.float32).contiguous())
        self.bias = None if bias is None else torch.nn.Parameter(bias.detach(), requires_grad=False)
        self.precision, self.route = precision, route
        # The kind now, not at the first call: a wrong scale shape is refused here.
        self.scale_kind = llmm.fp8._scale_kind_of("Fp8Linear", tuple(int(d) for d in self.scale.shape),
                                                  self.out_features, self.in_features)

    @classmethod
    def from_float(cls, w: Tensor, bias: Optional[Tensor] = None, *, scale: str = "block", device=None,
                   **kw) -> "Fp8Linear":
        """Quantizes a float [n, k] weight with llmm.quantize_fp8 (scale "block", "channel" or
        "tensor") onto `device` (default w's)."""
        codes, scales = llmm.quantize_fp8(w.detach(), scale=scale)
        dev = w.device if device is None else torch.device(device)
        return cls(codes.to(dev), scales.to(dev), None if bias is None else bias.to(dev), **kw)

    @classmethod
    def from_safetensors(cls, path, name: str, bias: Optional[Tensor] = None, *, device="cpu", **kw) -> "Fp8Linear":
        """A checkpoint's FP8 weight `name` with its `name + "_scale_inv"` (llmm.load_fp8_safetensors:
        DeepSeek's naming)."""
        codes, scales, _ = llmm.load_fp8_safetensors(path, name)
        dev = torch.device(device)
        w = torch.from_numpy(codes.copy()).view(torch.float8_e4m3fn).to(dev)
        return cls(w, torch.from_numpy(scales.copy()).to(dev), None if bias is None else bias.to(dev), **kw)

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() < 1 or x.shape[-1] != self.in_features:
            raise llmm.Error(f"llmm.Fp8Linear: x's last dimension is {x.shape[-1] if x.dim() else None}, the layer's "
                             f"in_features {self.in_features}")
        lead = x.shape[:-1]
        y = torch.ops.llmm.matmul_fp8(x.reshape(-1, self.in_features), self.weight, self.scale, self.precision,
                                      self.route)
        y = y.reshape(*lead, self.out_features)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, scale={self.scale_kind!r}, "
                f"precision={self.precision!r}")


def quantize_linears_fp8(module: torch.nn.Module, *, scale: str = "block", precision: str = "fast",
                         route: str = "auto", skip=None) -> int:
    """Replaces every torch.nn.Linear inside `module` (in place) by an Fp8Linear of its weight
    quantized with llmm.quantize_fp8 (`scale` "block", "channel" or "tensor") and its bias; skip(name,
    linear) -> True keeps one (e.g. the lm head). Returns how many were replaced."""
    done = 0
    for name, child in list(module.named_children()):
        if isinstance(child, torch.nn.Linear) and not (skip is not None and skip(name, child)):
            setattr(module, name, Fp8Linear.from_float(child.weight, child.bias, scale=scale, precision=precision,
                                                       route=route))
            done += 1
        else:
            done += quantize_linears_fp8(child, scale=scale, precision=precision, route=route,
                                         skip=None if skip is None else (lambda n, m, p=name: skip(p + "." + n, m)))
    return done


def _given(v) -> bool:
    return v is not None and v is not False


def _fused_experts_fp8_scales(w1: Tensor, w2: Tensor, w1_scale, w2_scale, block_shape, per_channel_quant: bool):
    """vLLM's FP8 expert arguments, checked against what llmm takes: float8_e4m3fn w1 and w2 (or uint8
    bits) with float32 scales per expert, 128 x 128 blocks (block_shape [128, 128]: vLLM's
    weight_scale_inv layout [E, ceil(N / 128), ceil(K / 128)]), per output channel ([E, N, 1] or
    [E, N]; per_channel_quant=True asks for these) or per tensor ([E])."""
    from llmm.fp8 import Fp8ScaleShapeError, _expert_scale_kind

    op = "fused_experts"
    if block_shape is not None:
        try:
            bs = [int(b) for b in block_shape]
        except (TypeError, ValueError):
            bs = None
        if bs != [128, 128]:
            raise llmm.Error(f"llmm.fused_experts: block_shape must be None or [128, 128] (llmm's FP8 block scales are "
                             f"128 x 128), got {block_shape!r}")
        if per_channel_quant:
            raise llmm.Error("llmm.fused_experts: per_channel_quant=True and block_shape are exclusive (as in vLLM)")
    for name, w, s in (("w1", w1, w1_scale), ("w2", w2, w2_scale)):
        if w.dim() != 3:
            raise llmm.Error(f"llmm.fused_experts: {name} must be [E, N, K], got shape {tuple(w.shape)}")
        e, n, k = (int(d) for d in w.shape)
        shape = tuple(int(d) for d in s.shape)
        kind = _expert_scale_kind(op, f"{name}_scale", shape, e, n, k)  # refuses a shape that fits no kind
        blocks = (e, -(-n // 128), -(-k // 128))
        if block_shape is not None and shape != blocks:
            raise Fp8ScaleShapeError(
                f"llmm.fused_experts: with block_shape [128, 128], {name}_scale must be [E, ceil(N / 128), "
                f"ceil(K / 128)] = {list(blocks)} for {name} of {[e, n, k]}, got {list(shape)}")
        if block_shape is None and kind == "block":
            raise Fp8ScaleShapeError(
                f"llmm.fused_experts: {name}_scale of shape {list(shape)} holds 128 x 128 block scales: pass "
                f"block_shape=[128, 128] (without it vLLM reads per-tensor [E] or, with per_channel_quant, per-channel "
                f"[E, N, 1] scales)")
        if per_channel_quant and kind != "channel":
            raise Fp8ScaleShapeError(
                f"llmm.fused_experts: per_channel_quant=True needs per-channel {name}_scale [E, N, 1] = {[e, n, 1]}, got "
                f"{list(shape)}")


def fused_experts(hidden_states: Tensor, w1: Tensor, w2: Tensor, topk_weights: Tensor, topk_ids: Tensor,
                  inplace: bool = False, activation: str = "silu", apply_router_weight_on_input: bool = False,
                  global_num_experts: int = -1, expert_map: Optional[Tensor] = None, *, use_fp8_w8a8: bool = False,
                  w1_scale: Optional[Tensor] = None, w2_scale: Optional[Tensor] = None,
                  a1_scale: Optional[Tensor] = None, a2_scale: Optional[Tensor] = None, block_shape=None,
                  per_channel_quant: bool = False, w1_bias: Optional[Tensor] = None,
                  w2_bias: Optional[Tensor] = None, **quant) -> Tensor:
    """vLLM's fused_experts semantics on llmm.moe_ffn: hidden_states [m, H], w1 [E, 2I, H] (gate
    rows, then up rows), w2 [E, H, I], topk_weights / topk_ids [m, top_k]; returns [m, H] (written
    into hidden_states when inplace). activation by vLLM's names (llmm.moe_ffn): "silu", "gelu",
    "gelu_tanh", "relu2", each also "_no_mul" (w1 [E, I, H]), "swigluoai" (gpt-oss, interleaved
    rows), "swigluoai_uninterleave"; w1_bias [E, rows of w1] and w2_bias [E, H] optional.
    expert_map [global_num_experts] (expert parallelism: global id -> local id, -1 where the expert
    lives elsewhere): topk_ids are global, a slot of another rank's expert contributes nothing.
    apply_router_weight_on_input=True (top_k 1 only, as in vLLM): hidden_states are scaled by the
    routing weight before w1.

    FP8 experts as vLLM passes them: use_fp8_w8a8=True, w1 / w2 torch.float8_e4m3fn (or uint8 bits)
    and float32 w1_scale / w2_scale, multiplied into the codes (vLLM's weight_scale_inv): with
    block_shape=[128, 128] per 128 x 128 block, [E, ceil(2I / 128), ceil(H / 128)] and
    [E, ceil(H / 128), ceil(I / 128)]; without, per expert [E] or per output channel [E, N, 1]
    (per_channel_quant=True requires the latter). llmm keeps hidden_states in their dtype (the
    weights are decoded, the activations not quantized): a1_scale / a2_scale (static activation
    scales) must be None.

    What llmm does not do is refused with llmm.Error rather than ignored: int8 / int4 / mxfp4
    quantization, zero points, other block shapes."""
    if activation not in _MOE_ACTIVATIONS:
        raise llmm.Error(f"llmm.fused_experts: activation must be one of {_MOE_ACTIVATIONS}, got {activation!r}")
    if apply_router_weight_on_input:
        if topk_weights.dim() != 2 or topk_weights.shape[1] != 1:
            raise llmm.Error(f"llmm.fused_experts: apply_router_weight_on_input=True needs top_k 1 (as vLLM), got "
                             f"topk_weights of shape {list(topk_weights.shape)}")
        hidden_in = hidden_states * topk_weights.to(hidden_states.dtype)
        topk_weights = torch.ones_like(topk_weights)
    else:
        hidden_in = hidden_states
    if expert_map is not None:
        if expert_map.dim() != 1 or expert_map.dtype not in (torch.int32, torch.int64):
            raise llmm.Error(f"llmm.fused_experts: expert_map must be a 1-D int32 / int64 tensor [global_num_experts], "
                             f"got {expert_map.dtype} of shape {list(expert_map.shape)}")
        g = expert_map.shape[0]
        if global_num_experts not in (-1, g):
            raise llmm.Error(f"llmm.fused_experts: global_num_experts {global_num_experts} differs from expert_map's "
                             f"length {g}")
        # Global ids to local ones; an id outside [0, g) or of another rank's expert becomes -1,
        # which llmm.moe_ffn reads as contributing nothing (no device-side index error).
        valid = (topk_ids >= 0) & (topk_ids < g)
        local = expert_map.to(topk_ids.device)[topk_ids.clamp(0, max(g - 1, 0)).long()]
        topk_ids = torch.where(valid, local.to(torch.int64), torch.full_like(local, -1, dtype=torch.int64))
    elif global_num_experts not in (-1, w1.shape[0]):
        raise llmm.Error(f"llmm.fused_experts: global_num_experts {global_num_experts} differs from w1's "
                         f"{w1.shape[0]} experts (without an expert_map)")
    biases = dict(bias_gate_up=w1_bias, bias_down=w2_bias)
    fp8_args = dict(use_fp8_w8a8=use_fp8_w8a8, w1_scale=w1_scale, w2_scale=w2_scale, a1_scale=a1_scale,
                    a2_scale=a2_scale, block_shape=block_shape, per_channel_quant=per_channel_quant)
    given = sorted(k for k, v in quant.items() if _given(v))
    fp8 = [k for k, v in fp8_args.items() if _given(v)]
    form = "use_fp8_w8a8=True with float8_e4m3fn w1 and w2 and their float32 w1_scale and w2_scale"
    if given:
        raise llmm.Error(f"llmm.fused_experts: quantized or biased experts are not supported (given: "
                         f"{', '.join(sorted(given + fp8))}): llmm's quantized experts are FP8 e4m3, as {form}")
    is_fp8 = [w.dtype in (torch.float8_e4m3fn, torch.uint8) for w in (w1, w2)]
    if fp8 and not use_fp8_w8a8:
        raise llmm.Error(f"llmm.fused_experts: {', '.join(fp8)} given without use_fp8_w8a8=True: llmm's quantized "
                         f"experts are FP8 e4m3, as {form}")
    if use_fp8_w8a8:
        if a1_scale is not None or a2_scale is not None:
            raise llmm.Error("llmm.fused_experts: a1_scale / a2_scale must be None: llmm does not quantize activations "
                             "on this path (hidden_states stay in their dtype and meet the decoded FP8 weights), so "
                             "static activation scales have nothing to scale")
        if not all(is_fp8) or w1_scale is None or w2_scale is None:
            raise llmm.Error(f"llmm.fused_experts: quantized or biased experts are not supported (given: "
                             f"{', '.join(fp8)}) other than FP8 e4m3 ones, as {form}; got w1 {w1.dtype}, w2 "
                             f"{w2.dtype}, w1_scale {'None' if w1_scale is None else 'given'}, w2_scale "
                             f"{'None' if w2_scale is None else 'given'}")
        _fused_experts_fp8_scales(w1, w2, w1_scale, w2_scale, block_shape, per_channel_quant)
        out = moe_ffn(hidden_in, w1, w2, topk_ids, topk_weights, activation=activation, w_gate_up_scale=w1_scale,
                      w_down_scale=w2_scale, **biases)
    else:
        if any(w.dtype == torch.float8_e4m3fn for w in (w1, w2)):
            raise llmm.Error(f"llmm.fused_experts: float8_e4m3fn w1 / w2 need use_fp8_w8a8=True with w1_scale and "
                             f"w2_scale (got {w1.dtype} and {w2.dtype})")
        out = moe_ffn(hidden_in, w1, w2, topk_ids, topk_weights, activation=activation, **biases)
    if inplace:
        hidden_states.copy_(out)
        return hidden_states
    return out


def gemm_tq2(weight, x: Tensor, *, precision: str = "exact", route: str = "auto",
             out_dtype: Optional[torch.dtype] = None) -> Tensor:
    """torch.ops.llmm.gemm_tq2 for a TernaryWeight on x's device: x [m, k] @ W^T -> [m, n]. Inside
    torch.compile prefer TernaryLinear (plain int attributes), or call the op with weight.key."""
    return torch.ops.llmm.gemm_tq2(x, int(weight.key), int(weight.n), precision, route, out_dtype)


class TernaryLinear(torch.nn.Module):
    """y = x @ W^T (+ bias) with a TQ2_0_g128 ternary weight resident on one device.

    x is [..., k] (f32, f16 or bf16, innermost stride 1; rows are flattened without a copy when
    x is contiguous); y is [..., n] in out_dtype (default: x's dtype; float32 is the other choice).
    Uses torch.ops.llmm.gemm_tq2, so torch.compile(fullgraph=True) traces it.
    rotation: a llmm.HadamardRotation of the weight's input width for a Hadamard-folded weight
    (Ternary-Bonsai-2; from_gguf finds it): x is rotated before the matmul (unfused: see
    llmm.hadamard).
    """

    def __init__(self, weight, bias: Optional[Tensor] = None, *, precision: str = "exact", route: str = "auto",
                 out_dtype: Optional[torch.dtype] = None, rotation: Optional[llmm.HadamardRotation] = None):
        super().__init__()
        self.weight_handle = weight  # keeps the device memory alive
        self.weight_key, self.in_features, self.out_features = int(weight.key), int(weight.k), int(weight.n)
        if rotation is not None and (not isinstance(rotation, llmm.HadamardRotation) or rotation.k != self.in_features):
            what = f"k {rotation.k}" if isinstance(rotation, llmm.HadamardRotation) else type(rotation).__name__
            raise llmm.Error(f"llmm.torch_ops.TernaryLinear: rotation must be a llmm.HadamardRotation of the weight's "
                             f"{self.in_features} input features, got {what}")
        self.rotation = rotation
        if rotation is not None:  # buffers: torch.compile traces them and Module.to moves them
            for name, t in rotation.tensors(weight.device).items():
                self.register_buffer("rotation_" + name, t, persistent=False)
        self.bias = None if bias is None else torch.nn.Parameter(bias.detach(), requires_grad=False)
        self.precision, self.route, self.out_dtype = precision, route, out_dtype

    @classmethod
    def from_gguf(cls, path, tensor_name: str, bias: Optional[Tensor] = None, *, device="cpu",
                  key: Optional[int] = None, v_head_order: Optional[str] = None, **kw) -> "TernaryLinear":
        """A ternary tensor of a GGUF file (llmm.load_tq2_gguf's types) on `device`, with the
        Hadamard rotation its prism.hadamard.* metadata declares for it, if any, applied to x
        (v_head_order: for a gated-DeltaNet ssm_out weight, as load_tq2_gguf)."""
        weight, rotation = llmm.load_tq2_gguf(path, tensor_name, device=device, key=key, hadamard="return",
                                              v_head_order=v_head_order)
        if bias is not None:
            bias = bias.to(weight.device)
        return cls(weight, bias, rotation=rotation, **kw)

    @classmethod
    def from_float(cls, w: Tensor, bias: Optional[Tensor] = None, *, device=None, rule: str = "absmean",
                   **kw) -> "TernaryLinear":
        """Quantizes a float [n, k] weight (k % 128 == 0) and uploads it to `device` (default w's)."""
        n, k = w.shape
        dev = llmm._device_name(str(device) if device is not None else w)
        weight = llmm.upload_tq2(llmm.quantize_tq2(w), n, k, device=dev)
        if bias is not None:
            bias = bias.to(dev)
        return cls(weight, bias, **kw)

    def forward(self, x: Tensor) -> Tensor:
        if self.rotation is not None:
            x = rotate_torch(x, *pick_operands(lambda name: getattr(self, "rotation_" + name), x.dtype))
        lead = x.shape[:-1]
        out_dtype = x.dtype if self.out_dtype is None else self.out_dtype
        x2 = x.reshape(-1, self.in_features)
        f = llmm._fast_ext or llmm._fast()
        if f and not torch.compiler.is_compiling():  # eager: the C++ host path, no op dispatch
            y = f.gemm_tq2(x2, self.weight_handle, self.out_features, self.precision, self.route, out_dtype)
        else:
            y = torch.ops.llmm.gemm_tq2(x2, self.weight_key, self.out_features, self.precision, self.route, out_dtype)
        y = y.reshape(*lead, self.out_features)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, key={self.weight_key}, "
                f"device={self.weight_handle.device}, precision={self.precision!r}"
                + (f", rotation={self.rotation!r}" if self.rotation is not None else ""))


def ternary_linears_from_gguf(path, names=None, *, device="cpu", v_head_order: Optional[str] = None,
                              **kw) -> dict:
    """{name: TernaryLinear} for the ternary tensors of a GGUF file (`names`, or every tensor of a
    ternary type but the embedding tables of prism.hadamard.inverse_weight_names), each with the
    Hadamard rotation the file declares for it (TernaryLinear.from_gguf, header read once).
    v_head_order as load_tq2_gguf (needed where the file has a gated-DeltaNet ssm_out under
    prism.hadamard.gdn_v_grouped); other keywords go to TernaryLinear. A tensor that cannot load
    raises llmm.Error naming it; the weights uploaded before it are released."""
    from llmm import _gguf

    infos, meta = _gguf.read_header(path)
    by_name = {t.name: t for t in infos}
    if names is None:
        inverse = meta.get("prism.hadamard.inverse_weight_names")
        skip = set(inverse) if isinstance(inverse, list) else set()
        todo = [t for t in infos if t.type_id in llmm._GGUF_TERNARY_TYPE_IDS and t.name not in skip]
    else:
        missing = [n for n in names if n not in by_name]
        if missing:
            raise llmm.Error(f"llmm.torch_ops.ternary_linears_from_gguf: no tensor {missing[0]!r} in {path}")
        todo = [by_name[n] for n in names]
    out = {}
    try:
        for t in todo:
            weight, rotation = llmm._load_gguf_tensor(path, t, meta, device, None, "return", v_head_order,
                                                      "llmm.torch_ops.ternary_linears_from_gguf")
            out[t.name] = TernaryLinear(weight, rotation=rotation, **kw)
    except BaseException:
        for lin in out.values():
            llmm.release_tq2(lin.weight_handle)
        raise
    return out
