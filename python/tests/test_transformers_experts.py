"""llmm as a transformers (>= 5) experts implementation: tiny random Qwen3-MoE and Mixtral models give
the same logits with set_experts_implementation("llmm") as with transformers' own experts; what llmm
does not do is refused. CPU (llmm's float64 reference backend) everywhere torch and transformers
are installed; CUDA bf16 on a GPU."""
import pytest

import llmm
from conftest import need_cuda_torch, torch_or_skip_module

torch = torch_or_skip_module("the transformers experts tests need torch")
transformers = pytest.importorskip("transformers", minversion="5.0",
                                   reason="transformers >= 5 (its ExpertsInterface) is not installed")
import llmm.transformers_experts as X  # noqa: E402


def tiny(kind, act="silu"):
    common = dict(vocab_size=97, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=64, hidden_act=act)
    if kind == "qwen3_moe":
        cfg = transformers.Qwen3MoeConfig(moe_intermediate_size=32, intermediate_size=96, num_experts=8,
                                          num_experts_per_tok=3, decoder_sparse_step=1, norm_topk_prob=True, **common)
        model = transformers.Qwen3MoeForCausalLM(cfg)
    else:
        cfg = transformers.MixtralConfig(intermediate_size=48, num_local_experts=6, num_experts_per_tok=2, **common)
        model = transformers.MixtralForCausalLM(cfg)
    torch.manual_seed(0)
    for p in model.parameters():  # random experts (from_config leaves some uninitialised)
        torch.nn.init.normal_(p, std=0.05)
    return model.eval()


def logits(model, impl, ids):
    model.set_experts_implementation(impl)
    with torch.inference_mode():
        return model(ids).logits.double()


@pytest.mark.parametrize("kind,act", [("qwen3_moe", "silu"), ("mixtral", "silu"), ("qwen3_moe", "gelu"),
                                      ("mixtral", "gelu_pytorch_tanh")])
def test_same_logits_as_transformers_experts(kind, act):
    model = tiny(kind, act)
    ids = torch.randint(0, 97, (2, 11), generator=torch.Generator().manual_seed(1))
    want = logits(model, "eager", ids)
    got = logits(model, "llmm", ids)
    assert model.config._experts_implementation == "llmm"
    # float32 model on the CPU: llmm's float64 reference against transformers' float32 loop
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert not torch.equal(want, logits(tiny(kind, act), "eager", ids + 1))  # the comparison can fail


def test_refuses_what_llmm_does_not_do():
    model = tiny("qwen3_moe")
    model.set_experts_implementation("llmm")
    experts = model.model.layers[0].mlp.experts
    ids = torch.zeros((1, 4), dtype=torch.long)
    for attr, value, match in (("is_concatenated", False, "interleaved gate/up rows"),
                               ("is_transposed", True, "transposed expert weights"),
                               ("_is_expert_parallel", True, "expert parallelism")):
        had, old = hasattr(experts, attr), getattr(experts, attr, None)  # (older transformers 5 lack some)
        setattr(experts, attr, value)
        try:
            with pytest.raises(llmm.Error, match=match), torch.inference_mode():
                model(ids)
        finally:
            if had:
                setattr(experts, attr, old)
            else:
                delattr(experts, attr)
    experts.act_fn = torch.nn.ReLU()
    with pytest.raises(llmm.Error, match="activation ReLU is not supported"), torch.inference_mode():
        model(ids)


def nemotron_experts(has_bias):
    from transformers.models.nemotron_h import modeling_nemotron_h as nh
    cfg = transformers.NemotronHConfig(hidden_size=64, moe_intermediate_size=32, n_routed_experts=6,
                                       num_experts_per_tok=2, mlp_hidden_act="relu2")
    experts = nh.NemotronHExperts(cfg)
    torch.manual_seed(3)
    for p in experts.parameters():
        torch.nn.init.normal_(p, std=0.1)
    if has_bias:  # NemotronH has none: the biases transformers' own implementation adds, given here
        experts.has_bias = True
        experts.up_proj_bias = torch.nn.Parameter(torch.randn(6, 32) * 0.1)
        experts.down_proj_bias = torch.nn.Parameter(torch.randn(6, 64) * 0.1)
    return experts.eval()


@pytest.mark.parametrize("has_bias", [False, True])
def test_ungated_relu2_experts_with_and_without_biases(has_bias):
    """NemotronH's experts (no gate: up_proj [E, I, H], squared ReLU) through llmm's relu2_no_mul,
    against transformers' generic batched experts (which honours has_bias; the module's own loop
    knows no biases) on the same module."""
    experts = nemotron_experts(has_bias)
    g = torch.Generator().manual_seed(4)
    x = torch.randn(9, 64, generator=g)
    ids = torch.randint(0, 6, (9, 2), generator=g)
    w = torch.rand(9, 2, generator=g)
    with torch.inference_mode():
        experts.config._experts_implementation = "batched_mm"
        want = experts(x, ids, w).double()
        experts.config._experts_implementation = "llmm"
        got = experts(x, ids, w).double()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert want.abs().max() > 0


@pytest.mark.cuda
def test_cuda_bf16_logits_close_to_transformers_grouped_mm():
    need_cuda_torch()
    model = tiny("qwen3_moe").to("cuda", torch.bfloat16)
    ids = torch.randint(0, 97, (4, 33), generator=torch.Generator().manual_seed(2)).cuda()
    want = logits(model, "grouped_mm", ids)
    got = logits(model, "llmm", ids)
    scale = want.abs().max()
    assert (got - want).abs().max() <= 3e-2 * scale, ((got - want).abs().max(), scale)
