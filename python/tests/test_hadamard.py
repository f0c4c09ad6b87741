"""Ternary-Bonsai-2's Hadamard fold: the rotation (llmm.HadamardRotation) against a float64
reference built here by the Kronecker recursion (independent of llmm's popcount construction),
its reading from prism.hadamard.* GGUF metadata, and a folded weight through
TernaryLinear.from_gguf against the float64 product W' (H (s * x)). GGUF files are written with
test_gguf_ternary's byte-level writer; the CUDA case skips without a GPU."""
import struct

import numpy as np
import pytest

import llmm
from conftest import need_cuda_torch, need_torch
from test_gguf_ternary import encode_q2, gguf_string, random_ternary, values, write_gguf

RNG = np.random.default_rng(51)


def kronecker_hadamard(block):
    h = np.ones((1, 1))
    while h.shape[0] < block:
        h = np.block([[h, h], [h, -h]])
    return h / np.sqrt(block)


def reference(x, signs, block):
    """H (s * x) blockwise over the last axis, float64."""
    k = signs.size
    hb = np.kron(np.eye(k // block), kronecker_hadamard(block))  # block diagonal [k, k]
    return (x.astype(np.float64) * signs) @ hb.T


def random_signs(k):
    return RNG.choice([-1.0, 1.0], size=k)


@pytest.mark.parametrize("block,k", [(2, 2), (4, 12), (64, 192), (128, 128), (1024, 2048)])
def test_rotation_numpy_matches_the_kronecker_reference(block, k):
    s = random_signs(k)
    rot = llmm.HadamardRotation(s, block)
    assert np.allclose(rot.matrix() @ rot.matrix(), np.eye(block), atol=1e-12)
    assert np.array_equal(rot.matrix(), kronecker_hadamard(block))
    x = RNG.standard_normal((3, k))
    assert np.allclose(rot(x), reference(x, s, block), rtol=0, atol=1e-12)
    # orthonormal: applying H then undoing (H, then the signs) gives x back
    back = rot.matrix() @ rot(x).reshape(3, k // block, block).transpose(0, 2, 1)
    assert np.allclose(back.transpose(0, 2, 1).reshape(3, k) * s, x, atol=1e-12)


def test_rotation_torch_matches_the_reference_in_each_dtype():
    torch = need_torch()
    k, block = 768, 256
    s = random_signs(k)
    rot = llmm.HadamardRotation(s, block)
    x64 = RNG.standard_normal((2, 3, k))
    want = reference(x64, s, block)
    for dt, tol in ((torch.float32, 1e-5), (torch.float16, 2e-3), (torch.bfloat16, 1.6e-2)):
        x = torch.from_numpy(x64).to(dt)
        got = rot(x)
        assert got.dtype == dt and got.shape == x.shape
        # the input's own rounding, then the rotation in f32 and one rounding to dt
        exact = reference(x.double().numpy(), s, block)
        err = np.abs(got.double().numpy() - exact).max() / np.abs(exact).max()
        assert err < tol, (dt, err)
        assert np.abs(got.double().numpy() - want).max() / np.abs(want).max() < 2 * tol + 1e-6


def test_rotation_torch_16_bit_path_where_h_is_exact():
    """Blocks that are powers of 4 rotate bf16 / f16 x by a matmul in x's own type (H = +-2^-j is
    exact there); other blocks go through f32. Both round once to x's type."""
    torch = need_torch()
    from llmm.hadamard import pick_operands

    for block, exact16 in ((256, True), (128, False)):
        rot = llmm.HadamardRotation(random_signs(512), block)
        ops = rot.tensors("cpu")
        for dt in (torch.bfloat16, torch.float16):
            signs, h, perm = pick_operands(ops.get, dt)
            assert (signs.dtype == dt and h.dtype == dt) == exact16 and perm is None
            if exact16:
                assert torch.equal(h.double(), torch.from_numpy(kronecker_hadamard(block)))
    # one matrix per (block, dtype, device), shared by every rotation
    a, b = llmm.HadamardRotation(np.ones(256), 256).tensors("cpu"), llmm.HadamardRotation(-np.ones(512), 256).tensors("cpu")
    assert a["matrix_bf16"] is b["matrix_bf16"] and a["matrix_f32"] is b["matrix_f32"]


def test_rotation_propagates_nan_and_inf_to_its_block_only():
    x = RNG.standard_normal((2, 8))
    x[0, 1], x[1, 6] = np.nan, np.inf
    y = llmm.HadamardRotation(np.ones(8), 4)(x)
    assert np.isnan(y[0, :4]).all() and np.isfinite(y[0, 4:]).all()
    assert np.isfinite(y[1, :4]).all() and not np.isfinite(y[1, 4:]).any()


@pytest.mark.parametrize("args,match", [
    ((np.ones(8), 3), "block 3 is not a power of two"),
    ((np.ones(8), 1), "block 1 is not a power of two"),
    ((np.ones(12), 8), "12 signs is not a positive multiple of the block 8"),
    ((np.zeros(0), 4), "0 signs"),
    ((np.array([1, -1, 0, 1.0]), 4), r"sign 2 is 0\.0, not \+1 or -1"),
])
def test_rotation_refusals(args, match):
    with pytest.raises(llmm.Error, match=match):
        llmm.HadamardRotation(*args)


def test_rotation_refuses_a_width_it_was_not_made_for():
    rot = llmm.HadamardRotation(np.ones(8), 4)
    with pytest.raises(llmm.Error, match="x has 4 features on its last axis, the rotation 8"):
        rot(np.ones((2, 4)))
    torch = need_torch()
    with pytest.raises(llmm.Error, match="x has 16 features"):
        rot(torch.ones(2, 16))
    with pytest.raises(llmm.Error, match="x is torch.int32"):
        rot(torch.ones(2, 8, dtype=torch.int32))


# ---------------------------------------------------------------------------------------------
# prism.hadamard.* metadata, as PrismML's converter writes it (types: 4 u32, 5 i32, 7 bool,
# 8 string, 9 array).

def kv_u32(key, v):
    return gguf_string(key) + struct.pack("<II", 4, v)


def kv_str(key, v):
    return gguf_string(key) + struct.pack("<I", 8) + gguf_string(v)


def kv_bool(key, v):
    return gguf_string(key) + struct.pack("<I?", 7, v)


def kv_strs(key, vs):
    return gguf_string(key) + struct.pack("<IIQ", 9, 8, len(vs)) + b"".join(gguf_string(v) for v in vs)


def kv_i32s(key, vs):
    return gguf_string(key) + struct.pack("<IIQ", 9, 5, len(vs)) + struct.pack(f"<{len(vs)}i", *vs)


def prism_metadata(names, widths, signs, *, block=256, version=1, transform="normalized-sylvester-walsh-hadamard",
                   axis="input-last-dimension", sign_mode="explicit", inverse=("token_embd.weight",), grouped=True,
                   drop=()):
    kv = {"version": kv_u32("prism.hadamard.version", version),
          "block_size": kv_u32("prism.hadamard.block_size", block),
          "transform": kv_str("prism.hadamard.transform", transform),
          "axis": kv_str("prism.hadamard.axis", axis),
          "sign_mode": kv_str("prism.hadamard.sign_mode", sign_mode),
          "weight_names": kv_strs("prism.hadamard.weight_names", list(names)),
          "inverse_weight_names": kv_strs("prism.hadamard.inverse_weight_names", list(inverse)),
          "sign_widths": kv_i32s("prism.hadamard.sign_widths", list(widths)),
          "sign_values": kv_i32s("prism.hadamard.sign_values", [int(v) for v in signs]),
          "gdn_v_grouped": kv_bool("prism.hadamard.gdn_v_grouped", grouped)}
    return [v for key, v in kv.items() if key not in drop]


N, K, K2 = 24, 512, 768  # two activation widths, as Bonsai-2's hidden and ffn widths


def bonsai_file(tmp_path, extra=(), **meta):
    """A GGUF with folded ffn_up ([N, K]) and ffn_down ([N, K2]) and an unfolded attn_q ([N, K]),
    all PQ2_0 (type 142): returns (path, {name: float64 W'}, {width: signs})."""
    signs = {K: random_signs(K), K2: random_signs(K2)}
    tensors, dense = [], {}
    for name, k in (("blk.0.ffn_up.weight", K), ("blk.0.ffn_down.weight", K2), ("blk.0.attn_q.weight", K)):
        codes, d = random_ternary(N, k, 128)
        tensors.append((name, 142, (k, N), encode_q2(codes, d, 128)))
        dense[name] = values(codes, d, 128).astype(np.float64)
    md = prism_metadata(["blk.0.ffn_up.weight", "blk.0.ffn_down.weight"], [K, K2],
                        np.concatenate([signs[K], signs[K2]]), **meta)
    path = tmp_path / "bonsai2.gguf"
    write_gguf(path, tensors + list(extra), extra_kv=md)
    return path, dense, signs


def test_folded_weights_through_ternary_linear_match_float64(tmp_path):
    torch = need_torch()
    import llmm.torch_ops as T

    path, dense, signs = bonsai_file(tmp_path)
    x = RNG.standard_normal((5, K2))
    for name, k in (("blk.0.ffn_up.weight", K), ("blk.0.ffn_down.weight", K2), ("blk.0.attn_q.weight", K)):
        lin = T.TernaryLinear.from_gguf(path, name)
        xk = x[:, :k]
        folded = name != "blk.0.attn_q.weight"
        assert (lin.rotation is not None) == folded
        want = dense[name] @ (reference(xk, signs[k], 256).T if folded else xk.T)
        got = lin(torch.from_numpy(xk).float()).double().numpy().T
        assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max(), name
        if folded:  # and the bare weight is not the layer: the fold matters
            bare = dense[name] @ xk.T
            assert np.abs(bare - want).max() > 0.1 * np.abs(want).max()
            assert "rotation=HadamardRotation(k=" in repr(lin)


def test_load_tq2_gguf_returns_the_rotation_or_refuses(tmp_path):
    path, dense, signs = bonsai_file(tmp_path)
    with pytest.raises(llmm.Error, match=r"'blk.0.ffn_up.weight' is listed in prism.hadamard.weight_names: a "
                                         r"Hadamard-folded weight \(block size 256\).*hadamard='return'"):
        llmm.load_tq2_gguf(path, "blk.0.ffn_up.weight")
    w, rot = llmm.load_tq2_gguf(path, "blk.0.ffn_down.weight", hadamard="return")
    assert (w.n, w.k, rot.k, rot.block) == (N, K2, K2, 256) and np.array_equal(rot.signs, signs[K2])
    llmm.release_tq2(w)
    w, rot = llmm.load_tq2_gguf(path, "blk.0.attn_q.weight", hadamard="return")
    assert rot is None
    llmm.release_tq2(w)
    with pytest.raises(llmm.Error, match="hadamard must be 'refuse' or 'return', got 'apply'"):
        llmm.load_tq2_gguf(path, "blk.0.attn_q.weight", hadamard="apply")


def test_identity_sign_mode(tmp_path):
    path, _, _ = bonsai_file(tmp_path, sign_mode="identity", drop=("sign_widths", "sign_values"))
    _, rot = llmm.load_tq2_gguf(path, "blk.0.ffn_up.weight", hadamard="return")
    assert np.array_equal(rot.signs, np.ones(K))


@pytest.mark.parametrize("meta,name,match", [
    (dict(version=2), "blk.0.ffn_up.weight", r"prism.hadamard.version 2; llmm reads version 1"),
    (dict(transform="randomized-hadamard"), "blk.0.ffn_up.weight",
     "prism.hadamard.transform is 'randomized-hadamard'; llmm applies only 'normalized-sylvester-walsh-hadamard'"),
    (dict(axis="output"), "blk.0.ffn_up.weight", "prism.hadamard.axis is 'output'"),
    (dict(sign_mode="seeded"), "blk.0.ffn_up.weight", "prism.hadamard.sign_mode 'seeded'"),
    (dict(block=384), "blk.0.ffn_up.weight", "block_size 384 is not a power of two"),
    (dict(block=1024), "blk.0.ffn_up.weight", "has 512 input features, not a multiple of prism.hadamard.block_size 1024"),
    (dict(drop=("version",)), "blk.0.ffn_up.weight", "keys but no prism.hadamard.version"),
    (dict(drop=("sign_values",)), "blk.0.ffn_up.weight", "keys but no prism.hadamard.sign_values"),
    (dict(drop=("weight_names",)), "blk.0.attn_q.weight", "may be Hadamard-folded .* no prism.hadamard.weight_names"),
    (dict(inverse=("blk.0.attn_q.weight",)), "blk.0.attn_q.weight", "inverse_weight_names: its rows are rotated"),
])
def test_metadata_refusals(tmp_path, meta, name, match):
    path, _, _ = bonsai_file(tmp_path, **meta)
    with pytest.raises(llmm.Error, match=match):
        llmm.load_tq2_gguf(path, name, hadamard="return")


def test_sign_table_refusals(tmp_path):
    codes, d = random_ternary(N, K, 128)
    raw = encode_q2(codes, d, 128)
    path = tmp_path / "signs.gguf"
    cases = [([K, K2], np.ones(K + K2 - 1), r"sign_widths sum to 1280, sign_values holds 1279"),
             ([K2], np.ones(K2), r"has 512 input features and prism.hadamard.sign_widths \[768\] has no sign vector"),
             ([K, K], np.ones(2 * K), r"sign_widths \[512, 512\] has 2 sign vector"),
             ([K], np.r_[np.ones(K - 1), 2], r"sign 511 is 2.0, not \+1 or -1")]
    for widths, signs, match in cases:
        write_gguf(path, [("blk.0.ffn_up.weight", 142, (K, N), raw)],
                   extra_kv=prism_metadata(["blk.0.ffn_up.weight"], widths, signs))
        with pytest.raises(llmm.Error, match=match):
            llmm.load_tq2_gguf(path, "blk.0.ffn_up.weight", hadamard="return")


def ssm_out_file(tmp_path, grouped=True, heads=True):
    """A folded gated-DeltaNet ssm_out [N, K] (8 value heads of 64 over 2 key heads: rep 4) and the
    head counts under the file's architecture ("llama", write_gguf's)."""
    codes, d = random_ternary(N, K, 128)
    signs = random_signs(K)
    kv = prism_metadata(["blk.0.ssm_out.weight"], [K], signs, grouped=grouped)
    if heads:
        kv += [kv_u32("llama.ssm.time_step_rank", 8), kv_u32("llama.ssm.group_count", 2)]
    path = tmp_path / "ssm.gguf"
    write_gguf(path, [("blk.0.ssm_out.weight", 142, (K, N), encode_q2(codes, d, 128))], extra_kv=kv)
    return path, values(codes, d, 128).astype(np.float64), signs


def test_ssm_out_takes_grouped_or_tiled_value_heads(tmp_path):
    """The fold is computed on grouped value heads [hd, rep, nk]; llama.cpp's tiled [hd, nk, rep]
    activations are permuted first. The tiled input is built here by loops, independently of
    llmm's index arithmetic, and must give the grouped input's result."""
    torch = need_torch()
    import llmm.torch_ops as T

    path, dense, signs = ssm_out_file(tmp_path)
    with pytest.raises(llmm.Error, match=r"gated-DeltaNet output .* pass v_head_order='grouped' or 'tiled'"):
        llmm.load_tq2_gguf(path, "blk.0.ssm_out.weight", hadamard="return")
    with pytest.raises(llmm.Error, match="v_head_order must be None, 'grouped' or 'tiled', got 'hf'"):
        llmm.load_tq2_gguf(path, "blk.0.ssm_out.weight", hadamard="return", v_head_order="hf")
    x_grouped = RNG.standard_normal((3, K))
    hd, nk, rep = K // 8, 2, 4
    x_tiled = np.empty_like(x_grouped)
    for dd in range(hd):
        for a in range(nk):
            for r in range(rep):
                x_tiled[:, dd + hd * (a + nk * r)] = x_grouped[:, dd + hd * (r + rep * a)]
    want = dense @ reference(x_grouped, signs, 256).T
    grouped = T.TernaryLinear.from_gguf(path, "blk.0.ssm_out.weight", v_head_order="grouped")
    tiled = T.TernaryLinear.from_gguf(path, "blk.0.ssm_out.weight", v_head_order="tiled")
    assert grouped.rotation.permutation is None and tiled.rotation.permutation is not None
    for lin, x in ((grouped, x_grouped), (tiled, x_tiled)):
        got = lin(torch.from_numpy(x).float()).double().numpy().T
        assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
    # the NumPy path permutes the same way
    assert np.allclose(tiled.rotation(x_tiled), grouped.rotation(x_grouped), atol=1e-12)
    # and the permutation matters: the tiled input through the grouped layer is another result
    wrong = grouped(torch.from_numpy(x_tiled).float()).double().numpy().T
    assert np.abs(wrong - want).max() > 0.1 * np.abs(want).max()


def test_ssm_out_refusals(tmp_path):
    path, _, _ = ssm_out_file(tmp_path, heads=False)
    with pytest.raises(llmm.Error, match=r"v_head_order='tiled' needs the file's llama.ssm.time_step_rank"):
        llmm.load_tq2_gguf(path, "blk.0.ssm_out.weight", hadamard="return", v_head_order="tiled")
    _, rot = llmm.load_tq2_gguf(path, "blk.0.ssm_out.weight", hadamard="return", v_head_order="grouped")
    assert rot.permutation is None
    path, _, _ = ssm_out_file(tmp_path, grouped=False)
    with pytest.raises(llmm.Error, match="no prism.hadamard.gdn_v_grouped, so its fold takes the value heads in "
                                         "llama.cpp's tiled order"):
        llmm.load_tq2_gguf(path, "blk.0.ssm_out.weight", hadamard="return", v_head_order="grouped")
    for order in (None, "tiled"):
        _, rot = llmm.load_tq2_gguf(path, "blk.0.ssm_out.weight", hadamard="return", v_head_order=order)
        assert rot.permutation is None


def test_rotation_permutation_refusals():
    with pytest.raises(llmm.Error, match=r"permutation must be a permutation of range\(8\)"):
        llmm.HadamardRotation(np.ones(8), 4, permutation=np.array([0, 1, 2, 3, 4, 5, 6, 6]))
    with pytest.raises(llmm.Error, match=r"permutation must be a permutation of range\(8\)"):
        llmm.HadamardRotation(np.ones(8), 4, permutation=np.arange(4))


def test_ternary_linear_refuses_a_rotation_of_another_width():
    need_torch()
    import llmm.torch_ops as T

    weight = llmm.upload_tq2(llmm.quantize_tq2(RNG.standard_normal((N, K)).astype(np.float32)), N, K)
    try:
        with pytest.raises(llmm.Error, match="rotation must be a llmm.HadamardRotation of the weight's 512 input "
                                             "features, got k 768"):
            T.TernaryLinear(weight, rotation=llmm.HadamardRotation(np.ones(K2), 256))
        with pytest.raises(llmm.Error, match="got ndarray"):
            T.TernaryLinear(weight, rotation=np.ones(K))
    finally:
        llmm.release_tq2(weight)


def test_folded_weight_on_cuda_matches_float64(tmp_path):
    torch = need_cuda_torch()
    import llmm.torch_ops as T

    path, dense, signs = bonsai_file(tmp_path)
    x = RNG.standard_normal((7, K2))
    want = dense["blk.0.ffn_down.weight"] @ reference(x, signs[K2], 256).T
    lin = T.TernaryLinear.from_gguf(path, "blk.0.ffn_down.weight", device="cuda")
    for dt, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
        got = lin(torch.from_numpy(x).to("cuda", dt)).double().cpu().numpy().T
        assert np.abs(got - want).max() <= tol * np.abs(want).max(), dt


def test_ternary_linears_from_gguf_loads_every_ternary_tensor_with_its_rotation(tmp_path):
    torch = need_torch()
    import llmm.torch_ops as T

    codes, d = random_ternary(N, K, 128)  # an embedding table rotated on its output side, and a float tensor
    extra = [("token_embd.weight", 142, (K, N), encode_q2(codes, d, 128)),
             ("blk.0.attn_norm.weight", 0, (K,), np.ones(K, np.float32).tobytes())]
    path, dense, signs = bonsai_file(tmp_path, extra=extra)
    lins = T.ternary_linears_from_gguf(path)
    assert sorted(lins) == sorted(dense)  # neither the embedding nor the norm
    with pytest.raises(llmm.Error, match="'token_embd.weight' is listed in prism.hadamard.inverse_weight_names"):
        T.ternary_linears_from_gguf(path, ["token_embd.weight"])
    x = RNG.standard_normal((2, K2))
    for name, lin in lins.items():
        k = lin.in_features
        folded = name != "blk.0.attn_q.weight"
        xin = reference(x[:, :k], signs[k], 256) if folded else x[:, :k]
        want = dense[name] @ xin.T
        got = lin(torch.from_numpy(x[:, :k]).float()).double().numpy().T
        assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max(), name
        llmm.release_tq2(lin.weight_handle)
    one = T.ternary_linears_from_gguf(path, ["blk.0.attn_q.weight"])
    assert list(one) == ["blk.0.attn_q.weight"] and one["blk.0.attn_q.weight"].rotation is None
    with pytest.raises(llmm.Error, match="no tensor 'nope'"):
        T.ternary_linears_from_gguf(path, ["blk.0.attn_q.weight", "nope"])


def test_ternary_linears_from_gguf_needs_the_v_head_order_of_ssm_out(tmp_path):
    need_torch()
    import llmm.torch_ops as T

    path, _, _ = ssm_out_file(tmp_path)
    with pytest.raises(llmm.Error, match=r"ternary_linears_from_gguf: tensor 'blk.0.ssm_out.weight' is a gated-DeltaNet"):
        T.ternary_linears_from_gguf(path)
    lins = T.ternary_linears_from_gguf(path, v_head_order="tiled")
    assert lins["blk.0.ssm_out.weight"].rotation.permutation is not None


def test_rotated_ternary_linear_compiles_fullgraph():
    """torch.compile(fullgraph=True) traces the rotation (buffers, a dtype branch) and the op."""
    torch = need_torch()
    import llmm.torch_ops as T

    weight = llmm.upload_tq2(llmm.quantize_tq2(RNG.standard_normal((N, K)).astype(np.float32)), N, K)
    try:
        lin = T.TernaryLinear(weight, rotation=llmm.HadamardRotation(random_signs(K), 256))
        for dt in (torch.float32, torch.bfloat16):
            x = torch.from_numpy(RNG.standard_normal((3, K))).to(dt)
            compiled = torch.compile(lin, fullgraph=True, backend="aot_eager")
            assert torch.equal(compiled(x), lin(x)), dt
    finally:
        llmm.release_tq2(weight)

def rotated_f32(x, signs, block):
    """What gemm_tq2's rotation takes for x: H (s * x) in float64, rounded to f32 once."""
    return reference(x, signs, block).astype(np.float32)


@pytest.mark.parametrize("block", [128, 512])
def test_gemm_tq2_rotation_on_the_cpu_is_the_rotated_input_bitwise(block):
    """The CPU reference rotates in float64 and rounds once: bitwise the call on x rotated here."""
    n, k = 40, 1024
    weight = llmm.upload_tq2(llmm.quantize_tq2(RNG.standard_normal((n, k)).astype(np.float32)), n, k)
    try:
        signs = random_signs(k)
        x = RNG.standard_normal((3, k)).astype(np.float32)
        got = llmm.gemm_tq2(weight, x, rotation_signs=signs.astype(np.float32), rotation_block=block)
        want = llmm.gemm_tq2(weight, rotated_f32(x, signs, block))
        assert np.array_equal(got, want)
        assert not np.array_equal(got, llmm.gemm_tq2(weight, x))  # the rotation is applied
    finally:
        llmm.release_tq2(weight)


def test_gemm_tq2_rotation_refusals():
    n, k = 24, 512
    weight = llmm.upload_tq2(llmm.quantize_tq2(RNG.standard_normal((n, k)).astype(np.float32)), n, k)
    x, signs = RNG.standard_normal((2, k)).astype(np.float32), np.ones(k, np.float32)
    try:
        for kw, match in ((dict(rotation_signs=signs, rotation_block=384), "rotation_block 384 must be a power of two"),
                          (dict(rotation_signs=signs, rotation_block=1024), "dividing k = 512"),
                          (dict(rotation_block=128), "rotation_block 128 given without rotation_signs"),
                          (dict(rotation_signs=signs[:256], rotation_block=128), r"float32 \[512\].*length 256"),
                          (dict(rotation_signs=signs.astype(np.float16), rotation_block=128), "got f16"),
                          (dict(rotation_signs=signs.astype(np.float64), rotation_block=128), "unsupported dtype float64"),
                          (dict(rotation_signs=np.ones((2, 256), np.float32), rotation_block=128), "of rank 2")):
            with pytest.raises(llmm.Error, match=match):
                llmm.gemm_tq2(weight, x, **kw)
    finally:
        llmm.release_tq2(weight)



def test_gemm_tq2_rotation_is_refused_on_cuda_for_now():
    torch = need_cuda_torch()
    n, k = 64, 1024
    weight = llmm.upload_tq2(llmm.quantize_tq2(RNG.standard_normal((n, k)).astype(np.float32)), n, k, device="cuda")
    try:
        x, signs = torch.randn(1, k, device="cuda"), torch.ones(k, device="cuda")
        with pytest.raises(llmm.Error, match="rotation inside the CUDA kernels is not enabled yet"):
            llmm.gemm_tq2(weight, x, rotation_signs=signs, rotation_block=1024)
    finally:
        llmm.release_tq2(weight)
