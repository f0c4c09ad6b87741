"""FP8 e4m3 on the host, bit for bit against ml_dtypes' float8_e4m3fn (an independent implementation):
every code's value, the cast of edge values and of many random floats, the saturating variant as
clip-then-cast, quantization per tensor / channel / 128x128 block as NumPy computes it, and the
DeepSeek-style safetensors loader on a file written here."""
import json
import struct

import numpy as np
import pytest

import llmm

ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes (python/requirements-test.txt) is the reference")
F8 = ml_dtypes.float8_e4m3fn


def test_every_code_decodes_as_ml_dtypes():
    codes = np.arange(256, dtype=np.uint8)
    got = llmm.from_fp8_bits(codes)
    want = codes.view(F8).astype(np.float32)
    np.testing.assert_array_equal(got, want)  # NaN where ml_dtypes has NaN (assert_array_equal matches NaNs)
    assert np.array_equal(np.signbit(got), np.signbit(want))


def test_cast_matches_ml_dtypes_bit_for_bit():
    rng = np.random.default_rng(0)
    edges = np.array([0.0, -0.0, 448, 449, 463.99, 464, 464.01, 479, 480, 1e6, -1e6, np.inf, -np.inf, np.nan,
                      2 ** -9, 2 ** -10, -(2 ** -10), 1.5 * 2 ** -9, 2 ** -6 * 1.0625, 2 ** -6 * 1.1875, 1.0625,
                      3e-38, 1e-45, 0.001], np.float32)
    mids = ((np.arange(0, 0x7E, dtype=np.uint8).view(F8).astype(np.float64) +
             np.arange(1, 0x7F, dtype=np.uint8).view(F8).astype(np.float64)) / 2).astype(np.float32)  # every tie
    bits = rng.integers(0, 2 ** 32, 1 << 20, dtype=np.uint64).astype(np.uint32).view(np.float32)  # every exponent
    scaled = (rng.standard_normal(1 << 16) * 100).astype(np.float32)
    for x in (edges, mids, np.nextafter(mids, np.float32(0)), np.nextafter(mids, np.float32(1000)), bits, scaled):
        with np.errstate(invalid="ignore", over="ignore"):  # NaN and overflow are what is tested
            want = x.astype(F8).view(np.uint8)
            clipped = np.where(np.isnan(x), x, np.clip(x, -448, 448)).astype(np.float32).astype(F8).view(np.uint8)
        got = llmm.to_fp8_bits(x)
        bad = np.nonzero(got != want)[0]
        assert bad.size == 0, (x[bad[:5]], got[bad[:5]], want[bad[:5]])
        # saturating: clip the finite values first, then ml_dtypes' cast (NaN stays NaN)
        np.testing.assert_array_equal(llmm.to_fp8_bits(x, saturate=True), clipped)


@pytest.mark.parametrize("kind", ["tensor", "channel", "block"])
def test_quantize_matches_numpy_and_ml_dtypes(kind):
    rng = np.random.default_rng(1)
    n, k = 300, 260  # partial 128-blocks in both directions
    w = (rng.standard_normal((n, k)) * np.exp(rng.uniform(-6, 3, (n, 1)))).astype(np.float32)
    w[7] = 0  # an all-zero row
    codes, scales = llmm.quantize_fp8(w, scale=kind)
    shape = {"tensor": (1, 1), "channel": (n, 1), "block": (3, 3)}[kind]
    assert codes.dtype == np.uint8 and codes.shape == (n, k) and scales.shape == shape
    # the same quantizer in NumPy: amax / 448 per group (1 for all-zero groups), clip, cast
    full = np.repeat(np.repeat(np.arange(shape[0] * shape[1]).reshape(shape), 128 if kind == "block" else n // shape[0]
                               if kind != "channel" else 1, 0)[:n], 128 if kind == "block" else k, 1)[:, :k]
    amax = np.zeros(shape[0] * shape[1], np.float32)
    np.maximum.at(amax, full.reshape(-1), np.abs(w).reshape(-1))
    want_scales = np.where(amax == 0, np.float32(1), amax / np.float32(448)).astype(np.float32)
    np.testing.assert_array_equal(scales.reshape(-1), want_scales)
    q = np.clip(w / want_scales[full], -448, 448).astype(F8).view(np.uint8)
    np.testing.assert_array_equal(codes, q)
    back = llmm.dequantize_fp8(codes, scales, scale=kind)
    assert np.all(np.abs(back - w) <= np.abs(w) / 16 + want_scales[full] * 2 ** -10 + 1e-30)
    assert (codes[7] & 0x7F == 0).all() and np.all(back[7] == 0)


def test_quantize_refusals_and_torch():
    w = np.ones((4, 8), np.float32)
    w[2, 3] = np.inf
    with pytest.raises(llmm.Error, match=r"quantize_fp8: weight \(2, 3\) is inf \(not finite\)"):
        llmm.quantize_fp8(w)
    with pytest.raises(llmm.Error, match="scale must be 'block', 'channel' or 'tensor', got 'row'"):
        llmm.quantize_fp8(np.ones((4, 8), np.float32), scale="row")
    with pytest.raises(llmm.Error, match=r"w must be \[n, k\]"):
        llmm.quantize_fp8(np.ones(8, np.float32))
    with pytest.raises(llmm.Error, match=r"channel scales of a \[4, 8\] weight are \[4, 1\], got 3 values"):
        llmm.dequantize_fp8(np.zeros((4, 8), np.uint8), np.ones(3, np.float32), scale="channel")
    torch = pytest.importorskip("torch")
    t = torch.randn(130, 140)
    codes, scales = llmm.quantize_fp8(t, scale="block")
    assert codes.dtype == torch.float8_e4m3fn and scales.dtype == torch.float32 and scales.shape == (2, 2)
    np.testing.assert_array_equal(codes.view(torch.uint8).numpy(), llmm.quantize_fp8(t.numpy())[0])
    np.testing.assert_array_equal(codes.float().numpy(), llmm.from_fp8_bits(codes))  # torch's decode agrees


def write_safetensors(path, tensors):
    header, blobs, at = {}, [], 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def test_load_deepseek_style_safetensors(tmp_path):
    rng = np.random.default_rng(2)
    w = rng.standard_normal((200, 300)).astype(np.float32)
    codes, scales = llmm.quantize_fp8(w, scale="block")
    path = tmp_path / "model.safetensors"
    name = "model.layers.0.mlp.gate_proj.weight"
    write_safetensors(path, {name: ("F8_E4M3", (200, 300), codes.tobytes()),
                             name + "_scale_inv": ("F32", scales.shape, scales.astype("<f4").tobytes()),
                             "chan.weight": ("F8_E4M3", (200, 300), codes.tobytes()),
                             "chan.weight_scale_inv": ("F32", (200,), np.full(200, 0.5, "<f4").tobytes()),
                             "bad.weight": ("F8_E4M3", (200, 300), codes.tobytes()),
                             "bad.weight_scale_inv": ("F32", (5,), np.ones(5, "<f4").tobytes()),
                             "neg.weight": ("F8_E4M3", (2, 3), bytes(6)),
                             "neg.weight_scale_inv": ("F32", (), struct.pack("<f", -1.0))})
    c, s, kind = llmm.load_fp8_safetensors(path, name)
    assert kind == "block"
    np.testing.assert_array_equal(c, codes)
    np.testing.assert_array_equal(s, scales)
    c, s, kind = llmm.load_fp8_safetensors(path, "chan.weight")
    assert kind == "channel" and s.shape == (200, 1)
    with pytest.raises(llmm.Error, match=r"scale shape \[5\] fits no scale kind of a \[200, 300\] weight"):
        llmm.load_fp8_safetensors(path, "bad.weight")
    with pytest.raises(llmm.Error, match="scale 0 of 'neg.weight' is -1.0"):
        llmm.load_fp8_safetensors(path, "neg.weight")
    with pytest.raises(llmm.Error, match="no tensor 'missing' in"):
        llmm.load_fp8_safetensors(path, "missing")
