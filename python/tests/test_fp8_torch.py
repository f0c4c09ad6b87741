"""torch.ops.llmm.matmul_fp8 and llmm.torch_ops.Fp8Linear on the CPU (and CUDA where there is one):
the op against llmm.matmul_fp8 bit for bit, the module against the float64 product of the
dequantized weight, opcheck, torch.compile(fullgraph=True), a DeepSeek-style safetensors file,
and the refusals."""
import copy
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not hasattr(torch, "float8_e4m3fn"):
    pytest.skip("this torch has no float8_e4m3fn", allow_module_level=True)

import llmm  # noqa: E402
from llmm import torch_ops as T  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from test_fp8 import write_safetensors  # noqa: E402

KINDS = ["block", "channel", "tensor"]


def devices():
    out = ["cpu"]
    if torch.cuda.is_available() and llmm.cuda_available():
        out.append("cuda")
    elif os.environ.get("LLMM_REQUIRE_GPU") == "1":
        pytest.fail("LLMM_REQUIRE_GPU=1 but no CUDA device for llmm")
    return out


def weight(n, k, seed, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g) * torch.exp2(torch.randint(-3, 4, (n, 1), generator=g).float())
    return w.to(device)


def dequant(layer):
    codes = layer.weight.view(torch.uint8).cpu().numpy()
    scales = layer.scale.cpu().numpy()
    kind = llmm.fp8._scale_kind_of("t", tuple(scales.shape), *codes.shape)
    return llmm.dequantize_fp8(codes, scales.reshape(llmm.fp8._scale_shape(kind, *codes.shape)), scale=kind)


def test_op_is_registered_with_its_schema():
    assert str(torch.ops.llmm.matmul_fp8.default._schema) == (
        'llmm::matmul_fp8(Tensor x, Tensor weight, Tensor scale, str precision="fast", str route="auto", '
        'Tensor? x_scale=None, ScalarType? out_dtype=None) -> Tensor')


@pytest.mark.parametrize("kind", KINDS)
def test_op_matches_matmul_fp8_bit_for_bit_on_the_cpu(kind):
    codes, scales = llmm.quantize_fp8(weight(200, 272, 1), scale=kind)
    x = torch.randn(7, 272, generator=torch.Generator().manual_seed(2)).bfloat16()
    y = T.matmul_fp8(x, codes, scales)
    assert y.dtype == torch.bfloat16 and y.shape == (7, 200)
    assert torch.equal(y, llmm.matmul_fp8(x, codes, scales))


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("kind", KINDS)
def test_fp8_linear_against_the_dequantized_product(device, kind):
    w = weight(136, 384, 3, device)
    bias = torch.randn(136, generator=torch.Generator().manual_seed(4)).to(device)
    layer = T.Fp8Linear.from_float(w, bias, scale=kind, precision="exact")
    assert layer.weight.dtype == torch.float8_e4m3fn and layer.weight.device.type == device
    x = torch.randn(2, 5, 384, generator=torch.Generator().manual_seed(5)).to(device)
    y = layer(x)
    assert y.shape == (2, 5, 136) and y.dtype == torch.float32
    ref = x.double().cpu().numpy().reshape(10, 384) @ dequant(layer).astype(np.float64).T + bias.double().cpu().numpy()
    bound = np.abs(x.double().cpu().numpy().reshape(10, 384)) @ np.abs(dequant(layer)).T
    err = np.abs(y.double().cpu().numpy().reshape(10, 136) - ref)
    assert np.all(err <= 1e-5 * bound + 1e-5), float(np.max(err / (bound + 1e-30)))
    assert "scale='%s'" % kind in repr(layer)


def test_fp8_linear_refusals():
    codes, scales = llmm.quantize_fp8(weight(64, 256, 6), scale="block")
    with pytest.raises(llmm.Error, match="fits no scale kind"):
        T.Fp8Linear(codes, scales.reshape(2, 1))
    with pytest.raises(llmm.Error, match="must be float8_e4m3fn"):
        T.Fp8Linear(codes.float(), scales)
    with pytest.raises(llmm.Error, match=r"must be \[n, k\]"):
        T.Fp8Linear(codes.reshape(1, 64, 256), scales)
    layer = T.Fp8Linear(codes.view(torch.uint8), scales)  # uint8 bits are taken as e4m3
    with pytest.raises(llmm.Error, match=r"x's last dimension is 255, the layer's in_features 256"):
        layer(torch.randn(3, 255))


def test_opcheck_and_compile_fullgraph():
    codes, scales = llmm.quantize_fp8(weight(48, 128, 7), scale="channel")
    x = torch.randn(5, 128, generator=torch.Generator().manual_seed(8))
    # uint8 bits: opcheck's schema test runs torch ops on the inputs, which CPU float8 lacks
    result = torch.library.opcheck(torch.ops.llmm.matmul_fp8.default, (x, codes.view(torch.uint8), scales), {})
    assert all(v == "SUCCESS" for v in result.values()), result
    layer = T.Fp8Linear(codes, scales)
    block = torch.nn.Sequential(layer, torch.nn.GELU())
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    for m in (5, 9):
        xm = torch.randn(m, 128, generator=torch.Generator().manual_seed(m))
        assert torch.equal(compiled(xm), block(xm))


def test_from_safetensors_deepseek_naming(tmp_path):
    w = weight(130, 260, 9)
    codes, scales = llmm.quantize_fp8(w.numpy(), scale="block")
    path = tmp_path / "m.safetensors"
    write_safetensors(path, {"layer.weight": ("F8_E4M3", codes.shape, codes.tobytes()),
                             "layer.weight_scale_inv": ("F32", scales.shape, scales.astype("<f4").tobytes())})
    layer = T.Fp8Linear.from_safetensors(path, "layer.weight")
    assert layer.weight.shape == (130, 260) and layer.scale.shape == (2, 3)
    assert np.array_equal(layer.weight.view(torch.uint8).numpy(), codes)
    x = torch.randn(4, 260, generator=torch.Generator().manual_seed(10))
    assert torch.equal(layer(x), llmm.matmul_fp8(x, codes, scales))


def test_quantize_linears_fp8_swaps_every_linear_but_the_skipped():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.SiLU(),
                                torch.nn.Sequential(torch.nn.Linear(96, 80, bias=False)), torch.nn.Linear(80, 10))
    ref_model = copy.deepcopy(model)  # the float model, kept apart before the swap
    x = torch.randn(6, 64)
    keep = model[3]
    n = T.quantize_linears_fp8(model, scale="channel", precision="exact", skip=lambda name, m: name == "3")
    assert n == 2 and isinstance(model[0], T.Fp8Linear) and isinstance(model[2][0], T.Fp8Linear)
    assert model[3] is keep and model[2][0].bias is None
    # The swapped model equals the float model run on the dequantized weights.
    with torch.no_grad():
        for lin, fp8 in ((ref_model[0], model[0]), (ref_model[2][0], model[2][0])):
            lin.weight.copy_(torch.from_numpy(dequant(fp8)))
        want = ref_model(x)
    got = model(x)
    assert isinstance(ref_model[2][0], torch.nn.Linear) and ref_model[2][0].weight.dtype == torch.float32
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5)
    seen = []
    T.quantize_linears_fp8(torch.nn.Sequential(torch.nn.Sequential(torch.nn.Linear(8, 8))),
                           skip=lambda name, m: seen.append(name) or True)
    assert seen == ["0.0"]
