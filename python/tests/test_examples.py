"""The examples run (small shapes, CPU backend) and agree with their references."""
import importlib.util
import pathlib

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_ternary_linear_example():
    assert load("ternary_linear").run("cpu", m=9, n=256, k=512, quiet=True) < 1e-3


@pytest.mark.parametrize("tokens", [2, 64])  # direct and grouped routes
def test_qwen3_moe_ffn_example(tokens):
    err = load("qwen3_moe_ffn").run("cpu", tokens=tokens, hidden=256, inter=96, experts=16, top_k=4, quiet=True)
    assert err < 1e-4


@pytest.mark.parametrize("tokens", [2, 40])
def test_ternary_moe_ffn_example(tokens):
    assert load("ternary_moe_ffn").run("cpu", tokens=tokens, hidden=256, inter=128, experts=16, top_k=4,
                                       quiet=True) < 1e-5


@pytest.mark.parametrize("tokens", [2, 64])  # direct and grouped routes inside the compiled graph
def test_torch_compile_moe_example_cpu(torch_mod, tokens):
    err_compiled, err_ref = load("torch_compile_moe").run("cpu", "aot_eager", tokens=tokens, hidden=256, inter=96,
                                                           experts=16, top_k=4, quiet=True)
    assert err_compiled < 1e-6 and err_ref < 1e-5, (err_compiled, err_ref)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype,tol_compiled,tol_ref", [("float32", 1e-5, 1e-4), ("bfloat16", 5e-2, 5e-2)])
@pytest.mark.parametrize("tokens", [2, 64])
def test_torch_compile_moe_example_cuda_inductor(cuda_torch, dtype, tol_compiled, tol_ref, tokens):
    err_compiled, err_ref = load("torch_compile_moe").run("cuda", "inductor", dtype=dtype, tokens=tokens, quiet=True)
    assert err_compiled < tol_compiled and err_ref < tol_ref, (err_compiled, err_ref)


def test_bitnet_decoder_example(torch_mod):
    """Two decoder layers, prefill then decode over the static KV cache: llmm's ternary linears
    against the float64 stack (f32 activations on the CPU backend)."""
    assert load("bitnet_decoder").run("cpu", prefill=16, decode=4, quiet=True) < 1e-5


@pytest.mark.cuda
def test_examples_on_cuda(cuda_torch):
    assert load("ternary_linear").run("cuda", m=9, n=256, k=512, quiet=True) < 1e-3
    # bf16 activations through two layers (the CUDA timings are printed by the script itself)
    assert load("bitnet_decoder").run("cuda", prefill=16, decode=4, quiet=True) < 5e-2
    for tokens in (2, 64):
        err = load("qwen3_moe_ffn").run("cuda", tokens=tokens, hidden=256, inter=96, experts=16, top_k=4, quiet=True)
        assert err < 1e-4
        # f16 activations and an f16 gate_up output: relative to the largest combined output
        assert load("ternary_moe_ffn").run("cuda", tokens=tokens, hidden=256, inter=128, experts=16, top_k=4,
                                           quiet=True) < 5e-3


def test_ternary_layer_example_from_gguf():
    pytest.importorskip("gguf", reason="the example writes its layer with gguf-py")
    assert load("ternary_layer").run("cpu", ms=(1, 3), small=True, quiet=True) < 1e-6
