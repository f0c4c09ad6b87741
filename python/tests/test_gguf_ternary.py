"""The ternary GGUF types that moved: PrismML's PQ2_0 (142) and PTQ1_0 (143), and GGML type 42,
which is upstream ggml's Q2_0 (group 64) or PrismML's first Q2_0 (group 128), told apart by size.
GGUF files are written here byte by byte following the GGUF spec (gguf-py's GGUFWriter cannot
write types it does not know); the writer is first checked against gguf-py's GGUFReader on
standard types. Weights are encoded and decoded by NumPy code written here from the formats'
descriptions, independently of llmm's C++ converters. CPU only."""
import struct

import numpy as np
import pytest

import llmm

RNG = np.random.default_rng(50)
ALIGN = 32


# ---------------------------------------------------------------------------------------------
# A GGUF writer (version 3, little-endian) that takes raw tensor bytes of any type id.

def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def write_gguf(path, tensors, *, alignment=None, pad_last=True, trailing=b"", extra_kv=()):
    """tensors: (name, GGML type id, GGUF shape (row length first), raw bytes). The metadata holds
    an architecture string, a string array and a float array (for the reader to skip), and
    general.alignment when given. Each tensor's data starts at a multiple of the alignment."""
    align = alignment or ALIGN
    kv = [gguf_string("general.architecture") + struct.pack("<I", 8) + gguf_string("llama"),
          gguf_string("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 3)
          + b"".join(gguf_string(t) for t in ("<s>", "a", "bc")),
          gguf_string("tokenizer.ggml.scores") + struct.pack("<IIQ", 9, 6, 3) + struct.pack("<3f", 0, -1, -2)]
    if alignment is not None:
        kv.append(gguf_string("general.alignment") + struct.pack("<II", 4, alignment))
    kv += list(extra_kv)
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)) + b"".join(kv)
    data, infos = b"", b""
    for i, (name, type_id, shape, raw) in enumerate(tensors):
        infos += gguf_string(name) + struct.pack("<I", len(shape)) + struct.pack(f"<{len(shape)}Q", *shape)
        infos += struct.pack("<IQ", type_id, len(data))
        data += raw
        if pad_last or i + 1 < len(tensors):
            data += bytes(-len(data) % align)
    head += infos
    head += bytes(-len(head) % align)
    path.write_bytes(head + data + trailing)


def test_the_writer_agrees_with_gguf_py(tmp_path):
    gguf = pytest.importorskip("gguf", reason="gguf-py checks the test's own writer")
    w = np.arange(12, dtype=np.float32)
    raw = bytes(range(66)) * 2
    path = tmp_path / "w.gguf"
    write_gguf(path, [("a", 0, (3, 4), w.tobytes()), ("b", 35, (256, 2), raw)], alignment=64)
    r = gguf.GGUFReader(str(path))
    assert r.fields["general.alignment"].parts[-1][0] == 64
    assert [t.name for t in r.tensors] == ["a", "b"]
    assert np.array_equal(r.tensors[0].data, w.reshape(4, 3))
    assert r.tensors[1].tensor_type == gguf.GGMLQuantizationType.TQ2_0
    assert bytes(r.tensors[1].data.reshape(-1)) == raw


# ---------------------------------------------------------------------------------------------
# Encoders and decoders written from the formats' descriptions.

def random_ternary(n, k, group):
    """codes 0..2 [n, k] and f16 scales [n, k // group] (positive, exactly representable)."""
    codes = RNG.integers(0, 3, size=(n, k)).astype(np.uint8)
    d = (RNG.integers(1, 1000, size=(n, k // group)) * 2.0 ** -11).astype(np.float16)
    return codes, d


def values(codes, d, group):
    return (codes.astype(np.float32) - 1) * np.repeat(d.astype(np.float32), group, axis=1)


def encode_q2(codes, d, group):
    """The Q2_0 family's blocks {d, qs[group / 4]}: weight j at bits 2 (j % 4) of qs[j / 4]."""
    n, k = codes.shape
    c = codes.reshape(n, k // group, group // 4, 4)
    qs = (c[..., 0] | c[..., 1] << 2 | c[..., 2] << 4 | c[..., 3] << 6).astype(np.uint8)
    return np.concatenate([d.reshape(n, -1, 1).view(np.uint8), qs], axis=2).tobytes()


def decode_q2(raw, n, k, group):
    blocks = np.frombuffer(raw, np.uint8).reshape(n, k // group, 2 + group // 4)
    d = blocks[..., :2].copy().view(np.float16)[..., 0]
    qs = blocks[..., 2:]
    codes = np.stack([(qs >> s) & 3 for s in (0, 2, 4, 6)], axis=-1).reshape(n, k)
    return values(codes, d, group)


def ptq1_0_weight_order():
    """PTQ1_0's weights in the order of the base-3 digits stored: byte m < 16 of qs holds weights
    m + 16 i, byte 16 + m holds 80 + m + 8 i (i = 0..4, most significant digit first), and byte h
    of qh holds 120 + h + 2 i (i = 0..3)."""
    qs = [[m + 16 * i for i in range(5)] for m in range(16)] + [[80 + m + 8 * i for i in range(5)] for m in range(8)]
    qh = [[120 + h + 2 * i for i in range(4)] for h in range(2)]
    return qs, qh


def pack_base3(digits):
    """Digits most significant first, times 256 / 243 rounded up (a 4-digit byte gets a 0 last)."""
    q = 0
    for x in digits:
        q = q * 3 + int(x)
    if len(digits) == 4:
        q *= 3
    return (q * 256 + 242) // 243


def encode_ptq1_0(codes, d):
    n, k = codes.shape
    qs_order, qh_order = ptq1_0_weight_order()
    out = bytearray()
    for r in range(n):
        for b in range(k // 128):
            c = codes[r, 128 * b:128 * (b + 1)]
            out += bytes(pack_base3(c[idx]) for idx in qs_order) + bytes(pack_base3(c[idx]) for idx in qh_order)
            out += d[r, b].tobytes()
    return bytes(out)


def decode_ptq1_0(raw, n, k):
    blocks = np.frombuffer(raw, np.uint8).reshape(n, k // 128, 28)
    d = blocks[..., 26:].copy().view(np.float16)[..., 0]
    codes = np.zeros((n, k // 128, 128), np.uint8)
    qs_order, qh_order = ptq1_0_weight_order()
    for byte, idx in enumerate(qs_order + qh_order):
        b = blocks[..., byte].astype(np.uint16)
        for i, j in enumerate(idx):
            codes[..., j] = ((b * 3 ** i) % 256 * 3) >> 8  # digit i: llama.cpp's fixed-point base 3
    return values(codes.reshape(n, k), d, 128)


def load_dense(path, name, n, k):
    """The weight load_tq2_gguf makes, as float32 [n, k] (gemm_tq2 with the identity)."""
    weight = llmm.load_tq2_gguf(path, name)
    try:
        assert (weight.n, weight.k) == (n, k)
        return llmm.gemm_tq2(weight, np.eye(k, dtype=np.float32)).T
    finally:
        llmm.release_tq2(weight)


# ---------------------------------------------------------------------------------------------

def test_encoders_and_decoders_agree_on_hand_built_blocks():
    # PTQ1_0: qs[3] = 205 holds digits 2, 1, 0, 1, 2; qh[1] = 73 holds 0, 2, 1, 2.
    raw = bytearray(28)
    raw[3], raw[25] = 205, 73
    raw[26:28] = np.float16(0.5).tobytes()
    w = decode_ptq1_0(bytes(raw), 1, 128)[0]
    assert [w[j] for j in (3, 19, 35, 51, 67)] == [0.5, 0, -0.5, 0, 0.5]
    assert [w[j] for j in (121, 123, 125, 127)] == [-0.5, 0.5, 0, 0.5]
    assert pack_base3([2, 1, 0, 1, 2]) == 205 and pack_base3([0, 2, 1, 2]) == 73
    # Q2_0 family: byte 0x92 holds codes 2, 0, 1, 2.
    raw = np.float16(2).tobytes() + bytes([0x92]) + bytes([0x55]) * 15
    assert list(decode_q2(raw, 1, 64, 64)[0, :5]) == [2, -2, 0, 2, 0]


@pytest.mark.parametrize("kind,type_id", [("PQ2_0", 142), ("PTQ1_0", 143)])
def test_prism_g128_types_load_losslessly(tmp_path, kind, type_id):
    n, k = 24, 640
    codes, d = random_ternary(n, k, 128)
    raw = encode_q2(codes, d, 128) if kind == "PQ2_0" else encode_ptq1_0(codes, d)
    theirs = decode_q2(raw, n, k, 128) if kind == "PQ2_0" else decode_ptq1_0(raw, n, k)
    assert np.array_equal(theirs, values(codes, d, 128))  # the test's encoder and decoder agree
    path = tmp_path / f"{kind}.gguf"
    norm = np.ones(k, np.float32).tobytes()
    write_gguf(path, [("blk.0.attn_norm.weight", 0, (k,), norm), ("blk.0.ffn_up.weight", type_id, (k, n), raw),
                      ("blk.0.ffn_down.weight", type_id, (k, n), raw)], pad_last=False)
    assert np.array_equal(load_dense(path, "blk.0.ffn_up.weight", n, k), theirs)
    assert np.array_equal(load_dense(path, "blk.0.ffn_down.weight", n, k), theirs)  # the last, unpadded
    assert llmm.tq2_from_gguf(raw, kind, n, k) == llmm.quantize_tq2(theirs, "absmax")  # every block has a +-d
    with pytest.raises(llmm.Error, match="is F32, not TQ2_0, TQ1_0, Q2_0, PQ2_0 or PTQ1_0"):
        llmm.load_tq2_gguf(path, "blk.0.attn_norm.weight")


def test_type_42_is_told_apart_by_size_both_ways(tmp_path):
    n, k = 4, 640  # group 64: 720 bytes, padded to 736; group 128: 680, padded to 704
    codes, d64 = random_ternary(n, k, 64)
    d64[:, 1::2] = d64[:, ::2]  # pairs of group-64 blocks share their scale
    upstream = encode_q2(codes, d64, 64)
    codes128, d128 = random_ternary(n, k, 128)
    prism_first = encode_q2(codes128, d128, 128)
    assert (len(upstream), len(prism_first)) == (720, 680)
    path = tmp_path / "type42.gguf"
    write_gguf(path, [("up", 42, (k, n), upstream), ("prism", 42, (k, n), prism_first),
                      ("up_last", 42, (k, n), upstream)], pad_last=False)
    assert np.array_equal(load_dense(path, "up", n, k), decode_q2(upstream, n, k, 64))
    assert np.array_equal(load_dense(path, "prism", n, k), decode_q2(prism_first, n, k, 128))
    assert np.array_equal(load_dense(path, "up_last", n, k), decode_q2(upstream, n, k, 64))


def test_type_42_refusals(tmp_path):
    # [1, 1024]: 288 bytes as group 64, 272 as group 128: 16 apart, under one 32-byte step.
    codes, d = random_ternary(1, 1024, 64)
    d[:, 1::2] = d[:, ::2]
    small = encode_q2(codes, d, 64)
    path = tmp_path / "small.gguf"
    write_gguf(path, [("w", 42, (1024, 1), small)])
    with pytest.raises(llmm.Error, match=r"tensor 'w' \(\[1, 1024\], GGML type 42\) is ambiguous: 288 bytes as "
                                         r"upstream Q2_0 \(group 64\) and 272 bytes as PrismML's first Q2_0 \(group 128\) "
                                         r"both fit its 288 bytes up to the next tensor or the file's end \(alignment 32\)"):
        llmm.load_tq2_gguf(path, "w")
    write_gguf(path, [("w", 42, (1024, 1), small)], alignment=8)  # a finer alignment tells them apart
    assert np.array_equal(load_dense(path, "w", 1, 1024), decode_q2(small, 1, 1024, 64))
    write_gguf(path, [("w", 42, (1024, 1), small)], alignment=8, trailing=bytes(40))
    with pytest.raises(llmm.Error, match=r"fits neither 288 bytes as upstream Q2_0 \(group 64\) and 272 bytes as "
                                         r"PrismML's first Q2_0 \(group 128\): it has 328 bytes"):
        llmm.load_tq2_gguf(path, "w")
    # Group-64 blocks 2 and 3 of row 1 with different scales: named with both scales.
    codes, d = random_ternary(2, 1280, 64)
    d[:, 1::2] = d[:, ::2]
    d[1, 2], d[1, 3] = 1.0, 0.5
    path = tmp_path / "scales.gguf"
    write_gguf(path, [("w", 42, (1280, 2), encode_q2(codes, d, 64))])
    with pytest.raises(llmm.Error, match=r"Q2_0 \(group 64\) row 1, blocks 2 and 3 have different scales \(f16 bits "
                                         r"0x3c00 = 1 and 0x3800 = 0.5\): a TQ2_0_g128 block has one scale"):
        llmm.load_tq2_gguf(path, "w")


def test_q2_0_group64_plus_two_and_zero_halves():
    codes, d = random_ternary(2, 256, 64)
    d[:, 1::2] = d[:, ::2]
    codes[0, 64:128] = 1  # an all-zero group-64 block: its own scale does not matter
    d[0, 1] = 0
    raw = encode_q2(codes, d, 64)
    got = llmm.dequantize_tq2(llmm.tq2_from_gguf(raw, "Q2_0", 2, 256), 2, 256)
    assert np.array_equal(got, decode_q2(raw, 2, 256, 64))
    codes[1, 130] = 3  # +2 x d: not ternary
    with pytest.raises(llmm.Error, match=r"code 3 \(\+2\) in row 1, block 2, byte 0: TQ2_0_g128 holds ternary"):
        llmm.tq2_from_gguf(encode_q2(codes, d, 64), "Q2_0", 2, 256)


def test_prism_refusals_name_the_problem():
    codes, d = random_ternary(3, 256, 128)
    pq2 = bytearray(encode_q2(codes, d, 128))
    with pytest.raises(llmm.Error, match=r"203 bytes given, an \[3, 256\] PQ2_0 tensor is 204"):
        llmm.tq2_from_gguf(bytes(pq2[:-1]), "PQ2_0", 3, 256)
    pq2[34 * 3 + 2 + 7] |= 0x30  # row 1, block 1, byte 7: code 3
    with pytest.raises(llmm.Error, match=r"code 3 \(\+2\) in row 1, block 1, byte 7"):
        llmm.tq2_from_gguf(bytes(pq2), "PQ2_0", 3, 256)
    ptq = bytearray(encode_ptq1_0(codes, d))
    ptq[28 * 4 + 26:28 * 4 + 28] = np.float16(np.inf).tobytes()  # row 2, block 0
    with pytest.raises(llmm.Error, match=r"non-finite scale \(f16 bits 0x7c00\) in row 2, block 0"):
        llmm.tq2_from_gguf(bytes(ptq), "PTQ1_0", 3, 256)
    with pytest.raises(llmm.Error, match=r"k 192 is not a multiple of 128"):
        llmm.tq2_from_gguf(bytes(ptq), "PTQ1_0", 4, 192)


def test_reader_refusals(tmp_path):
    path = tmp_path / "x.gguf"
    path.write_bytes(b"GGML" + bytes(60))
    with pytest.raises(llmm.Error, match="is not a GGUF file"):
        llmm.load_tq2_gguf(path, "w")
    path.write_bytes(b"GGUF" + struct.pack(">I", 3) + bytes(16))
    with pytest.raises(llmm.Error, match="a big-endian GGUF file is not supported"):
        llmm.load_tq2_gguf(path, "w")
    path.write_bytes(b"GGUF" + struct.pack("<I", 1) + bytes(16))
    with pytest.raises(llmm.Error, match="GGUF version 1 is not supported"):
        llmm.load_tq2_gguf(path, "w")
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gguf_string("x") + struct.pack("<I", 13) + bytes(8))
    with pytest.raises(llmm.Error, match="unknown metadata value type 13"):
        llmm.load_tq2_gguf(path, "w")
    write_gguf(path, [("w", 143, (256, 3), bytes(168))], alignment=48)
    with pytest.raises(llmm.Error, match="general.alignment 48 is not a power of two"):
        llmm.load_tq2_gguf(path, "w")
    write_gguf(path, [("w", 143, (256, 3), bytes(168))])
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(llmm.Error, match=r"152 bytes given, an \[3, 256\] PTQ1_0 tensor is 168"):
        llmm.load_tq2_gguf(path, "w")
    path.write_bytes(path.read_bytes()[:50])
    with pytest.raises(llmm.Error, match="ends inside its header"):
        llmm.load_tq2_gguf(path, "w")


def test_hadamard_folded_weights_are_refused(tmp_path):
    """Ternary-Bonsai-2's prism.hadamard.* metadata: by default the weights it lists are refused
    (loaded bare they give wrong results; test_hadamard.py loads them with their rotation), the
    others load; without a list every weight is refused."""
    n, k = 8, 256
    codes, d = random_ternary(n, k, 128)
    raw = encode_q2(codes, d, 128)
    names = gguf_string("prism.hadamard.weight_names") + struct.pack("<IIQ", 9, 8, 2) + \
        gguf_string("blk.0.ffn_down.weight") + gguf_string("blk.1.attn_qkv.weight")
    block = gguf_string("prism.hadamard.block_size") + struct.pack("<II", 4, 1024)
    tensors = [("blk.0.ffn_up.weight", 142, (k, n), raw), ("blk.0.ffn_down.weight", 142, (k, n), raw)]
    path = tmp_path / "bonsai.gguf"
    write_gguf(path, tensors, extra_kv=[block, names])
    assert np.array_equal(load_dense(path, "blk.0.ffn_up.weight", n, k), values(codes, d, 128))
    with pytest.raises(llmm.Error, match=r"'blk.0.ffn_down.weight' is listed in prism.hadamard.weight_names: a "
                                         r"Hadamard-folded weight \(block size 1024\)"):
        llmm.load_tq2_gguf(path, "blk.0.ffn_down.weight")
    write_gguf(path, tensors, extra_kv=[block])
    with pytest.raises(llmm.Error, match="may be Hadamard-folded \\(the file has prism.hadamard.\\* keys but no"):
        llmm.load_tq2_gguf(path, "blk.0.ffn_up.weight")
