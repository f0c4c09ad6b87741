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
