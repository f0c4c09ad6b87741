#!/usr/bin/env python3
"""A Triton fused-MoE baseline (SwiGLU expert FFN) for bench/moe_ffn.py.

Written here after the published algorithm of vLLM's fused_moe (vllm/model_executor/layers/
fused_moe: moe_align_block_size + fused_moe_kernel, as its source and docs describe it); the code
is our own, none of theirs is copied. The algorithm:

  1. alignment: the m * top_k (token, slot) pairs, numbered p = token * top_k + slot, sorted by
     expert (stable), each expert's list padded to a multiple of BLOCK_M with the sentinel
     m * top_k, giving sorted_token_ids, one expert id per M-block and num_tokens_post_padded
     (Triton kernels here, on the GPU, no host sync: CUDA-graph capturable);
  2. one grouped GEMM kernel, run twice: a program owns a BLOCK_M x BLOCK_N tile of one M-block
     (expert from expert_ids), gathers its A rows (x row p // top_k for gate_up, activation row p
     for down), streams the expert's weight tile (w [E, N, K] row-major, read transposed),
     accumulates in f32 over K, optionally scales row p by its routing weight (down), and stores
     row p of C (sentinels skipped); programs ordered in groups of GROUP_SIZE_M M-blocks so that
     neighbours share weight tiles in L2;
  3. silu(gate) * up on [m * top_k, 2I] -> [m * top_k, I] (gate = first I columns), and the sum
     over top_k of [m, top_k, H] -> [m, H] (torch).

    fused_moe(x, w_gate_up, w_down, topk_weights, topk_ids, config=None) -> [m, H]
    tune(x, w_gate_up, w_down, topk_weights, topk_ids) -> {"gate_up": cfg, "down": cfg, ...}

x [m, H]; w_gate_up [E, 2I, H]; w_down [E, H, I]; topk_ids [m, top_k] int32/int64 in [0, E);
topk_weights [m, top_k] (f32). A config: {"BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K",
"GROUP_SIZE_M", "num_warps", "num_stages"}; fused_moe takes one (both GEMMs), a
{"gate_up": cfg, "down": cfg} pair, or None (tune()'s result for this shape if cached in this
process, else default_config()).

    python bench/triton_fused_moe.py --cpu-check   # Triton's interpreter on the CPU, vs float64
"""
import math
import os
import statistics
import sys
import time

if __name__ == "__main__" and "--cpu-check" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"  # must precede the @triton.jit decorations below

import torch
import triton
import triton.language as tl

PAD_MAX = 128         # largest BLOCK_SIZE_M: the padding store's tile width
ONE_PROGRAM_CHUNKS = 2  # alignment in one program while the pairs fit this many chunks
MAX_CANDIDATES = 24
_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"  # read as the kernels are defined


def _pow2(n):
    return 1 << max(0, int(n) - 1).bit_length()


def _chunk(e_p2):
    """Pairs per alignment chunk: a [chunk, E_P2] one-hot tile of ~8K elements."""
    return max(16, min(1024, 8192 // e_p2))


# ---------------------------------------------------------------------------------------------
# 1. Alignment. Pair p's destination is pad_start[e] + (pairs of expert e before p), where the
# rank comes from an exclusive cumsum over a one-hot [chunk, E] tile plus the counts of the
# chunks before. Small cases run in one program (one launch); larger ones in three kernels
# (per-chunk counts; a scan over chunks; the scatter) so that no single program walks all pairs.

@triton.jit
def _onehot(ids_ptr, T, start, E_P2: tl.constexpr, CH: tl.constexpr):
    offs = start + tl.arange(0, CH)
    ids = tl.load(ids_ptr + offs, mask=offs < T, other=-1).to(tl.int32)
    onehot = (ids[:, None] == tl.arange(0, E_P2)[None, :]).to(tl.int32)
    return offs, onehot


@triton.jit
def _scatter_chunk(sorted_ptr, offs, onehot, base, T):
    # base[e]: where this chunk's first pair of expert e goes; earlier pairs of e in the chunk
    # push it on (exclusive cumsum), which keeps the sort stable
    before = tl.cumsum(onehot, 0) - onehot
    dest = tl.sum(onehot * (before + base[None, :]), 1)
    tl.store(sorted_ptr + dest, offs.to(tl.int32), mask=offs < T)


@triton.jit
def _finish_align(counts, sorted_ptr, expert_ids_ptr, npost_ptr, T, BM, n_blocks,
                  E_P2: tl.constexpr, CH: tl.constexpr, PAD: tl.constexpr):
    """From per-expert counts: num_tokens_post_padded, the sentinels in each expert's padding,
    expert_ids per M-block (-1 past the end); returns each expert's first padded position."""
    padded = (counts + BM - 1) // BM * BM
    pad_end = tl.cumsum(padded, 0)
    pad_start = pad_end - padded
    total = tl.sum(padded, 0)
    tl.store(npost_ptr, total)
    j = tl.arange(0, PAD)
    pos = (pad_start + counts)[:, None] + j[None, :]
    sentinel = tl.zeros([E_P2, PAD], dtype=tl.int32) + T
    # disjoint from the pairs' slots: no ordering needed against the scatter
    tl.store(sorted_ptr + pos, sentinel, mask=j[None, :] < (padded - counts)[:, None])
    for b0 in range(0, n_blocks, CH):
        blk = b0 + tl.arange(0, CH)
        start = blk * BM
        # the block's expert: the first whose padded range ends after the block's start
        eid = tl.sum((pad_end[None, :] <= start[:, None]).to(tl.int32), 1)
        eid = tl.where(start < total, eid, -1)
        tl.store(expert_ids_ptr + blk, eid, mask=blk < n_blocks)
    return pad_start


@triton.jit(do_not_specialize=["T", "BM", "n_blocks"])
def _align_one_kernel(ids_ptr, sorted_ptr, expert_ids_ptr, npost_ptr, T, BM, n_blocks,
                      E_P2: tl.constexpr, CH: tl.constexpr, PAD: tl.constexpr):
    counts = tl.zeros([E_P2], dtype=tl.int32)
    for start in range(0, T, CH):
        offs, onehot = _onehot(ids_ptr, T, start, E_P2, CH)
        counts += tl.sum(onehot, 0)
    base = _finish_align(counts, sorted_ptr, expert_ids_ptr, npost_ptr, T, BM, n_blocks, E_P2, CH, PAD)
    for start in range(0, T, CH):
        offs, onehot = _onehot(ids_ptr, T, start, E_P2, CH)
        _scatter_chunk(sorted_ptr, offs, onehot, base, T)
        base += tl.sum(onehot, 0)


@triton.jit(do_not_specialize=["T"])
def _align_count_kernel(ids_ptr, counts_ptr, T, E_P2: tl.constexpr, CH: tl.constexpr):
    c = tl.program_id(0)
    offs, onehot = _onehot(ids_ptr, T, c * CH, E_P2, CH)
    tl.store(counts_ptr + c * E_P2 + tl.arange(0, E_P2), tl.sum(onehot, 0))


@triton.jit(do_not_specialize=["T", "BM", "n_blocks", "n_chunks"])
def _align_scan_kernel(counts_ptr, bases_ptr, sorted_ptr, expert_ids_ptr, npost_ptr, T, BM, n_blocks,
                       n_chunks, E_P2: tl.constexpr, CT: tl.constexpr, CH: tl.constexpr, PAD: tl.constexpr):
    e = tl.arange(0, E_P2)
    totals = tl.zeros([E_P2], dtype=tl.int32)
    for c0 in range(0, n_chunks, CT):
        rows = c0 + tl.arange(0, CT)
        tile = tl.load(counts_ptr + rows[:, None] * E_P2 + e[None, :], mask=rows[:, None] < n_chunks, other=0)
        totals += tl.sum(tile, 0)
    carry = _finish_align(totals, sorted_ptr, expert_ids_ptr, npost_ptr, T, BM, n_blocks, E_P2, CH, PAD)
    for c0 in range(0, n_chunks, CT):
        rows = c0 + tl.arange(0, CT)
        ok = rows[:, None] < n_chunks
        tile = tl.load(counts_ptr + rows[:, None] * E_P2 + e[None, :], mask=ok, other=0)
        tl.store(bases_ptr + rows[:, None] * E_P2 + e[None, :], tl.cumsum(tile, 0) - tile + carry[None, :], mask=ok)
        carry += tl.sum(tile, 0)


@triton.jit(do_not_specialize=["T"])
def _align_scatter_kernel(ids_ptr, bases_ptr, sorted_ptr, T, E_P2: tl.constexpr, CH: tl.constexpr):
    c = tl.program_id(0)
    offs, onehot = _onehot(ids_ptr, T, c * CH, E_P2, CH)
    base = tl.load(bases_ptr + c * E_P2 + tl.arange(0, E_P2))
    _scatter_chunk(sorted_ptr, offs, onehot, base, T)


def max_blocks(T, E, block_m):
    """M-blocks the padded list can need: each of the <= min(E, T) used experts pads < BLOCK_M."""
    return triton.cdiv(T + min(E, T) * (block_m - 1), block_m)


def align(flat_ids, E, block_m, impl="auto", chunk=None):
    """(sorted_token_ids int32 [n_blocks * BLOCK_M], expert_ids int32 [n_blocks],
    num_tokens_post_padded int32 [1], n_blocks) for flat_ids [m * top_k]. n_blocks is a host-side
    bound (the grid); entries past num_tokens_post_padded are left unwritten (expert_ids: -1).
    impl: "auto", "one" (one program), "multi" (three kernels) or "torch" (torch ops)."""
    if not (16 <= block_m <= PAD_MAX and block_m & (block_m - 1) == 0):
        raise ValueError("BLOCK_SIZE_M %d: a power of two in 16..%d" % (block_m, PAD_MAX))
    T = flat_ids.numel()
    dev = flat_ids.device
    nb = max_blocks(T, E, block_m)
    sorted_ids = torch.empty(nb * block_m, dtype=torch.int32, device=dev)
    expert_ids = torch.empty(nb, dtype=torch.int32, device=dev)
    npost = torch.empty(1, dtype=torch.int32, device=dev)
    if impl == "torch":
        return _align_torch(flat_ids, E, block_m, nb, sorted_ids)
    e_p2 = max(16, _pow2(E))
    ch = chunk or _chunk(e_p2)
    n_chunks = triton.cdiv(T, ch)
    if impl == "auto":
        impl = "one" if n_chunks <= ONE_PROGRAM_CHUNKS else "multi"
    if impl == "one":
        _align_one_kernel[(1,)](flat_ids, sorted_ids, expert_ids, npost, T, block_m, nb,
                                E_P2=e_p2, CH=ch, PAD=PAD_MAX, num_warps=8)
    elif impl == "multi":
        scratch = torch.empty(2 * n_chunks * e_p2, dtype=torch.int32, device=dev)
        counts, bases = scratch[:n_chunks * e_p2], scratch[n_chunks * e_p2:]
        _align_count_kernel[(n_chunks,)](flat_ids, counts, T, E_P2=e_p2, CH=ch, num_warps=4)
        _align_scan_kernel[(1,)](counts, bases, sorted_ids, expert_ids, npost, T, block_m, nb, n_chunks,
                                 E_P2=e_p2, CT=max(1, 8192 // e_p2), CH=ch, PAD=PAD_MAX, num_warps=8)
        _align_scatter_kernel[(n_chunks,)](flat_ids, bases, sorted_ids, T, E_P2=e_p2, CH=ch, num_warps=4)
    else:
        raise ValueError("align impl %r" % impl)
    return sorted_ids, expert_ids, npost, nb


def _align_torch(flat_ids, E, block_m, nb, sorted_ids):
    """The same alignment in torch ops (no host sync): the cross-check of the kernels."""
    T = flat_ids.numel()
    dev = flat_ids.device
    flat = flat_ids.long()
    counts = torch.zeros(E, dtype=torch.long, device=dev).scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + block_m - 1) // block_m * block_m
    pad_end = torch.cumsum(padded, 0)
    shift = (pad_end - padded) - (torch.cumsum(counts, 0) - counts)  # padding before expert e
    order = torch.argsort(flat, stable=True)
    dest = torch.arange(T, device=dev) + shift[flat[order]]
    sorted_ids.fill_(T).scatter_(0, dest, order.to(torch.int32))
    starts = torch.arange(nb, device=dev) * block_m
    eids = torch.searchsorted(pad_end, starts, right=True)
    total = pad_end[-1:]
    expert_ids = torch.where(starts < total, eids, -1).to(torch.int32)
    return sorted_ids, expert_ids, total.to(torch.int32), nb


# ---------------------------------------------------------------------------------------------
# 2. The grouped GEMM. C[p, n] = (sum_k A[p // a_div, k] * W[e, n, k]) (* weight[p]) for the
# pairs p of each M-block. Runtime scalars that vary by case are not specialized on, so one
# compiled kernel per tile config serves both GEMMs and every model shape.

@triton.jit(do_not_specialize=["num_valid", "a_div", "mul_w", "group_m", "n_blocks"])
def _moe_gemm_kernel(a_ptr, b_ptr, c_ptr, w_ptr, sorted_ptr, expert_ids_ptr, npost_ptr,
                     N, K, num_valid, a_div, mul_w, group_m, n_blocks,
                     stride_am, stride_be, stride_bn, stride_cm,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
                     UPCAST: tl.constexpr):
    pid = tl.program_id(0)
    n_pid_n = tl.cdiv(N, BLOCK_N)
    in_group = group_m * n_pid_n
    first_m = (pid // in_group) * group_m
    rows_here = tl.minimum(n_blocks - first_m, group_m)
    pid_m = first_m + (pid % in_group) % rows_here
    pid_n = (pid % in_group) // rows_here
    # the grid covers the worst-case padding; blocks past the real end leave at once
    if pid_m * BLOCK_M >= tl.load(npost_ptr):
        return
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    pair = tl.load(sorted_ptr + offs_m)
    valid = pair < num_valid
    expert = tl.load(expert_ids_ptr + pid_m).to(tl.int64)
    arow = (pair // a_div).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + arow[:, None] * stride_am + offs_k[None, :]
    b_ptrs = b_ptr + expert * stride_be + offs_n[None, :].to(tl.int64) * stride_bn + offs_k[:, None]
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=valid[:, None], other=0.0)
            b = tl.load(b_ptrs, mask=n_ok[None, :], other=0.0)
        else:
            k_ok = offs_k < K - k0
            a = tl.load(a_ptrs, mask=valid[:, None] & k_ok[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        if UPCAST:  # the interpreter's tl.dot multiplies bf16 bit patterns (Triton 3.9): f32 there
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc)
        else:
            acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    if mul_w != 0:
        wt = tl.load(w_ptr + pair, mask=valid, other=0.0).to(tl.float32)
        acc = acc * wt[:, None]
    c_ptrs = c_ptr + pair.to(tl.int64)[:, None] * stride_cm + offs_n[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=valid[:, None] & n_ok[None, :])


def _gemm(a, w, c, aligned, weights, a_div, mul_w, cfg):
    sorted_ids, expert_ids, npost, nb = aligned
    E, N, K = w.shape
    bm, bn, bk = cfg["BLOCK_SIZE_M"], cfg["BLOCK_SIZE_N"], cfg["BLOCK_SIZE_K"]
    grid = (nb * triton.cdiv(N, bn),)
    _moe_gemm_kernel[grid](a, w, c, weights, sorted_ids, expert_ids, npost,
                           N, K, c.shape[0], a_div, 1 if mul_w else 0, cfg["GROUP_SIZE_M"], nb,
                           a.stride(0), w.stride(0), w.stride(1), c.stride(0),
                           BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, EVEN_K=(K % bk == 0),
                           UPCAST=_INTERPRET and a.dtype == torch.bfloat16,
                           num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])


# ---------------------------------------------------------------------------------------------
# 3. SwiGLU between the GEMMs (one pass, f32 math, one rounding)

@triton.jit
def _silu_mul_kernel(gu_ptr, out_ptr, I, stride_g, stride_o, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = cols < I
    g = tl.load(gu_ptr + row * stride_g + cols, mask=ok, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + row * stride_g + I + cols, mask=ok, other=0.0).to(tl.float32)
    y = g / (1.0 + tl.exp(-g)) * u
    tl.store(out_ptr + row * stride_o + cols, y.to(out_ptr.dtype.element_ty), mask=ok)


def _silu_mul(gu, out):
    T, I = out.shape
    block = min(1024, _pow2(I))
    _silu_mul_kernel[(T, triton.cdiv(I, block))](gu, out, I, gu.stride(0), out.stride(0), BLOCK=block,
                                                 num_warps=4)


# ---------------------------------------------------------------------------------------------
# Configs

_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
_CACHE = {}   # (m, E, N, K, top_k) -> the tuned config of that GEMM (this process only)
_TUNED = {}   # (m, E, H, I, top_k, dtype, device) -> tune()'s whole result


def _cfg(bm, bn, bk, g, nw, ns):
    return dict(zip(_KEYS, (bm, bn, bk, g, nw, ns)))


def cfg_str(c):
    return "M%d N%d K%d G%d w%d s%d" % tuple(c[k] for k in _KEYS)


def _rows_per_expert(m, E, top_k):
    return m * top_k / float(E)


def _block_ms(r):
    """The BLOCK_SIZE_M values worth trying at r expected rows per expert (small at decode)."""
    if r <= 12:
        return [16]
    if r <= 24:
        return [16, 32]
    if r <= 48:
        return [32, 64]
    return [64, 128]


def default_config(m, E, top_k):
    r = _rows_per_expert(m, E, top_k)
    bm = 16 if r <= 12 else 32 if r <= 48 else 64 if r <= 192 else 128
    small = bm <= 32
    return _cfg(bm, 64 if small else 128, 128 if small else 64, 8 if r > bm else 1, 4 if bm <= 64 else 8,
                4 if small else 3)


def _tiles(bm):
    """Compile-relevant variants per BLOCK_SIZE_M (<= 12 each, fixed lists so that kernels compiled
    at one case serve the next): small-M tiles keep 4 warps (8 only on the widest); 128-row tiles
    skip 4 warps on narrow N and the stage counts whose shared memory would pass ~200 KB."""
    out = []
    for bn in (64, 128):
        for bk in (64, 128):
            for ns in (3, 4):
                for nw in (4, 8):
                    if bm <= 32 and nw == 8 and not (bn == 128 and ns == 3):
                        continue
                    if bm == 64 and bn == 64 and nw == 8:
                        continue
                    if bm == 128 and bn == 64 and nw == 4:
                        continue
                    if ns * (bm * bk + bk * bn) * 2 > 200 * 1024:
                        continue
                    out.append((bn, bk, nw, ns))
    return out


def candidates(m, E, top_k):
    """The sweep for one case: the default first, then the BLOCK_SIZE_M lists interleaved (a cut
    on the time budget leaves every BLOCK_SIZE_M some candidates). GROUP_SIZE_M is the one that
    fits (8 where an expert has several M-blocks); tune() tries the other on each winner."""
    r = _rows_per_expert(m, E, top_k)
    first = default_config(m, E, top_k)
    lists = []
    for bm in _block_ms(r):
        g = 8 if r > bm else 1
        lists.append([_cfg(bm, bn, bk, g, nw, ns) for (bn, bk, nw, ns) in _tiles(bm)])
    out = [first]
    for i in range(max(len(lst) for lst in lists)):
        for lst in lists:
            if i < len(lst) and lst[i] not in out:
                out.append(lst[i])
    return out[:MAX_CANDIDATES - 2]  # room for the two GROUP_SIZE_M flips


def _resolve(config, m, E, H, I, top_k):
    if config is None:
        c1 = _CACHE.get((m, E, 2 * I, H, top_k)) or default_config(m, E, top_k)
        c2 = _CACHE.get((m, E, H, I, top_k)) or default_config(m, E, top_k)
        return c1, c2
    if "gate_up" in config:
        return config["gate_up"], config["down"]
    return config, config


# ---------------------------------------------------------------------------------------------
# The FFN

def fused_moe(x, w_gate_up, w_down, topk_weights, topk_ids, config=None, align_impl="auto"):
    """SwiGLU MoE expert FFN -> [m, H] in x's dtype (see the module docstring)."""
    m, H = x.shape
    E, two_i, H1 = w_gate_up.shape
    I = two_i // 2
    top_k = topk_ids.shape[1]
    if H1 != H or two_i != 2 * I or tuple(w_down.shape) != (E, H, I) or tuple(topk_weights.shape) != (m, top_k):
        raise ValueError("fused_moe: shapes x %s, w_gate_up %s, w_down %s, topk_weights %s, topk_ids %s" %
                         (tuple(x.shape), tuple(w_gate_up.shape), tuple(w_down.shape), tuple(topk_weights.shape),
                          tuple(topk_ids.shape)))
    if m == 0:
        return x.new_zeros(0, H)
    x, w_gate_up, w_down = x.contiguous(), w_gate_up.contiguous(), w_down.contiguous()
    flat_ids = topk_ids.reshape(-1).contiguous()
    weights = topk_weights.reshape(-1).contiguous()
    c1, c2 = _resolve(config, m, E, H, I, top_k)
    T = m * top_k
    al1 = align(flat_ids, E, c1["BLOCK_SIZE_M"], align_impl)
    al2 = al1 if c2["BLOCK_SIZE_M"] == c1["BLOCK_SIZE_M"] else align(flat_ids, E, c2["BLOCK_SIZE_M"], align_impl)
    gu = torch.empty(T, 2 * I, dtype=x.dtype, device=x.device)
    _gemm(x, w_gate_up, gu, al1, weights, top_k, False, c1)
    act = torch.empty(T, I, dtype=x.dtype, device=x.device)
    _silu_mul(gu, act)
    y = torch.empty(T, H, dtype=x.dtype, device=x.device)
    _gemm(act, w_down, y, al2, weights, 1, True, c2)
    return y.view(m, top_k, H).sum(dim=1)


# ---------------------------------------------------------------------------------------------
# Tuning

def _events_ms(block):
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    block()
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1)


def _graph_us(fn, reps, target_ms):
    """(per-call us of fn in CUDA-graph replay, s of its first call): a first call (which compiles
    a new config), a graph of back-to-back calls lasting ~target_ms, median of reps replays."""
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    first_s = time.perf_counter() - t0
    est = _events_ms(lambda: [fn() for _ in range(3)]) / 3  # launch-bound at small sizes: errs long
    calls = max(1, min(64, int(math.ceil(target_ms / max(est, 1e-3)))))
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    us = statistics.median(_events_ms(g.replay) * 1000.0 / calls for _ in range(reps))
    del g
    return us, first_s


def _wall_us(fn, reps, target_ms):
    """CPU (interpreter) stand-in for _graph_us: exercises tune()'s logic only."""
    t0 = time.perf_counter()
    fn()
    first_s = time.perf_counter() - t0
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(samples), first_s


def tune(x, w_gate_up, w_down, topk_weights, topk_ids, reps=3, budget_s=20.0, target_ms=0.5, cands=None,
         log=None):
    """Times the candidates of each GEMM (CUDA-graph replay, CUDA events) on these inputs and keeps
    the best pair, counting the alignment: a GEMM pair with two BLOCK_SIZE_M values pays two.
    Stops starting candidates after budget_s, not counting first calls (Triton compiles a tile
    config once per process: the fixed lists bound that cost over a run); 'complete' says
    whether all ran; compile_s is the first calls' time.
    Caches per GEMM under (m, E, N, K, top_k) for fused_moe(config=None), and the whole result."""
    m, H = x.shape
    E, two_i, _ = w_gate_up.shape
    I = two_i // 2
    top_k = topk_ids.shape[1]
    key = (m, E, H, I, top_k, str(x.dtype), str(x.device))
    if key in _TUNED:
        return dict(_TUNED[key], cached=True)
    t0 = time.perf_counter()
    timer = _graph_us if x.is_cuda else _wall_us
    T = m * top_k
    cands = list(cands) if cands is not None else candidates(m, E, top_k)
    flat_ids = topk_ids.reshape(-1).contiguous()
    weights = topk_weights.reshape(-1).contiguous()
    x, w_gate_up, w_down = x.contiguous(), w_gate_up.contiguous(), w_down.contiguous()
    g = torch.Generator(device=x.device).manual_seed(0)
    act = torch.randn(T, I, generator=g, device=x.device, dtype=torch.float32).to(x.dtype)
    gu = torch.empty(T, 2 * I, dtype=x.dtype, device=x.device)
    y = torch.empty(T, H, dtype=x.dtype, device=x.device)
    aligned, align_us = {}, {}
    best = {"gate_up": {}, "down": {}}  # GEMM -> BLOCK_SIZE_M -> (us, cfg)
    failures = []
    timed = 0
    first = [0.0]  # first calls' seconds (compiles), kept out of the budget

    def run(which, cfg):
        bm = cfg["BLOCK_SIZE_M"]
        if bm not in aligned:
            aligned[bm] = align(flat_ids, E, bm)
            align_us[bm], f_s = timer(lambda: align(flat_ids, E, bm), reps, target_ms)
            first[0] += f_s
        al = aligned[bm]
        if which == "gate_up":
            fn = lambda: _gemm(x, w_gate_up, gu, al, weights, top_k, False, cfg)  # noqa: E731
        else:
            fn = lambda: _gemm(act, w_down, y, al, weights, 1, True, cfg)  # noqa: E731
        try:
            us, f_s = timer(fn, reps, target_ms)
            first[0] += f_s
        except Exception as e:  # a config this card cannot compile or run (shared memory, ...)
            if x.is_cuda:
                torch.cuda.synchronize()  # a dead context raises here and ends the tuning
            failures.append("%s %s: %s" % (which, cfg_str(cfg), (str(e).splitlines() or [type(e).__name__])[0]))
            return
        cur = best[which].get(bm)
        if cur is None or us < cur[0]:
            best[which][bm] = (us, dict(cfg))
        if log:
            log("  tune %-7s %-26s %9.2f us" % (which, cfg_str(cfg), us))

    def spent():
        return time.perf_counter() - t0 - first[0]

    complete = True
    for cfg in cands:
        if spent() > budget_s:
            complete = False
            break
        run("gate_up", cfg)
        run("down", cfg)
        timed += 1
    r = _rows_per_expert(m, E, top_k)
    if complete:  # GROUP_SIZE_M: the other value on each winner, where an expert has several M-blocks
        for which in ("gate_up", "down"):
            for bm, (_, cfg) in sorted(best[which].items()):
                if r > bm and spent() <= budget_s:
                    run(which, dict(cfg, GROUP_SIZE_M=1 if cfg["GROUP_SIZE_M"] != 1 else 8))
    choice = None
    for bm1, (us1, c1) in best["gate_up"].items():
        for bm2, (us2, c2) in best["down"].items():
            total = us1 + us2 + align_us[bm1] + (align_us[bm2] if bm2 != bm1 else 0.0)
            if choice is None or total < choice[0]:
                choice = (total, c1, c2, us1, us2, align_us[bm1] + (align_us[bm2] if bm2 != bm1 else 0.0))
    res = {"gate_up": None, "down": None, "complete": complete, "timed": timed, "candidates": len(cands),
           "failures": failures, "tune_s": time.perf_counter() - t0, "compile_s": first[0], "cached": False}
    if choice is not None:
        res.update(gate_up=choice[1], down=choice[2],
                   us={"gate_up": choice[3], "down": choice[4], "align": choice[5], "sum": choice[0]})
        _CACHE[(m, E, 2 * I, H, top_k)] = choice[1]
        _CACHE[(m, E, H, I, top_k)] = choice[2]
        _TUNED[key] = res
    return res


# ---------------------------------------------------------------------------------------------
# --cpu-check: Triton's interpreter (TRITON_INTERPRET=1 before this module is imported)

def reference_f64(x, w13, w2, wts, ids):
    """Pair by pair in float64."""
    x, w13, w2, wts = x.double(), w13.double(), w2.double(), wts.double()
    I = w2.shape[2]
    out = torch.zeros(x.shape, dtype=torch.float64)
    for t in range(ids.shape[0]):
        for s in range(ids.shape[1]):
            e = int(ids[t, s])
            gu = w13[e] @ x[t]
            out[t] += wts[t, s] * (w2[e] @ (torch.nn.functional.silu(gu[:I]) * gu[I:]))
    return out


def _check_align(flat_ids, E, bm, got):
    """The alignment's contract against a direct Python construction."""
    sorted_ids, expert_ids, npost, nb = got
    ids = flat_ids.tolist()
    T = len(ids)
    want = []
    for e in range(E):
        mine = [p for p in range(T) if ids[p] == e]
        if mine:
            want += mine + [T] * ((-len(mine)) % bm)
    total = int(npost.reshape(-1)[0])
    assert total == len(want) and total % bm == 0 and total <= nb * bm, (total, len(want), nb)
    assert sorted_ids[:total].tolist() == want, "sorted_token_ids"
    want_e = [ids[want[b * bm]] for b in range(total // bm)]
    assert expert_ids[:total // bm].tolist() == want_e, "expert_ids"
    assert all(v == -1 for v in expert_ids[total // bm:].tolist()), "expert_ids past the end"


def cpu_check(log=print):
    """fused_moe in the interpreter on tiny CPU shapes against float64. Returns failures (0 = ok)."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("cpu_check needs TRITON_INTERPRET=1 set before this module is imported")
    E, top_k, H, I = 8, 2, 64, 32
    bad = n_align = 0
    g = torch.Generator().manual_seed(1234)
    w13 = torch.randn(E, 2 * I, H, generator=g) * H ** -0.5
    w2 = torch.randn(E, H, I, generator=g) * I ** -0.5
    cfgs = [  # small tiles; N-masked (BN 128 > N), K-masked (BK 64 > I), two BLOCK_SIZE_M, grouping
        _cfg(16, 32, 32, 1, 4, 2),
        {"gate_up": _cfg(16, 128, 64, 2, 4, 2), "down": _cfg(32, 16, 64, 1, 4, 2)},
        _cfg(32, 64, 16, 3, 4, 2),
    ]
    for m in (1, 5, 33):
        x = torch.randn(m, H, generator=g)
        # expert E-1 gets no token; token 0 (and every third) repeats an expert in both slots
        ids = torch.randint(0, E - 1, (m, top_k), generator=g)
        ids[::3, 1] = ids[::3, 0]
        wts = torch.softmax(torch.randn(m, top_k, generator=g), -1)
        flat = ids.reshape(-1).contiguous()
        for bm in (16, 32):
            for impl, chunk in (("torch", None), ("one", None), ("one", 16), ("multi", None), ("multi", 16)):
                try:
                    got = align(flat.to(torch.int32), E, bm, impl, chunk)
                    _check_align(flat, E, bm, got)
                    n_align += 1
                except AssertionError as e:
                    bad += 1
                    log("triton cpu-check FAIL align %s chunk %s m %d BM %d: %s" % (impl, chunk, m, bm, e))
        for dtype, tol in ((torch.float32, 1e-4), (torch.bfloat16, 3e-2)):
            # against float64 on the same (rounded) inputs: the error is the kernels' own
            xd, w13d, w2d = x.to(dtype), w13.to(dtype), w2.to(dtype)
            ref = reference_f64(xd, w13d, w2d, wts, ids)
            for ci, cfg in enumerate(cfgs):
                for id_dtype in (torch.int32, torch.int64):
                    for impl in ("auto", "multi"):
                        out = fused_moe(xd, w13d, w2d, wts, ids.to(id_dtype), cfg,
                                        align_impl=impl)
                        err = float((out.double() - ref).abs().max() / ref.abs().max())
                        ok = out.shape == (m, H) and out.dtype == dtype and err <= tol
                        if not ok:
                            bad += 1
                        if not ok or (id_dtype == torch.int32 and impl == "auto"):
                            log("triton cpu-check %s m %2d %-5s cfg %d (%s): rel err %.2e%s" %
                                ("ok  " if ok else "FAIL", m, str(dtype)[6:], ci,
                                 cfg_str(cfg) if "gate_up" not in cfg else
                                 cfg_str(cfg["gate_up"]) + " / " + cfg_str(cfg["down"]), err,
                                 "" if ok else " (tol %.0e)" % tol))
    log("triton cpu-check align: %d of 30 (m 1, 5, 33 x BLOCK_SIZE_M 16, 32 x torch / one program / three "
        "kernels, chunks of 16 and the default) equal the direct construction" % n_align)
    # tune()'s control flow (wall clock in the interpreter: meaningless times) and the cache
    m = 5
    x = torch.randn(m, H, generator=g)
    ids = torch.randint(0, E, (m, top_k), generator=g).to(torch.int32)
    wts = torch.softmax(torch.randn(m, top_k, generator=g), -1)
    cands = [_cfg(16, 32, 32, 1, 4, 2), _cfg(32, 64, 32, 1, 4, 2)]
    res = tune(x, w13, w2, wts, ids, reps=1, budget_s=60, cands=cands)
    again = tune(x, w13, w2, wts, ids)
    out = fused_moe(x, w13, w2, wts, ids)  # config=None: the cached pair
    err = float((out.double() - reference_f64(x, w13, w2, wts, ids)).abs().max() /
                reference_f64(x, w13, w2, wts, ids).abs().max())
    ok = (res["complete"] and res["gate_up"] in cands and res["down"] in cands and again["cached"] and
          _resolve(None, m, E, H, I, top_k) == (res["gate_up"], res["down"]) and err <= 1e-4)
    bad += 0 if ok else 1
    log("triton cpu-check %s tune: %d/%d timed, gate_up %s, down %s, cached on the second call, "
        "fused_moe(config=None) rel err %.2e" % ("ok  " if ok else "FAIL", res["timed"], res["candidates"],
                                                 cfg_str(res["gate_up"]), cfg_str(res["down"]), err))
    # the sweep's size and shared memory bound at the benchmark's cases
    for (E_, k_) in ((128, 8), (8, 2), (64, 6)):
        for m_ in (1, 4, 16, 64, 256, 1024, 4096):
            c = candidates(m_, E_, k_)
            if not (len(c) + 2 <= MAX_CANDIDATES and all(
                    cc["num_stages"] * (cc["BLOCK_SIZE_M"] + cc["BLOCK_SIZE_N"]) * cc["BLOCK_SIZE_K"] * 2
                    <= 200 * 1024 for cc in c[1:])):
                bad += 1
                log("triton cpu-check FAIL candidates m %d E %d top_k %d: %d" % (m_, E_, k_, len(c)))
    log("triton cpu-check: %s" % ("FAILED (%d)" % bad if bad else "ok"))
    return bad


if __name__ == "__main__":
    if "--cpu-check" in sys.argv:
        sys.exit(1 if cpu_check() else 0)
    print(__doc__)
