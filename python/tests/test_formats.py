"""Ternary weights from other tools: GGUF TQ2_0 / TQ1_0 checked bit for bit against gguf-py's own
quantize and dequantize (an independent implementation), files written by gguf-py's GGUFWriter,
and the Hugging Face BitNet packing through a safetensors file. CPU only (no GPU needed)."""
import numpy as np
import pytest

import llmm

gguf = pytest.importorskip("gguf", reason="gguf-py (pip install gguf) is the independent reference")


def ternary(n, k, seed):
    """Random ternary x (per 256-block f16-exact scale) float32 weights: what TQ formats hold."""
    rng = np.random.default_rng(seed)
    codes = rng.integers(-1, 2, size=(n, k)).astype(np.float32)
    scales = np.ldexp(rng.integers(1, 1000, size=(n, k // 256)).astype(np.float32), -12)
    return codes * np.repeat(scales, 256, axis=1)


@pytest.mark.parametrize("kind", ["TQ2_0", "TQ1_0"])
def test_gguf_conversion_matches_gguf_py_bit_for_bit(kind):
    qtype = getattr(gguf.GGMLQuantizationType, kind)
    w = ternary(512, 2048, 1 if kind == "TQ2_0" else 2)  # 2^20 weights
    q = gguf.quants.quantize(w, qtype)                   # gguf-py's bytes, [n, bytes per row]
    theirs = gguf.quants.dequantize(q, qtype).astype(np.float32)
    assert np.array_equal(theirs, w)  # the weights are exactly representable in both formats
    aos = llmm.tq2_from_gguf(q.tobytes(), kind, 512, 2048)
    assert len(aos) == 512 * 2048 // 128 * 34
    ours = llmm.dequantize_tq2(aos, 512, 2048)
    assert np.array_equal(ours, theirs)


def test_gguf_refusals_name_the_problem():
    q = gguf.quants.quantize(ternary(2, 256, 3), gguf.GGMLQuantizationType.TQ2_0)
    with pytest.raises(llmm.Error, match=r"131 bytes given, an \[2, 256\] TQ2_0 tensor is 132"):
        llmm.tq2_from_gguf(q.tobytes()[:-1], "TQ2_0", 2, 256)
    bad = bytearray(q.tobytes())
    bad[66 + 3] |= 0xC0  # row 1, block 0, byte 3: a code 3
    with pytest.raises(llmm.Error, match="invalid code 3 in row 1, block 0, byte 3"):
        llmm.tq2_from_gguf(bytes(bad), "TQ2_0", 2, 256)
    with pytest.raises(llmm.Error, match=r"kind must be 'TQ2_0', 'TQ1_0', 'Q2_0_g128', 'PQ2_0', 'PTQ1_0' or 'Q2_0' "
                                         r"\(group 64\), got 'Q4_0'"):
        llmm.tq2_from_gguf(q.tobytes(), "Q4_0", 2, 256)


@pytest.mark.parametrize("kind", ["TQ2_0", "TQ1_0"])
def test_load_tq2_gguf_reads_what_ggufwriter_wrote(tmp_path, kind):
    qtype = getattr(gguf.GGMLQuantizationType, kind)
    n, k = 96, 768
    w = ternary(n, k, 4)
    path = tmp_path / "layer.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tensor("blk.0.ffn_up.weight", gguf.quants.quantize(w, qtype), raw_dtype=qtype)
    writer.add_tensor("blk.0.norm.weight", np.ones(k, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    weight = llmm.load_tq2_gguf(path, "blk.0.ffn_up.weight")
    assert (weight.n, weight.k) == (n, k)
    x = np.eye(k, dtype=np.float32)[:40]  # the CPU reference: out[m, j] = W[j, m] exactly
    assert np.array_equal(llmm.gemm_tq2(weight, x), w[:, :40].T)
    with pytest.raises(llmm.Error, match="is F32, not TQ2_0, TQ1_0, Q2_0, PQ2_0 or PTQ1_0"):
        llmm.load_tq2_gguf(path, "blk.0.norm.weight")
    with pytest.raises(llmm.Error, match="no tensor 'nope'"):
        llmm.load_tq2_gguf(path, "nope")
    llmm.release_tq2(weight)


def bitnet_pack(codes):
    """The Hugging Face BitNet packing of int codes {-1, 0, 1} [out, in]: row r in packed row
    r % (out / 4) at bits 2 * (r // (out / 4))."""
    out, inn = codes.shape
    u = (codes + 1).astype(np.uint8)
    p = np.zeros((out // 4, inn), dtype=np.uint8)
    for i in range(4):
        p |= u[i * (out // 4):(i + 1) * (out // 4)] << (2 * i)
    return p


def test_bitnet_safetensors_round_trip(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    rng = np.random.default_rng(5)
    codes = rng.integers(-1, 2, size=(64, 256))
    scale = np.float32(3.25)  # BitNet divides the layer's output by it
    path = tmp_path / "model.safetensors"
    safetensors_numpy.save_file({"layers.0.mlp.up_proj.weight": bitnet_pack(codes),
                                 "layers.0.mlp.up_proj.weight_scale": np.array([scale], dtype=np.float32)}, str(path))
    weight = llmm.load_bitnet_safetensors(path, "layers.0.mlp.up_proj.weight")
    assert (weight.n, weight.k) == (64, 256)
    d = np.float32(np.float16(1 / scale))  # the one rounding: 1 / weight_scale to f16
    assert abs(d * scale - 1) <= 2 ** -11
    x = np.eye(256, dtype=np.float32)[:8]
    assert np.array_equal(llmm.gemm_tq2(weight, x), (codes[:, :8].T * d).astype(np.float32))
    llmm.release_tq2(weight)
    with pytest.raises(llmm.Error, match="finite and > 0"):
        llmm.tq2_from_bitnet(bitnet_pack(codes), 0.0)
    bad = bitnet_pack(codes)
    bad[2, 9] = 0xFF
    with pytest.raises(llmm.Error, match="invalid code 3 at packed row 2, column 9"):
        llmm.tq2_from_bitnet(bad, 1.0)
