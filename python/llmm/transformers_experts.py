"""llmm's experts implementation for transformers (>= 5) Mixture-of-Experts models.

    import llmm.transformers_experts            # registers "llmm" in transformers' ExpertsInterface
    model.set_experts_implementation("llmm")    # or from_pretrained(..., experts_implementation="llmm")

Every experts module built with transformers' `use_experts_implementation` (Qwen2/3-MoE, Mixtral,
OLMoE, DeepSeek-V2/V3, NemotronH, ...) then runs its expert FFN as one `torch.ops.llmm.moe_ffn`
call: its `gate_up_proj` [E, 2I, H] (gate rows, then up rows) or, without a gate, `up_proj`
[E, I, H], its `down_proj` [E, H, I], their biases where the module has them, the router's top-k
ids and weights; the routing-weighted sum over the slots in slot order (the same bits on every
run). Inference only (no autograd formula). What llmm does not do is refused with llmm.Error
instead of computed some other way: interleaved gate/up rows, transposed weights (gpt-oss),
post-expert norms, expert parallelism, a custom gate and activations other than SiLU, GELU (erf or
tanh) and squared ReLU.
"""
import torch
from torch import nn
from transformers import activations as _act
from transformers.integrations import moe as _moe

import llmm
import llmm.torch_ops  # noqa: F401  (registers torch.ops.llmm.moe_ffn)

__all__ = ["experts_forward"]

_ACTIVATIONS = (
    ((_act.SiLUActivation, nn.SiLU), "silu"),
    ((_act.GELUTanh, _act.NewGELUActivation), "gelu_tanh"),
    ((_act.GELUActivation,), "gelu"),
    ((_act.ReLUSquaredActivation,), "relu2"),
)


def _activation(module) -> str:
    fn = getattr(module, "act_fn", None)  # (the classes' pure-Python variants compute the same functions)
    for classes, name in _ACTIVATIONS:
        if isinstance(fn, classes):
            return name
    raise llmm.Error(f"llmm experts: activation {type(fn).__name__} is not supported (SiLU, GELU, GELU-tanh and "
                     f"squared ReLU are)")


def experts_forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                    top_k_weights: torch.Tensor) -> torch.Tensor:
    """transformers' experts forward contract: hidden_states [tokens, H], top_k_index and
    top_k_weights [tokens, top_k] -> [tokens, H] in hidden_states' dtype."""
    gated = getattr(self, "has_gate", True)
    refused = [what for what, on in (
        ("interleaved gate/up rows", gated and not getattr(self, "is_concatenated", True)),
        ("transposed expert weights", getattr(self, "is_transposed", False)),
        ("a post-expert norm", getattr(self, "has_post_expert_norm", False)),
        ("expert parallelism", getattr(self, "_is_expert_parallel", False)),
        ("a custom gate (_apply_gate)", getattr(type(self), "_apply_gate", _moe._default_apply_gate)
         is not _moe._default_apply_gate),
    ) if on]
    if refused:
        raise llmm.Error(f"llmm experts: {type(self).__name__} has {', '.join(refused)}: not supported")
    w1 = self.gate_up_proj if gated else self.up_proj
    b1 = b2 = None
    if getattr(self, "has_bias", False):
        b1, b2 = (self.gate_up_proj_bias if gated else self.up_proj_bias), self.down_proj_bias
    return torch.ops.llmm.moe_ffn(hidden_states, w1, self.down_proj, top_k_index, top_k_weights,
                                  _activation(self) + ("" if gated else "_no_mul"), "auto", "exact",
                                  bias_gate_up=b1, bias_down=b2)


_moe.ExpertsInterface.register("llmm", experts_forward)
