"""The blockwise signed Walsh-Hadamard rotation that Ternary-Bonsai-2 (PrismML) folds into its
ternary weights, and its reading from a GGUF file's ``prism.hadamard.*`` metadata.

A folded weight is stored as W' = W diag(s) H along its input axis, H the normalized Sylvester
Walsh-Hadamard matrix of ``block`` x ``block`` repeated down the diagonal and s a +-1 vector of
the input width. Since H H = I and s s = 1, W x = W' (H (s * x)): the activation is multiplied by
the signs, then rotated block by block, then goes through the folded weight. A loader that
ignores the fold computes W' x, which is uncorrelated with W x and raises no error; llmm refuses
such weights unless the rotation comes with them.

This is the unfused first step: the rotation runs as its own torch (or NumPy) operations before
the ternary matmul (on a GPU, for bf16 or f16 x and a block that is a power of 4 such as Bonsai-2's
1024: the sign flips, then one matmul by H in x's type; else in f32 with a cast each way), not
inside the ternary kernels' activation staging.
"""
from __future__ import annotations

import functools
from typing import Optional

import numpy as np

from ._llmm import Error

_TRANSFORM = "normalized-sylvester-walsh-hadamard"
_AXIS = "input-last-dimension"
_KEY = "prism.hadamard."


@functools.lru_cache(maxsize=None)
def _sylvester(block: int) -> np.ndarray:
    """H[i, j] = (-1)^popcount(i & j) / sqrt(block), float64, read-only (built once a block size)."""
    i = np.arange(block, dtype=np.int64)
    bits = i[:, None] & i[None, :]
    parity = np.zeros_like(bits)
    while bits.any():
        parity ^= bits & 1
        bits >>= 1
    h = np.where(parity == 1, -1.0, 1.0) / np.sqrt(block)
    h.flags.writeable = False
    return h


class HadamardRotation:
    """x -> H (s * P x) over the last axis of x, in blocks of ``block`` (a power of two) along it.

    ``signs``: the +-1 vector s of the input width k (k a multiple of ``block``). Called on a
    torch tensor (f32, f16 or bf16, any leading shape, any device) it returns a tensor of x's
    dtype: one matmul in x's 16-bit type where H is exact there (block a power of 4), else in f32,
    rounded once either way; on a NumPy array, float64 math and x's dtype back. ``permutation`` (optional, an index array p of length k): x's features are taken
    in the order x[..., p] first (P x; the gated-DeltaNet head order of ssm_out, see rotation_for)."""

    def __init__(self, signs, block: int, permutation=None):
        block = int(block)
        if block < 2 or block & (block - 1):
            raise Error(f"llmm.HadamardRotation: block {block} is not a power of two >= 2")
        s = np.asarray(signs, dtype=np.float64).reshape(-1)
        if s.size == 0 or s.size % block:
            raise Error(f"llmm.HadamardRotation: {s.size} signs is not a positive multiple of the block {block}")
        bad = np.flatnonzero(np.abs(s) != 1.0)
        if bad.size:
            raise Error(f"llmm.HadamardRotation: sign {int(bad[0])} is {float(s[bad[0]])!r}, not +1 or -1")
        self.block, self.k = block, int(s.size)
        self._signs = s
        self._perm = None
        if permutation is not None:
            p = np.asarray(permutation)
            if p.shape != (self.k,) or p.dtype.kind not in "iu" or not np.array_equal(np.sort(p), np.arange(self.k)):
                raise Error(f"llmm.HadamardRotation: permutation must be a permutation of range({self.k})")
            self._perm = p.astype(np.int64)
        self._torch = {}  # device -> tensors(device)

    @property
    def signs(self) -> np.ndarray:
        return self._signs.copy()

    def matrix(self) -> np.ndarray:
        """The normalized block x block Sylvester-Hadamard matrix (float64, symmetric, H H = I)."""
        return _sylvester(self.block).copy()

    def _check_width(self, width: int, what: str):
        if width != self.k:
            raise Error(f"llmm.HadamardRotation: {what} has {width} features on its last axis, the rotation {self.k}")

    def __call__(self, x):
        if isinstance(x, np.ndarray):
            self._check_width(x.shape[-1] if x.ndim else 0, "x")
            xp = x if self._perm is None else x[..., self._perm]
            blocks = (xp.astype(np.float64) * self._signs).reshape(*x.shape[:-1], self.k // self.block, self.block)
            with np.errstate(invalid="ignore", over="ignore"):  # NaN and Inf propagate, as in the kernels
                return (blocks @ _sylvester(self.block)).reshape(x.shape).astype(x.dtype)
        import torch

        if not isinstance(x, torch.Tensor):
            raise Error(f"llmm.HadamardRotation: x must be a NumPy array or a torch tensor, got {type(x).__name__}")
        dev = x.device
        if dev not in self._torch:
            self._torch[dev] = self.tensors(dev)
        return rotate_torch(x, *pick_operands(self._torch[dev].get, x.dtype))

    def tensors(self, device=None) -> dict:
        """rotate_torch's operands on `device`, by name: "signs_f32" and "matrix_f32" always, and
        "signs_bf16", "signs_f16", "matrix_bf16", "matrix_f16" where H is exact in the 16-bit
        type (block a power of 4: entries +-2^-j), else None; "permutation" (int64) or None.
        The matrices are shared by every rotation of one block size on one device (1024: 4 MB in
        f32). TernaryLinear keeps them as buffers, which torch.compile traces."""
        import torch

        exact16 = (self.block.bit_length() - 1) % 2 == 0
        out = {"permutation": None if self._perm is None else torch.from_numpy(self._perm).to(device)}
        for name, dt in (("f32", torch.float32), ("bf16", torch.bfloat16), ("f16", torch.float16)):
            use = name == "f32" or exact16
            out["signs_" + name] = torch.from_numpy(self._signs).to(device=device, dtype=dt) if use else None
            out["matrix_" + name] = _shared_matrix(self.block, dt, device) if use else None
        return out

    @property
    def permutation(self) -> Optional[np.ndarray]:
        return None if self._perm is None else self._perm.copy()

    def __repr__(self) -> str:
        flips = int((self._signs < 0).sum())
        return f"HadamardRotation(k={self.k}, block={self.block}, negative_signs={flips})"


def _one(meta: dict, name: str, where: str):
    if _KEY + name not in meta:
        raise Error(f"{where}: the file has prism.hadamard.* keys but no {_KEY + name}")
    return meta[_KEY + name]


def folded(meta: dict, tensor_name: str, where: str) -> bool:
    """Whether a GGUF file's prism.hadamard.* metadata (``meta``: key -> value) lists the weight
    ``tensor_name`` as Hadamard-folded. Refuses a file with those keys but no list (any weight may
    be folded) and a weight of prism.hadamard.inverse_weight_names (rotated on its output side)."""
    if not any(key.startswith(_KEY) for key in meta):
        return False
    names = meta.get(_KEY + "weight_names")
    if not isinstance(names, list):
        raise Error(f"{where}: tensor {tensor_name!r} may be Hadamard-folded (the file has prism.hadamard.* keys but "
                    f"no prism.hadamard.weight_names list); refused rather than loaded unrotated")
    inverse = meta.get(_KEY + "inverse_weight_names")
    if isinstance(inverse, list) and tensor_name in inverse:
        raise Error(f"{where}: tensor {tensor_name!r} is listed in prism.hadamard.inverse_weight_names: its rows are "
                    f"rotated on the output side (an embedding table), which a matmul's input rotation does not undo")
    return tensor_name in names


def rotation_for(meta: dict, tensor_name: str, k: int, where: str,
                 v_head_order: Optional[str] = None) -> Optional[HadamardRotation]:
    """The rotation the metadata declares for the weight ``tensor_name`` of input width k (None
    when it is not folded). Every key the transform depends on is checked; what llmm cannot apply
    exactly (another version, transform, axis or sign mode) is refused, naming the key.

    ``v_head_order`` matters for a gated-DeltaNet ``ssm_out`` weight only: with
    prism.hadamard.gdn_v_grouped the fold was computed with its input's value heads in grouped
    order, [hd, rep, nk] innermost first (Hugging Face's order); llama.cpp's graph produces them
    tiled, [hd, nk, rep], and permutes them first. "grouped": the caller's activations are in the
    fold's order already; "tiled": llmm permutes them (rep and nk from the file's
    {arch}.ssm.time_step_rank and .ssm.group_count); None: refused, since the wrong one gives
    wrong results without an error."""
    if not folded(meta, tensor_name, where):
        return None
    version = _one(meta, "version", where)
    if version != 1:
        raise Error(f"{where}: prism.hadamard.version {version!r}; llmm reads version 1")
    for key, want in (("transform", _TRANSFORM), ("axis", _AXIS)):
        got = _one(meta, key, where)
        if got != want:
            raise Error(f"{where}: prism.hadamard.{key} is {got!r}; llmm applies only {want!r}")
    block = _one(meta, "block_size", where)
    if not isinstance(block, int) or block < 2 or block & (block - 1):
        raise Error(f"{where}: prism.hadamard.block_size {block!r} is not a power of two >= 2")
    if k % block:
        raise Error(f"{where}: tensor {tensor_name!r} has {k} input features, not a multiple of "
                    f"prism.hadamard.block_size {block}")
    if v_head_order not in (None, "grouped", "tiled"):
        raise Error(f"{where}: v_head_order must be None, 'grouped' or 'tiled', got {v_head_order!r}")
    perm = None
    if tensor_name.endswith("ssm_out.weight"):
        perm = _ssm_out_permutation(meta, tensor_name, k, where, v_head_order)
    mode = _one(meta, "sign_mode", where)
    if mode == "identity":
        return HadamardRotation(np.ones(k), block, perm)
    if mode != "explicit":
        raise Error(f"{where}: prism.hadamard.sign_mode {mode!r}; llmm reads 'explicit' and 'identity'")
    widths, values = _one(meta, "sign_widths", where), _one(meta, "sign_values", where)
    if not isinstance(widths, list) or not isinstance(values, list):
        raise Error(f"{where}: prism.hadamard.sign_widths and sign_values must be arrays")
    total = sum(int(w) for w in widths)
    if total != len(values):
        raise Error(f"{where}: prism.hadamard.sign_widths sum to {total}, sign_values holds {len(values)}")
    if widths.count(k) != 1:
        why = "no" if k not in widths else f"{widths.count(k)}"
        raise Error(f"{where}: tensor {tensor_name!r} has {k} input features and prism.hadamard.sign_widths {widths} "
                    f"has {why} sign vector of that width")
    at = sum(int(w) for w in widths[:widths.index(k)])
    return HadamardRotation(values[at:at + k], block, perm)


def _ssm_out_permutation(meta: dict, tensor_name: str, k: int, where: str, v_head_order: Optional[str]):
    """None (x as it comes) or the index array taking tiled value heads to grouped order."""
    if not meta.get(_KEY + "gdn_v_grouped"):
        if v_head_order == "grouped":
            raise Error(f"{where}: tensor {tensor_name!r}: the file has no prism.hadamard.gdn_v_grouped, so its fold "
                        f"takes the value heads in llama.cpp's tiled order; llmm does not permute grouped activations "
                        f"into it (pass v_head_order='tiled' or None with tiled activations)")
        return None
    if v_head_order is None:
        raise Error(f"{where}: tensor {tensor_name!r} is a gated-DeltaNet output whose fold takes the value heads in "
                    f"grouped order [hd, rep, nk] (prism.hadamard.gdn_v_grouped; Hugging Face's order), while "
                    f"llama.cpp's graph produces them tiled [hd, nk, rep]: pass v_head_order='grouped' or 'tiled' to "
                    f"say which order your activations are in")
    if v_head_order == "grouped":
        return None
    arch = meta.get("general.architecture")
    n_v, n_k = meta.get(f"{arch}.ssm.time_step_rank"), meta.get(f"{arch}.ssm.group_count")
    if not isinstance(n_v, int) or not isinstance(n_k, int) or n_v < 1 or n_k < 1:
        raise Error(f"{where}: v_head_order='tiled' needs the file's {arch}.ssm.time_step_rank and "
                    f"{arch}.ssm.group_count (value and key head counts), got {n_v!r} and {n_k!r}")
    if n_v % n_k or k % n_v:
        raise Error(f"{where}: tensor {tensor_name!r}: {n_v} value heads are not a multiple of {n_k} key heads, or "
                    f"its {k} input features not a multiple of {n_v} heads")
    hd, rep = k // n_v, n_v // n_k
    # grouped feature d + hd (r + rep a) is tiled feature d + hd (a + n_k r)
    d, r, a = np.meshgrid(np.arange(hd), np.arange(rep), np.arange(n_k), indexing="ij")
    perm = np.empty(k, dtype=np.int64)
    perm[(d + hd * (r + rep * a)).ravel()] = (d + hd * (a + n_k * r)).ravel()
    return perm


_MATRICES: dict = {}  # (block, torch dtype, device) -> H, one copy shared by every layer


def _shared_matrix(block: int, dtype, device):
    import torch

    dev = torch.device(device if device is not None else "cpu")
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    key = (block, dtype, dev)
    h = _MATRICES.get(key)
    if h is None:
        h = _MATRICES[key] = torch.from_numpy(_sylvester(block).copy()).to(device=dev, dtype=dtype)
    return h


def pick_operands(get, dtype):
    """(signs, H, permutation) for x of `dtype`, `get(name)` giving the tensors() entries: x's own
    16-bit type where H is exact in it, else f32."""
    import torch

    name = {torch.bfloat16: "bf16", torch.float16: "f16"}.get(dtype, "f32")
    if get("matrix_" + name) is None:
        name = "f32"
    return get("signs_" + name), get("matrix_" + name), get("permutation")


def rotate_torch(x, signs, h, perm=None):
    """H (signs * x[..., perm]) blockwise over x's last axis; H [block, block] and signs [k] on x's
    device, perm None or [k] int64; returned in x's dtype (f32, f16, bf16). With signs and H in
    x's 16-bit type (H exact there) the product is one 16-bit matmul accumulated in f32, else it
    is computed in f32; either way rounded once to x's dtype."""
    import torch

    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise Error(f"llmm.HadamardRotation: x is {x.dtype}; float32, float16 or bfloat16 only")
    if x.dim() == 0 or x.shape[-1] != signs.shape[0]:
        width = x.shape[-1] if x.dim() else 0
        raise Error(f"llmm.HadamardRotation: x has {width} features on its last axis, the rotation {signs.shape[0]}")
    if perm is not None:
        x = x.index_select(-1, perm)
    xs = x * signs  # exact in x's type; promoted to f32 (the cast in the same kernel) when signs are f32
    return (xs.reshape(-1, h.shape[0]) @ h).reshape(x.shape).to(x.dtype)
