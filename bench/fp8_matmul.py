#!/usr/bin/env python3
"""llmm.matmul_fp8 (y = x @ dequant(w)^T, FP8 e4m3 weights) against torch's ways of running the same
layer, on one GPU (written for an H100 / H200 with torch 2.11).

    python bench/fp8_matmul.py [--quick] [--json FILE] [--shapes 4096x4096,...] [--m 1,16,...]
                               [--kinds block,channel] [--routes stream,cublaslt] [--reps N]
                               [--acc-m M] [--fast-accum] [--seed S]
    python bench/fp8_matmul.py --cpu-check     # no GPU: every code path on tiny CPU cases
                                               # (times meaningless, no graphs)

Per weight shape (n, k) (default: the Llama-3-8B / Mixtral and DeepSeek-V3 projections below),
scale kind (DeepSeek-style 128 x 128 block scales; per-channel scales) and token count m, with
x bf16 [m, k] and the weight from llmm.quantize_fp8 (random, magnitudes varying by 2^-3..2^3 per
128 x 128 block, and x's per 128-column group, so that a misread scale layout shows as a large
error), it times
  llmm            llmm.matmul_fp8(x, codes, scales) (route "auto"; the route is printed)
  llmm_stream     route "stream" forced (m <= 16)
  llmm_cublaslt   route "cublaslt" forced (W8A8: x quantized per token inside the call)
  (--routes adds or removes forced routes: "dequant_lt", "stream_mma", and "tiled_sm90", W8A8 on
  llmm's Hopper engine: x quantized per 128 channels inside the call, e4m3 wgmmas)
  torch_bf16      x @ w_bf16.T, w_bf16 = the dequantized weight in bf16 (cuBLAS)
  smm_row         torch._scaled_mm with row-wise scales: x quantized per token by a torch
                  expression OUTSIDE the timed region; per-channel weight codes (for block weights:
                  the dequantized weight requantized per channel, so its error includes that)
  smm_row_q       the same with x's quantization inside the timed region
  smm_block       torch._scaled_mm with DeepSeek blockwise scales (x 1 x 128 per token and group,
                  outside the timed region; the weight's own 128 x 128 block scales), block weights
                  only; the scale layouts torch accepts are searched (printed once per case)
  smm_block_q     the same with x's quantization inside the timed region
Each is timed (1) as CUDA-graph replay: a graph of --calls (20) back-to-back calls, replayed, CUDA
events around each replay, median over --reps replays, divided by the calls; (2) eager: CUDA events
around a loop of --calls calls, median over --reps loops (the Python cost per call included; llmm's
matmul_fp8 takes the DLPack path). Repetitions of the implementations alternate. For m <= 16 each
implementation's weights are rotated over enough copies to exceed 3 x L2 (50 MB), so that decode
reads them from DRAM. An implementation that fails (refused shape, unsupported scaling, capture
error) prints why and the rest continue.

Columns: times in us per call; X/l = X's time / llmm's (auto) time: > 1 means llmm is faster;
TFLOP/s = 2 m n k / llmm's time; for m <= 16, TB/s = the FP8 weight bytes (codes + scales) / llmm's
time and %copy = that as a fraction of the device-to-device copy bandwidth (torch copy of a 256 MB
tensor, (read + write) bytes / time, measured once). Before timing, every output is checked against
x.float() @ dequant(w).T (f32; max |y - ref| / max |ref|, "!" over 0.1); an accuracy table per
case compares llmm's routes, torch_bf16 and the _scaled_mm rows against a float64 reference of
x_bf16 @ dequant(w).T at --acc-m tokens.

--json FILE writes one JSON line per row (suite "fp8_matmul", and "fp8_matmul_accuracy" per
case, "fp8_matmul_copy" once). Exits 2 without torch, CUDA or llmm.matmul_fp8; 1 when an llmm
call failed or was over the sanity tolerance; else 0 (failing baselines are reported, not fatal).
"""
import argparse
import json
import math
import statistics
import sys
import time
import traceback

SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336), (7168, 18432), (18432, 7168), (24576, 1536), (2048, 7168)]
MS = [1, 2, 4, 8, 16, 32, 128, 512, 2048, 4096]
QUICK_SHAPES = [(4096, 4096), (2048, 7168)]
QUICK_MS = [1, 16, 2048]
CPU_SHAPES = [(200, 384), (384, 256)]
CPU_MS = [1, 16, 40]
KINDS = ["block", "channel"]
DEFAULT_ROUTES = ["stream", "stream_mma", "cublaslt"]
DECODE_M = 16                # weights rotated over copies at m <= this
L2_BYTES = 50e6
ROTATE_BYTES = 3 * L2_BYTES  # the copies of one implementation's weights exceed this
COPY_BYTES = 256 << 20
E4M3_MAX = 448.0
BLOCK = 128
SANITY_TOL = 0.1
BASELINES = ["torch_bf16", "smm_row", "smm_row_q", "smm_block", "smm_block_q"]
SHORT = {"llmm": "llmm", "llmm_stream": "stream", "llmm_stream_mma": "str_mma", "llmm_cublaslt": "cublaslt",
         "llmm_dequant_lt": "dequant", "llmm_tiled_sm90": "tiled",
         "torch_bf16": "bf16", "smm_row": "row", "smm_row_q": "row+q", "smm_block": "blk", "smm_block_q": "blk+q"}


def die(msg, code=2):
    print("fp8_matmul: " + msg, file=sys.stderr, flush=True)
    sys.exit(code)


try:
    import torch
except Exception as e:  # ImportError or a broken install
    die("cannot import torch: %s" % e)
try:
    import llmm
except Exception as e:
    die("cannot import llmm (pip install --no-build-isolation . in the repo): %s" % e)
if not hasattr(llmm, "matmul_fp8"):
    die("this llmm (%s, %s) has no llmm.matmul_fp8: reinstall from the repo" %
        (getattr(llmm, "__version__", "?"), llmm.__file__))

FP8 = getattr(torch, "float8_e4m3fn", None)


class Skip(Exception):
    """A baseline that cannot run here, with the reasons already spelled out."""


def why(e):
    """One line for an exception: its type and the first line of its message."""
    lines = str(e).strip().splitlines()
    text = lines[0][:240] if lines else ""
    return text if isinstance(e, Skip) else "%s: %s" % (type(e).__name__, text)


def cdiv(a, b):
    return -(-a // b)


def round_up(a, b):
    return cdiv(a, b) * b


# ---------------------------------------------------------------------------------------------
# Data, dequantization and the torch quantizers (torch expressions)

def expand_blocks(s, n, k):
    """[ceil(n / 128), ceil(k / 128)] -> [n, k]: each 128 x 128 block's value."""
    return s.repeat_interleave(BLOCK, 0)[:n].repeat_interleave(BLOCK, 1)[:, :k]


def expand_scales(scales, kind, n, k):
    if kind == "block":
        return expand_blocks(scales.float(), n, k)
    return scales.float().reshape(-1, 1).expand(n, k)  # [n, 1] channel, [1, 1] tensor


def dequant(codes, scales, kind, dtype=torch.float32):
    """value(code) * scale (float32 products, exact in float64)."""
    n, k = codes.shape
    if dtype == torch.float64:
        return codes.float().double() * expand_scales(scales, kind, n, k).double()
    return (codes.float() * expand_scales(scales, kind, n, k)).to(dtype)


def make_weight(n, k, dev, gen):
    w = torch.randn(n, k, device=dev, generator=gen).mul_(0.02)
    f = torch.exp2(torch.randint(-3, 4, (cdiv(n, BLOCK), cdiv(k, BLOCK)), device=dev, generator=gen).float())
    return w.mul_(expand_blocks(f, n, k))


def make_x(m, k, dev, gen):
    x = torch.randn(m, k, device=dev, generator=gen)
    f = torch.exp2(torch.randint(-2, 3, (m, cdiv(k, BLOCK)), device=dev, generator=gen).float())
    return x.mul_(f.repeat_interleave(BLOCK, 1)[:, :k]).bfloat16()


def quant_rows(x):
    """Per-token e4m3 quantization: (codes [m, k], scales float32 [m, 1])."""
    xf = x.float()
    s = (xf.abs().amax(dim=1, keepdim=True) / E4M3_MAX).clamp(min=1e-12)
    return (xf / s).clamp(-E4M3_MAX, E4M3_MAX).to(FP8), s


def quant_1x128(x):
    """Per (token, 128 columns) e4m3 quantization: (codes [m, k], scales float32 [m, ceil(k / 128)] row-major)."""
    m, k = x.shape
    kb = cdiv(k, BLOCK)
    xf = torch.nn.functional.pad(x.float(), (0, kb * BLOCK - k)).view(m, kb, BLOCK)
    s = (xf.abs().amax(dim=2) / E4M3_MAX).clamp(min=1e-12)
    q = (xf / s.unsqueeze(2)).clamp(-E4M3_MAX, E4M3_MAX).to(FP8).view(m, kb * BLOCK)[:, :k].contiguous()
    return q, s


def quant_channels(wf):
    """A float [n, k] weight requantized per output channel: (codes [n, k], scales float32 [n, 1])."""
    s = (wf.abs().amax(dim=1, keepdim=True) / E4M3_MAX).clamp(min=1e-12)
    return (wf / s).clamp(-E4M3_MAX, E4M3_MAX).to(FP8), s


def rel_err(y, ref):
    """max |y - ref| / max |ref| (inf when y is not finite)."""
    y = y.to(ref.dtype)
    if not bool(torch.isfinite(y).all()):
        return float("inf")
    return float((y - ref).abs().max()) / max(float(ref.abs().max()), 1e-30)


# Scale layouts tried for torch._scaled_mm's DeepSeek scaling (torch checks strides, not only
# shapes: 1 x 128 scales "outer-dim-major", 128 x 128 ones "near-inner-dim-major with 16-byte
# aligned strides"). a: from s [m, kb] row-major; b: from the weight's [nb, kb] row-major scales,
# for mat2 = codes.t() [k, n], whose scale torch wants shaped [kb, nb].
def a_outer_major(s):
    return s.t().contiguous().t()                      # [m, kb] strides (1, m)


def a_outer_major_pad4(s):
    m, kb = s.shape
    buf = torch.zeros(kb, round_up(m, 4), device=s.device, dtype=s.dtype)
    buf[:, :m] = s.t()
    return buf[:, :m].t()                              # strides (1, round_up(m, 4))


def a_row_major(s):
    return s.contiguous()


def b_t(ws):
    return ws.t()                                      # [kb, nb] strides (1, kb)


def b_t_pad4(ws):
    nb, kb = ws.shape
    buf = torch.zeros(nb, round_up(kb, 4), device=ws.device, dtype=ws.dtype)
    buf[:, :kb] = ws
    return buf[:, :kb].t()                             # strides (1, round_up(kb, 4))


def b_t_row_major(ws):
    return ws.t().contiguous()                         # [kb, nb] strides (nb, 1)


A_LAYOUTS = [("a[m,kb] strides (1,m)", a_outer_major), ("a strides (1,m4)", a_outer_major_pad4),
             ("a row-major", a_row_major)]
B_LAYOUTS = [("b=ws.t() strides (1,kb)", b_t), ("b=ws_pad4.t()", b_t_pad4), ("b row-major [kb,nb]", b_t_row_major)]


def emulated_scaled_mm(a, b, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None, use_fast_accum=False):
    """--cpu-check's stand-in for torch._scaled_mm (whose CPU kernel takes per-tensor scales only):
    the row-wise and DeepSeek (1 x 128, 128 x 128) scalings with the layout rules torch's CUDA
    kernel states (a row-major, b column-major, K and N multiples of 16; row-wise scales
    contiguous [m, 1] / [1, n]; 1 x 128 scales [m, kb] outer-dim-major, 128 x 128 ones [kb, nb]
    near-inner-dim-major with 16-byte aligned strides), computed in float32."""
    m, k = a.shape
    n = b.shape[1]
    kb, nb = cdiv(k, BLOCK), cdiv(n, BLOCK)
    if not (a.stride(1) == 1 and b.stride(0) == 1 and k % 16 == 0 and n % 16 == 0):
        raise RuntimeError("emulated _scaled_mm: a row-major, b column-major, K and N multiples of 16")
    if tuple(scale_a.shape) == (m, 1) and tuple(scale_b.shape) == (1, n):
        if not (scale_a.is_contiguous() and scale_b.is_contiguous()):
            raise RuntimeError("emulated _scaled_mm: row-wise scales must be contiguous")
        sa, sb = scale_a.float().expand(m, k), scale_b.float().t().expand(n, k)
    elif tuple(scale_a.shape) == (m, kb) and tuple(scale_b.shape) == (kb, nb):
        if use_fast_accum:
            raise RuntimeError("emulated _scaled_mm: no fast accum with blockwise scaling")
        if not (scale_a.stride(0) == 1 and scale_a.stride(1) == m):
            raise RuntimeError("emulated _scaled_mm: 1x128 scale_a must be outer-dim-major, strides (1, %d), got %s" %
                               (m, scale_a.stride()))
        if not (scale_b.stride(0) == 1 and scale_b.stride(1) == round_up(kb, 4)):
            raise RuntimeError("emulated _scaled_mm: 128x128 scale_b must be near-inner-dim-major with 16-byte aligned "
                               "strides, (1, %d), got %s" % (round_up(kb, 4), scale_b.stride()))
        sa = scale_a.float().repeat_interleave(BLOCK, 1)[:, :k]
        sb = expand_blocks(scale_b.float().t(), n, k)
    else:
        raise RuntimeError("emulated _scaled_mm: invalid scaling configuration %s, %s" %
                           (tuple(scale_a.shape), tuple(scale_b.shape)))
    y = (a.float() * sa) @ (b.t().float() * sb).t()
    return y.to(out_dtype or torch.float32)


# ---------------------------------------------------------------------------------------------
# Timing: CUDA events and graphs, or wall clock on the CPU (--cpu-check)

class Timer:
    def __init__(self, cuda):
        self.cuda = cuda
        self.stream = torch.cuda.Stream() if cuda else None

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def ms(self, block):
        if not self.cuda:
            t0 = time.perf_counter()
            block()
            return (time.perf_counter() - t0) * 1e3
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        block()
        e1.record()
        e1.synchronize()
        return e0.elapsed_time(e1)

    def capture(self, fn, calls):
        """A CUDA graph of fn(0..calls-1), after a warm-up call on the capture stream (llmm's
        workspace is per stream: allocated there before capture)."""
        s = self.stream
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn(0)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            for i in range(calls):
                fn(i)
        torch.cuda.synchronize()
        return g


def measure(impls, timer, calls, reps):
    """impls {name: fn(i)} -> {name: {"graph_us", "eager_us", "graph_error", "error"}}; the
    implementations' repetitions alternate; one that fails is dropped with its reason."""
    res = {name: {} for name in impls}
    live = list(impls)
    graphs = {}
    if timer.cuda:
        for name in list(live):
            try:
                graphs[name] = timer.capture(impls[name], calls)
                for _ in range(2):
                    graphs[name].replay()
                timer.sync()
            except Exception as e:
                res[name]["graph_error"] = why(e)
                graphs.pop(name, None)
                try:
                    timer.sync()
                except Exception as e2:  # a broken context: nothing more can run
                    res[name]["error"] = why(e2)
                    live.remove(name)
    g_samples = {name: [] for name in live}
    e_samples = {name: [] for name in live}

    def loop(fn):
        def block():
            for i in range(calls):
                fn(i)
        return block

    try:
        for r in range(reps):
            order = live if r % 2 == 0 else live[::-1]
            for name in order:
                if name in graphs:
                    g_samples[name].append(timer.ms(graphs[name].replay) * 1e3 / calls)
            for name in order:
                if "error" in res[name]:
                    continue
                try:
                    e_samples[name].append(timer.ms(loop(impls[name])) * 1e3 / calls)
                except Exception as e:
                    res[name]["error"] = why(e)
    finally:
        graphs.clear()
    for name in live:
        if g_samples[name]:
            res[name]["graph_us"] = statistics.median(g_samples[name])
        if e_samples[name] and "error" not in res[name]:
            res[name]["eager_us"] = statistics.median(e_samples[name])
    return res


def copy_bandwidth(timer, dev):
    """Device-to-device copy bandwidth in bytes/s, (read + write) / time, of a 256 MB tensor."""
    nbytes = COPY_BYTES if timer.cuda else 16 << 20
    src = torch.empty(nbytes, dtype=torch.uint8, device=dev).random_(0, 255)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    timer.sync()
    ms = statistics.median(timer.ms(lambda: [dst.copy_(src) for _ in range(10)]) / 10 for _ in range(5))
    return 2.0 * nbytes / (ms * 1e-3)


# ---------------------------------------------------------------------------------------------
# One weight: codes, scales, their dequantized forms and rotated copies

class Case:
    def __init__(self, n, k, kind, dev, seed):
        self.n, self.k, self.kind, self.dev = n, k, kind, dev
        gen = torch.Generator(device=dev).manual_seed(seed)
        w = make_weight(n, k, dev, gen)
        self.codes, self.scales = llmm.quantize_fp8(w, scale=kind)  # float8_e4m3fn codes, f32 scales on dev
        del w
        self.gen = gen
        self.wdq = dequant(self.codes, self.scales, kind)           # float32, for references
        self.w_bf16 = self.wdq.bfloat16()
        if kind == "channel":
            self.row = (self.codes, self.scales.reshape(1, n))
        else:  # the block weight requantized per channel for row-wise _scaled_mm
            c, s = quant_channels(self.wdq)
            self.row = (c, s.reshape(1, n))
        self.fp8_bytes = n * k + self.scales.numel() * 4
        self._copies = {}
        self.block_layout = None  # the (a, b) layout names torch accepted, once found
        self.block_notes = []

    def rotated(self, key, base, nbytes, m):
        """[base] for m > 16, else base and clones enough to exceed ROTATE_BYTES together."""
        if m > DECODE_M:
            return [base]
        if key not in self._copies:
            count = max(1, math.ceil(ROTATE_BYTES / max(nbytes, 1)))
            clones = [tuple(t.clone() for t in base) for _ in range(count - 1)]
            self._copies[key] = [base] + clones
        return self._copies[key]

    def x(self, m):
        return make_x(m, self.k, self.dev, self.gen)


def llmm_impl(case, x, m, route):
    W = case.rotated("fp8", (case.codes, case.scales), case.fp8_bytes, m)
    c = len(W)
    if route == "auto":
        return (lambda i: llmm.matmul_fp8(x, W[i % c][0], W[i % c][1])), c
    return (lambda i: llmm.matmul_fp8(x, W[i % c][0], W[i % c][1], route=route)), c


def bf16_impl(case, x, m):
    B = case.rotated("bf16", (case.w_bf16,), 2 * case.n * case.k, m)
    c = len(B)
    return (lambda i: x @ B[i % c][0].t()), c


def padded_x(x, m):
    """x with zero rows up to a multiple of 16 (for a baseline that refuses other m)."""
    mp = round_up(m, 16)
    xp = torch.zeros(mp, x.shape[1], device=x.device, dtype=x.dtype)
    xp[:m] = x
    return xp


def smm_row_impl(case, x, m, quant_inside, fast_accum):
    R = case.rotated("row", case.row, case.n * case.k + 4 * case.n, m)
    c = len(R)
    xq, sa = quant_rows(x)
    if quant_inside:
        def fn(i):
            q, s = quant_rows(x)
            return torch._scaled_mm(q, R[i % c][0].t(), s, R[i % c][1], out_dtype=torch.bfloat16,
                                    use_fast_accum=fast_accum)
    else:
        def fn(i):
            return torch._scaled_mm(xq, R[i % c][0].t(), sa, R[i % c][1], out_dtype=torch.bfloat16,
                                    use_fast_accum=fast_accum)
    return fn, c


def smm_block_impl(case, x, m, quant_inside, a_layout, b_layout):
    Wb = case.rotated("fp8", (case.codes, case.scales), case.fp8_bytes, m)
    c = len(Wb)
    B = [(w, b_layout(s)) for w, s in Wb]
    xq, s = quant_1x128(x)
    sa = a_layout(s)
    if quant_inside:
        def fn(i):
            q, s_ = quant_1x128(x)
            return torch._scaled_mm(q, B[i % c][0].t(), a_layout(s_), B[i % c][1], out_dtype=torch.bfloat16)
    else:
        def fn(i):
            return torch._scaled_mm(xq, B[i % c][0].t(), sa, B[i % c][1], out_dtype=torch.bfloat16)
    return fn, c


def checked(fn, ref, m):
    """Runs fn(0) once: (relative error vs ref) or raises."""
    y = fn(0)
    if tuple(y.shape) != (m, ref.shape[1]):
        y = y[:m]
    return rel_err(y, ref)


def build_impls(case, m, x, ref, args, timer, notes):
    """{name: (fn, copies, rel_err)} for every implementation that runs at this m; notes gets
    "name: skipped: why" for the rest. ref: the f32 (or f64) reference of x @ dequant(w).T."""
    impls = {}
    dev = "cuda" if timer.cuda else "cpu"

    def add(name, make):
        try:
            fn, copies = make()
            err = checked(fn, ref, m)
            impls[name] = (fn, copies, err)
        except Exception as e:
            notes.append("%s: skipped: %s" % (name, why(e)))
        timer.sync()

    add("llmm", lambda: llmm_impl(case, x, m, "auto"))
    for route in args.routes:
        name = "llmm_" + route
        try:
            llmm.plan_matmul_fp8(m, case.n, case.k, "bf16", case.kind, device=dev, route=route)
        except Exception as e:
            notes.append("%s: not run: %s" % (name, why(e)))
            continue
        add(name, lambda route=route: llmm_impl(case, x, m, route))
    add("torch_bf16", lambda: bf16_impl(case, x, m))
    if FP8 is None or not hasattr(torch, "_scaled_mm"):
        notes.append("torch._scaled_mm rows: skipped: this torch has no float8_e4m3fn / _scaled_mm")
        return impls
    for q in (False, True):
        name = "smm_row_q" if q else "smm_row"

        def make_row(q=q):
            try:
                fn, c = smm_row_impl(case, x, m, q, args.fast_accum)
                checked(fn, ref, m)
                return fn, c
            except Exception as e:
                if m % 16 == 0:
                    raise
                xp = padded_x(x, m)
                fn, c = smm_row_impl(case, xp, m, q, args.fast_accum)
                try:
                    checked(fn, ref, m)
                except Exception as e2:
                    raise Skip("%s; with x padded to %d rows: %s" % (why(e), xp.shape[0], why(e2))) from None
                notes.append("%s: x padded to %d rows (unpadded: %s)" % (name, xp.shape[0], why(e)))
                return (lambda i: fn(i)[:m]), c
        add(name, make_row)
    if case.kind != "block":
        notes.append("smm_block: not applicable to per-channel weights")
        return impls
    found = find_block_layout(case, x, m, ref, notes)
    if found is None:
        return impls
    a_layout, b_layout, xs = found
    for q in (False, True):
        name = "smm_block_q" if q else "smm_block"

        def make_block(q=q):
            fn, c = smm_block_impl(case, xs, m, q, a_layout, b_layout)
            if xs.shape[0] != m:
                return (lambda i: fn(i)[:m]), c
            return fn, c
        add(name, make_block)
    return impls


def find_block_layout(case, x, m, ref, notes):
    """(a layout, b layout, x or x padded) that torch._scaled_mm accepts for DeepSeek scaling and
    that gives an accurate result, the last one found tried first; or None (reasons in notes)."""
    combos = [(an, af, bn, bf) for an, af in A_LAYOUTS for bn, bf in B_LAYOUTS]
    if case.block_layout:
        combos.sort(key=lambda t: (t[0], t[2]) != case.block_layout)
    failures = []
    for xs in ([x] + ([padded_x(x, m)] if m % 16 else [])):
        for an, af, bn, bf in combos:
            try:
                fn, _ = smm_block_impl(case, xs, m, False, af, bf)
                err = checked(fn, ref, m)
            except Exception as e:
                failures.append("%s, %s%s: %s" % (an, bn, "" if xs is x else ", x padded", why(e)))
                continue
            if not err <= SANITY_TOL:
                failures.append("%s, %s: accepted but rel err %.2e (wrong layout)" % (an, bn, err))
                continue
            if (an, bn) != case.block_layout:
                notes.append("smm_block: torch accepted %s, %s%s" % (an, bn, "" if xs is x else
                                                                      " with x padded to %d rows" % xs.shape[0]))
                case.block_layout = (an, bn)
            return af, bf, xs
    notes.append("smm_block: skipped: no scale layout accepted or accurate; tried: " + " | ".join(failures[:3]) +
                 (" | ... (%d in all)" % len(failures) if len(failures) > 3 else ""))
    return None


# ---------------------------------------------------------------------------------------------
# Rows and tables

def columns(kind, routes):
    llmm_cols = ["llmm"] + ["llmm_" + r for r in routes]
    base = [b for b in BASELINES if kind == "block" or not b.startswith("smm_block")]
    return llmm_cols, base


def header(kind, routes):
    lc, bc = columns(kind, routes)
    times = " ".join("%9s" % SHORT[c] for c in lc + bc)
    ratios = " ".join("%8s" % (SHORT[b] + "/l") for b in bc)
    return "%6s %5s %-10s %s | %s | %7s %6s %6s" % ("m", "mode", "auto", times, ratios, "TFLOP/s", "TB/s", "%copy")


def fmt_line(row, mode, kind, routes):
    lc, bc = columns(kind, routes)
    key = mode + "_us"
    t = row["times"]

    def us(c):
        v = t.get(c, {}).get(key)
        flag = "!" if c in row["rel_err"] and not row["rel_err"][c] <= SANITY_TOL else ""
        return "%9s" % ("-" if v is None else "%.2f%s" % (v, flag))

    l_us = t.get("llmm", {}).get(key)
    ratios = []
    for b in bc:
        b_us = t.get(b, {}).get(key)
        ratios.append("%8s" % ("-" if b_us is None or l_us is None else "%.2f" % (b_us / l_us)))
    tflops = "%7.1f" % (row["flops"] / l_us * 1e-6) if l_us else "%7s" % "-"
    if l_us and row["m"] <= DECODE_M:
        tbps = row["fp8_bytes"] / l_us * 1e-6
        bw = "%6.2f %5.0f%%" % (tbps, 100.0 * tbps * 1e12 / row["copy_bw"]) if row.get("copy_bw") else "%6.2f %6s" % (
            tbps, "-")
    else:
        bw = "%6s %6s" % ("-", "-")
    return "%6d %5s %-10s %s | %s | %s %s" % (row["m"], mode, row["auto_route"][:10], " ".join(us(c) for c in lc + bc),
                                            " ".join(ratios), tflops, bw)


def run_m(case, m, args, timer, copy_bw):
    n, k = case.n, case.k
    notes = []
    x = case.x(m)
    ref = x.float() @ case.wdq.t()
    plan = llmm.plan_matmul_fp8(m, n, k, "bf16", case.kind, device="cuda" if timer.cuda else "cpu")
    impls = build_impls(case, m, x, ref, args, timer, notes)
    del ref
    meas = measure({name: v[0] for name, v in impls.items()}, timer, args.calls, args.reps) if impls else {}
    times = {name: {kk: vv for kk, vv in r.items() if kk in ("graph_us", "eager_us")} for name, r in meas.items()}
    for name, r in meas.items():
        for kk in ("graph_error", "error"):
            if kk in r:
                notes.append("%s: %s: %s" % (name, "graph capture failed" if kk == "graph_error" else "failed", r[kk]))
    row = {"suite": "fp8_matmul", "case": "%dx%d %s m%d" % (n, k, case.kind, m), "n": n, "k": k, "m": m,
           "kind": case.kind, "dtype": "bf16", "auto_route": plan["route"], "auto_reason": plan["reason"],
           "times": times, "rel_err": {name: v[2] for name, v in impls.items()},
           "copies": {name: v[1] for name, v in impls.items()}, "flops": 2.0 * m * n * k,
           "fp8_bytes": case.fp8_bytes, "copy_bw": copy_bw, "notes": notes, "calls": args.calls, "reps": args.reps}
    for mode in ("graph", "eager"):
        l_us = times.get("llmm", {}).get(mode + "_us")
        row[mode + "_speedup"] = {b: times[b][mode + "_us"] / l_us for b in BASELINES
                                  if l_us and mode + "_us" in times.get(b, {})}
        if l_us:
            row[mode + "_tflops"] = row["flops"] / l_us * 1e-6
            if m <= DECODE_M:
                row[mode + "_weight_tbps"] = case.fp8_bytes / l_us * 1e-6
                if copy_bw:
                    row[mode + "_copy_fraction"] = case.fp8_bytes / (l_us * 1e-6) / copy_bw
    return row


def accuracy(case, args, timer):
    """Relative errors against float64 x_bf16 @ dequant(w).T at args.acc_m tokens."""
    m = args.acc_m
    x = case.x(m)
    w64 = dequant(case.codes, case.scales, case.kind, torch.float64)
    ref = x.double() @ w64.t()
    del w64
    notes = []
    impls = build_impls(case, m, x, ref, args, timer, notes)
    errs = {name: v[2] for name, v in impls.items()}
    return {"suite": "fp8_matmul_accuracy", "case": "%dx%d %s m%d" % (case.n, case.k, case.kind, m), "n": case.n,
            "k": case.k, "m": m, "kind": case.kind, "dtype": "bf16", "rel_err": errs, "notes": notes,
            "auto_route": llmm.plan_matmul_fp8(m, case.n, case.k, "bf16", case.kind,
                                               device="cuda" if timer.cuda else "cpu")["route"]}


def summary(rows):
    lines = []
    bands = [("m <= 16", lambda m: m <= 16), ("m 32..512", lambda m: 32 <= m <= 512), ("m >= 1024", lambda m: m >= 1024)]
    for kind in KINDS:
        for label, inside in bands:
            rs = [r for r in rows if r["kind"] == kind and inside(r["m"])]
            if not rs:
                continue
            for mode in ("graph", "eager"):
                parts = []
                for b in BASELINES:
                    v = [r[mode + "_speedup"][b] for r in rs if b in r.get(mode + "_speedup", {})]
                    if v:
                        parts.append("%s/l min %.2f median %.2f" % (SHORT[b], min(v), statistics.median(v)))
                if parts:
                    lines.append("%s, %s (%d rows, %s): %s" % (kind, label, len(rs), mode, "; ".join(parts)))
    return lines


def targets(rows):
    """Issue 49's dense targets against this run's rows (graph replay): one line each, with the
    measured min and median and whether the min meets the bar."""
    def line(label, vals, bar):
        if not vals:
            return "target %s: no rows in this run" % label
        lo, med = min(vals), statistics.median(vals)
        return "target %s: min %.2f median %.2f over %d rows: %s" % (label, lo, med, len(vals),
                                                                   "met" if lo >= bar else "MISSED")

    def speed(rs, b):
        return [r["graph_speedup"][b] for r in rs if b in r.get("graph_speedup", {})]

    big = [r for r in rows if r["m"] >= 1024]
    dec = [r for r in rows if r["m"] == 1 and r["fp8_bytes"] >= 15e6]
    out = [
        line("decode m 1, FP8 weights >= 15 MB: fraction of copy bandwidth >= 0.90",
             [r["graph_copy_fraction"] for r in dec if "graph_copy_fraction" in r], 0.90),
        line("decode m 1, FP8 weights >= 15 MB: bf16 time / llmm >= 1.9", speed(dec, "torch_bf16"), 1.9),
        line("decode m 2..16, FP8 weights >= 15 MB: fraction of copy bandwidth >= 0.90",
             [r["graph_copy_fraction"] for r in rows
              if 2 <= r["m"] <= 16 and r["fp8_bytes"] >= 15e6 and "graph_copy_fraction" in r], 0.90),
        line("prefill m >= 1024, channel scales: _scaled_mm row-wise / llmm >= 1.0",
             speed([r for r in big if r["kind"] == "channel"], "smm_row"), 1.0),
        line("prefill m >= 1024, block scales: _scaled_mm row-wise / llmm >= 0.9",
             speed([r for r in big if r["kind"] == "block"], "smm_row"), 0.9),
        line("prefill m >= 1024, block scales: bf16 time / llmm >= 1.6",
             speed([r for r in big if r["kind"] == "block"], "torch_bf16"), 1.6),
    ]
    return out


# ---------------------------------------------------------------------------------------------

def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke test: 2 shapes, m 1, 16, 2048")
    ap.add_argument("--shapes", default=None, help="comma list of NxK (default: the 7 shapes)")
    ap.add_argument("--m", default=None, help="comma list of token counts")
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma list of block, channel")
    ap.add_argument("--routes", default=",".join(DEFAULT_ROUTES),
                    help="llmm routes forced besides auto (stream, stream_mma, cublaslt, dequant_lt, tiled_sm90; '' for none)")
    ap.add_argument("--calls", type=int, default=20, help="calls per graph / eager loop (default 20)")
    ap.add_argument("--reps", type=int, default=10, help="timed repetitions (median; default 10)")
    ap.add_argument("--acc-m", type=int, default=16, help="tokens of the float64 accuracy check (default 16)")
    ap.add_argument("--fast-accum", action="store_true", help="use_fast_accum=True for the row-wise _scaled_mm")
    ap.add_argument("--json", default=None, help="write one JSON line per row here")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cpu-check", action="store_true", help="no GPU: every code path on tiny CPU cases")
    a = ap.parse_args()
    try:
        if a.shapes:
            a.shapes = [tuple(int(v) for v in s.lower().split("x")) for s in a.shapes.split(",") if s.strip()]
        else:
            a.shapes = CPU_SHAPES if a.cpu_check else QUICK_SHAPES if a.quick else SHAPES
        a.m = [int(s) for s in a.m.split(",") if s.strip()] if a.m else CPU_MS if a.cpu_check else \
            QUICK_MS if a.quick else MS
    except ValueError:
        ap.error("--shapes takes NxK,NxK and --m a comma list of integers")
    if any(len(s) != 2 or min(s) < 1 for s in a.shapes) or not a.m or min(a.m) < 1:
        ap.error("shapes need two positive sizes, --m positive token counts")
    a.kinds = [s.strip() for s in a.kinds.split(",") if s.strip()]
    if not a.kinds or any(s not in KINDS for s in a.kinds):
        ap.error("--kinds takes block, channel")
    a.routes = [s.strip() for s in a.routes.split(",") if s.strip()]
    if any(s not in ("stream", "stream_mma", "cublaslt", "dequant_lt", "tiled_sm90") for s in a.routes):
        ap.error("--routes takes stream, stream_mma, cublaslt, dequant_lt, tiled_sm90")
    if a.quick and not a.cpu_check:
        a.reps = min(a.reps, 5)
    return a


def main():
    args = parse_args()
    if args.cpu_check:
        dev, timer = "cpu", Timer(False)
        torch._scaled_mm = emulated_scaled_mm
        print("fp8_matmul --cpu-check: torch._scaled_mm replaced by an emulation with the CUDA kernel's layout rules",
              flush=True)
    else:
        if not torch.cuda.is_available():
            die("torch sees no CUDA device (--cpu-check runs the code paths on the CPU)")
        if not llmm.cuda_available():
            die("llmm has no usable CUDA backend (built without CUDA, or no device): llmm.cuda_available() is False")
        dev, timer = "cuda", Timer(True)
        torch.backends.cuda.matmul.allow_tf32 = False  # the f32 references stay f32
    out = open(args.json, "w") if args.json else None

    def emit(rec):
        if out:
            out.write(json.dumps(rec) + "\n")
            out.flush()

    info = {"torch": torch.__version__, "llmm": getattr(llmm, "__version__", "?")}
    if timer.cuda:
        p = torch.cuda.get_device_properties(0)
        info.update(device=p.name, sms=p.multi_processor_count, l2_bytes=getattr(p, "L2_cache_size", None),
                    cuda=torch.version.cuda)
    else:
        info.update(device="cpu (--cpu-check: times meaningless)")
    print("fp8_matmul: %s" % ", ".join("%s %s" % kv for kv in info.items()), flush=True)
    copy_bw = None
    try:
        copy_bw = copy_bandwidth(timer, dev)
        print("device-to-device copy: %.2f TB/s ((read + write) bytes / time, %d MB tensor)" %
              (copy_bw * 1e-12, (COPY_BYTES if timer.cuda else 16 << 20) >> 20), flush=True)
        emit(dict(info, suite="fp8_matmul_copy", bytes_per_s=copy_bw))
    except Exception as e:
        print("device-to-device copy: failed: %s" % why(e), flush=True)

    rows, llmm_bad = [], []
    for n, k in args.shapes:
        for kind in args.kinds:
            title = "== n %d k %d, %s scales: FP8 weight %.1f MB ==" % (n, k, kind, n * k / 1e6)
            print("\n" + title, flush=True)
            try:
                case = Case(n, k, kind, dev, args.seed)
            except Exception as e:
                print("  case skipped: %s" % why(e), flush=True)
                llmm_bad.append("%dx%d %s: setup: %s" % (n, k, kind, why(e)))
                torch.cuda.empty_cache() if timer.cuda else None
                continue
            try:
                acc = accuracy(case, args, timer)
                emit(dict(acc, **info))
                print("  accuracy at m %d (max |y - ref| / max |ref|, ref float64 x_bf16 @ dequant(w).T; auto = %s): %s"
                      % (acc["m"], acc["auto_route"],
                         ", ".join("%s %.2e" % (SHORT[name], e) for name, e in acc["rel_err"].items())), flush=True)
                for note in acc["notes"]:
                    print("    " + note, flush=True)
            except Exception as e:
                print("  accuracy check failed: %s" % why(e), flush=True)
                traceback.print_exc(limit=2)
            print("  " + header(kind, args.routes), flush=True)
            seen = set()
            for m in args.m:
                try:
                    row = run_m(case, m, args, timer, copy_bw)
                except Exception as e:
                    print("  m %d failed: %s" % (m, why(e)), flush=True)
                    traceback.print_exc(limit=2)
                    llmm_bad.append("%dx%d %s m%d: %s" % (n, k, kind, m, why(e)))
                    continue
                rows.append(row)
                emit(dict(row, **info))
                for mode in ("graph", "eager"):
                    print("  " + fmt_line(row, mode, kind, args.routes), flush=True)
                for note in row["notes"]:
                    key = note.split(":")[0] + note.split(":")[-1][:60]
                    if key not in seen or "failed" in note:  # the same skip once per case
                        print("      m %d: %s" % (m, note), flush=True)
                        seen.add(key)
                for name, err in row["rel_err"].items():
                    if name.startswith("llmm") and not err <= SANITY_TOL:
                        llmm_bad.append("%s %s: rel err %.2e" % (row["case"], name, err))
                for note in row["notes"]:
                    if note.startswith("llmm") and ("failed" in note or "skipped" in note):
                        llmm_bad.append("%s %s" % (row["case"], note))
            del case
            if timer.cuda:
                torch.cuda.empty_cache()
    print("\nsummary (X/l = X's time / llmm's: > 1 means llmm faster):")
    for line in summary(rows):
        print("  " + line)
    print("\ntargets (issue 49; the _scaled_mm rows quantize x outside the timed region, llmm inside):")
    for line in targets(rows):
        print("  " + line)
    if out:
        out.close()
    if llmm_bad:
        print("\nllmm problems:\n  " + "\n  ".join(llmm_bad), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
