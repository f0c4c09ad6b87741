#!/usr/bin/env python3
"""llmm.moe_ffn (the whole MoE expert FFN in one call) against the same FFN composed in torch.

    python bench/moe_ffn.py [--models qwen3-30b,qwen3-235b,mixtral,dsv2-lite] [--m 1,4,16,...]
                            [--json FILE] [--reps N] [--seed S] [--no-triton] [--triton-tune-s S]
    python bench/moe_ffn.py --cpu-check      # no GPU: correctness of the code paths only (Triton's
                                             # in its interpreter)

Per case (bf16, model shape x m tokens; uniform random routing: torch.topk of random logits,
softmax over the chosen logits, fixed seed) this times
  llmm            llmm.moe_ffn(x, w_gate_up, w_down, topk_ids, topk_weights) (SwiGLU)
  torch_grouped   the same FFN on torch._grouped_mm, routing included: stable argsort of the
                  flattened ids, gather of the token rows, per-expert row ends (a scatter_add_
                  histogram + cumsum: torch.bincount syncs with the host and cannot be captured),
                  gate_up grouped mm, silu(gate) * up, down grouped mm, times the routing weights
                  (bf16), scattered back to [m, top_k, H] and summed over top_k
  torch_loop      (m <= 64 only, eager only: it syncs) transformers-style eager experts: a loop
                  over the active experts with F.linear and index_add_
  triton          bench/triton_fused_moe.py: our Triton fused MoE after vLLM's published fused_moe
                  algorithm (alignment kernels, two grouped GEMMs with gathered rows, SwiGLU, the
                  slot sum), tuned per case first (a <= 24-candidate sweep per GEMM timed in graph
                  replay; tuning time excluded, printed once per case; the sweep stops starting
                  candidates after --triton-tune-s s, not counting first calls (compiles: once
                  per tile config per process, ~40 configs in all), and keeps its best so far:
                  "partial", 'p' after vs_triton; no timed candidate: the case has no Triton
                  figure). --no-triton, or no importable triton, skips it
each as (1) CUDA-graph replay time per call (warm-up call on the capture stream, a graph of
back-to-back calls lasting ~--target-ms, median over --reps replays timed with CUDA events) and
(2) eager time per call (CUDA events around a loop of calls, median over --reps loops). llmm's
and torch's repetitions alternate round by round. Where a case's weights total < 200 MB, decode
cases (m <= 64) rotate over 2-4 copies of them (> ~120 MB in all) so that they do not stay in L2.

Before timing, llmm's output is compared with the torch_grouped composition's: max |diff| /
max |ref| ("!" after it when > 3e-2 or not finite; at m <= 64 the loop is compared too; Triton's
too, and a Triton output over 3e-2 is not timed). ratio = torch us / llmm us (> 1: llmm faster);
vs_triton = triton us / llmm us (graph replay). GB/s = weight bytes of the distinct experts the
routing touches (both matrices) / llmm graph time; TFLOP/s = 2 m top_k (2 I H + H I) / the same.
--json FILE writes one JSON line per case (suite "moe_ffn"; triton_us, triton_speedup,
triton_config, ... where Triton ran). Ends with summary lines per m band (m <= 16, 32..512,
>= 1024), against torch and against Triton (with issue 48's targets 1.5x / 1.3x / 1.2x). Exits
2 when torch, CUDA, torch._grouped_mm or llmm.moe_ffn is missing, 1 when a case failed or a
correctness check (Triton's included) is over tolerance, else 0; a missing or skipped Triton is
no failure.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

MODELS = {  # key: (name, H hidden, I intermediate per expert, E experts, top_k)
    "qwen3-30b": ("Qwen3-30B-A3B", 2048, 768, 128, 8),
    "qwen3-235b": ("Qwen3-235B-A22B", 4096, 1536, 128, 8),
    "mixtral": ("Mixtral-8x7B", 4096, 14336, 8, 2),
    "dsv2-lite": ("DeepSeek-V2-Lite", 2048, 1408, 64, 6),
}
DEFAULT_M = [1, 4, 16, 64, 256, 1024, 4096]
TOL = 3e-2
FP8_TOL = 6e-2  # the FP8 weights' own rounding (2^-4 relative per weight) on top of bf16
LOOP_MAX_M = 64
MAX_CALLS = 200          # calls in one captured graph / one eager sample
ROTATE_BELOW = 200e6     # weight bytes under which decode cases rotate copies
ROTATE_TARGET = 120e6    # total bytes the copies should exceed
BASELINE = "torch_grouped_mm_ffn"
TRITON_TARGETS = {"m <= 16": 1.5, "m 32..512": 1.3, "m >= 1024": 1.2}  # issue 48, vs Triton fused MoE


def fail(msg, code=2):
    print("moe_ffn: " + msg, file=sys.stderr, flush=True)
    sys.exit(code)


try:
    import torch
    import torch.nn.functional as F
except Exception as e:  # ImportError or a broken install
    fail("cannot import torch: %s" % e)
try:
    import llmm
except Exception as e:
    fail("cannot import llmm (pip install --no-build-isolation . in the repo): %s" % e)
if not hasattr(llmm, "moe_ffn"):
    fail("this llmm (%s, %s) has no llmm.moe_ffn: reinstall from the repo" %
         (getattr(llmm, "__version__", "?"), llmm.__file__))


# ---------------------------------------------------------------------------------------------
# The FFN three ways. x [m, H]; w13 [E, 2I, H] (gate rows, then up rows); w2 [E, H, I];
# ids [m, top_k] int; wts [m, top_k] float32. All return [m, H] in x's dtype.

def llmm_ffn(x, w13, w2, ids, wts):
    return llmm.moe_ffn(x, w13, w2, ids, wts)


def fp8_stack(w, kind):
    """(codes float8_e4m3fn, scales float32) of an expert stack w [E, n, k] on its device, as
    llmm.quantize_fp8 per expert (scale = the group's max |w| / 448, 1 for an all-zero group):
    "block" scales [E, ceil(n/128), ceil(k/128)], "channel" [E, n, 1]. Expert chunks keep the f32
    copy small."""
    E, n, k = w.shape
    codes = torch.empty((E, n, k), dtype=torch.float8_e4m3fn, device=w.device)
    if kind == "channel":
        scales = torch.empty((E, n, 1), dtype=torch.float32, device=w.device)
    else:
        nb, kb = (n + 127) // 128, (k + 127) // 128
        scales = torch.empty((E, nb, kb), dtype=torch.float32, device=w.device)
    for e0 in range(0, E, 8):
        wf = w[e0:e0 + 8].float()
        if kind == "channel":
            amax = wf.abs().amax(dim=2, keepdim=True)
            s = torch.where(amax == 0, torch.ones_like(amax), amax / 448.0)
            codes[e0:e0 + 8] = (wf / s).to(torch.float8_e4m3fn)
            scales[e0:e0 + 8] = s
            continue
        pad = torch.nn.functional.pad(wf, (0, kb * 128 - k, 0, nb * 128 - n))
        blocks = pad.view(wf.shape[0], nb, 128, kb, 128)
        amax = blocks.abs().amax(dim=(2, 4))
        s = torch.where(amax == 0, torch.ones_like(amax), amax / 448.0)
        full = s[:, :, None, :, None].expand(-1, -1, 128, -1, 128).reshape(wf.shape[0], nb * 128, kb * 128)
        codes[e0:e0 + 8] = (wf / full[:, :n, :k]).to(torch.float8_e4m3fn)
        scales[e0:e0 + 8] = s
    return codes, scales


def torch_grouped_ffn(x, w13, w2, ids, wts):
    """torch._grouped_mm composition, routing included; no host sync (CUDA-graph capturable)."""
    m, top_k = ids.shape
    n_experts, inter = w13.shape[0], w2.shape[2]
    flat = ids.reshape(-1).long()                                # [m * top_k], slot order
    order = torch.argsort(flat, stable=True)                     # rows grouped by expert
    counts = torch.zeros(n_experts, dtype=torch.int32, device=x.device)
    counts.scatter_add_(0, flat, torch.ones_like(flat, dtype=torch.int32))
    offs = torch.cumsum(counts, 0, dtype=torch.int32)            # row end of each expert's group
    xs = x.index_select(0, order // top_k)                       # [m * top_k, H]
    gu = torch._grouped_mm(xs, w13.transpose(1, 2), offs=offs)   # [m * top_k, 2I]
    h = F.silu(gu[:, :inter]) * gu[:, inter:]                    # [m * top_k, I], contiguous
    y = torch._grouped_mm(h, w2.transpose(1, 2), offs=offs)      # [m * top_k, H]
    y = y * wts.reshape(-1).index_select(0, order).to(y.dtype).unsqueeze(1)
    slots = torch.empty_like(y).index_copy_(0, order, y)         # back to (token, slot) order
    return slots.view(m, top_k, -1).sum(dim=1)


def torch_loop_ffn(x, w13, w2, ids, wts):
    """transformers-style eager experts: a loop over the experts the routing touches."""
    inter = w2.shape[2]
    out = torch.zeros_like(x)
    for e in torch.unique(ids).tolist():
        tok, slot = torch.where(ids == e)
        gu = F.linear(x[tok], w13[e])
        h = F.silu(gu[:, :inter]) * gu[:, inter:]
        y = F.linear(h, w2[e]) * wts[tok, slot].to(x.dtype).unsqueeze(1)
        out.index_add_(0, tok, y)
    return out


def load_triton(interpret):
    """bench/triton_fused_moe.py as a module, or (None, why). interpret: Triton's CPU interpreter
    (must be on before the module's kernels are defined)."""
    if interpret:
        os.environ["TRITON_INTERPRET"] = "1"
    elif os.environ.get("TRITON_INTERPRET") == "1":
        return None, "TRITON_INTERPRET=1 is set (the kernels would run on the CPU)"
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        import triton_fused_moe
    except Exception as e:  # no triton, or one this code cannot use
        return None, "%s: %s" % (type(e).__name__, (str(e).splitlines() or [""])[0])
    return triton_fused_moe, None


def rel_err(got, ref):
    """max |got - ref| / max |ref| in float32 (inf when got is not finite)."""
    got, ref = got.float(), ref.float()
    if not bool(torch.isfinite(got).all()):
        return float("inf")
    return float((got - ref).abs().max()) / max(float(ref.abs().max()), 1e-30)


# ---------------------------------------------------------------------------------------------
# Inputs

def make_weights(H, inter, E, dtype, device, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    w13 = torch.randn(E, 2 * inter, H, generator=g, device=device, dtype=dtype).mul_(H ** -0.5)
    w2 = torch.randn(E, H, inter, generator=g, device=device, dtype=dtype).mul_(inter ** -0.5)
    return w13, w2


def make_routing(m, H, E, top_k, dtype, device, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(m, H, generator=g, device=device, dtype=dtype)
    logits = torch.randn(m, E, generator=g, device=device, dtype=torch.float32)
    top, ids = torch.topk(logits, top_k, dim=-1)
    return x, ids.to(torch.int32).contiguous(), torch.softmax(top, dim=-1).contiguous()


def case_numbers(m, H, inter, top_k, ids, esize):
    active = int(torch.unique(ids).numel())
    wbytes = float(active) * (2 * inter * H + H * inter) * esize
    flops = 2.0 * m * top_k * (2 * inter * H + H * inter)
    return active, wbytes, flops


def triton_case(tfm, x, w13, w2, ids, wts, ref, budget_s):
    """Tunes Triton's fused MoE on this case and checks it against ref. Returns (record for the row,
    the config to time or None: none timed in the budget, or over tolerance)."""
    import triton
    rec = {"version": triton.__version__}
    res = tfm.tune(x, w13, w2, wts, ids, budget_s=budget_s)
    rec.update(tune_s=res["tune_s"], compile_s=res.get("compile_s"), complete=res["complete"], timed=res["timed"],
               candidates=res["candidates"], failures=len(res["failures"]), tuned_us=res.get("us"))
    if res["gate_up"] is None:
        rec["skipped"] = "no candidate timed within the %.0f s tuning budget (%d failed: %s)" % (
            budget_s, len(res["failures"]), "; ".join(res["failures"][:2]))
        return rec, None
    cfg = {"gate_up": res["gate_up"], "down": res["down"]}
    rec["config"] = cfg
    out = tfm.fused_moe(x, w13, w2, wts, ids, cfg)
    rec["rel_err"] = rel_err(out, ref)
    if not (rec["rel_err"] <= TOL):
        rec["skipped"] = "rel err %.2e over %.0e: not timed" % (rec["rel_err"], TOL)
        return rec, None
    return rec, cfg


def triton_note(tfm, rec):
    """The once-per-case line on Triton's tuning."""
    if rec.get("tune_s") is None:
        return "    triton skipped: %s" % rec.get("skipped")
    how = "%d/%d candidates" % (rec["timed"], rec["candidates"])
    if not rec["complete"]:
        how += ", stopped at the budget: best so far, 'p' in vs_triton"
    if rec["failures"]:
        how += ", %d did not compile or run" % rec["failures"]
    line = "    triton: tuned in %.1f s, %.1f s of it first calls/compiles (%s; excluded from the timings)" % (
        rec["tune_s"], rec.get("compile_s") or 0.0, how)
    if rec.get("config"):
        line += ": gate_up %s, down %s" % (tfm.cfg_str(rec["config"]["gate_up"]), tfm.cfg_str(rec["config"]["down"]))
    if rec.get("tuned_us"):
        line += "; tuned gate_up + down + align %.1f us (align %.1f)" % (rec["tuned_us"]["sum"],
                                                                           rec["tuned_us"]["align"])
    if rec.get("skipped"):
        line += "; skipped: " + rec["skipped"]
    return line


# ---------------------------------------------------------------------------------------------
# CUDA timing

def events_ms(block):
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    block()
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1)


def eager_ms(fn, calls):
    """Per-call ms of `calls` back-to-back eager calls fn(0..calls-1)."""
    def block():
        for i in range(calls):
            fn(i)
    return events_ms(block) / calls


def capture(fn, calls, stream):
    """A CUDA graph of fn(0..calls-1), after a warm-up call on the capture stream."""
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn(0)  # llmm's workspace is per stream: allocate it on the capture stream before capture
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        for i in range(calls):
            fn(i)
    torch.cuda.synchronize()
    return g


def n_calls(est_ms, target_ms, copies):
    n = max(1, min(MAX_CALLS, int(math.ceil(target_ms / max(est_ms, 1e-3)))))
    return int(math.ceil(n / copies)) * copies if n > 1 else 1


def measure(impls, copies, reps, target_ms, stream):
    """impls: {name: fn(i)}. Returns {name: (graph_us, eager_us)}, repetitions alternating."""
    names = list(impls)
    est = {}
    for name in names:  # already warm (the correctness call); a rough per-call time
        eager_ms(impls[name], 2)
        est[name] = eager_ms(impls[name], 3)
    calls = {name: n_calls(est[name], target_ms, copies) for name in names}
    graphs = {}
    try:
        for name in names:
            graphs[name] = capture(impls[name], calls[name], stream)
        for name in names:  # warm replays
            for _ in range(3):
                graphs[name].replay()
        torch.cuda.synchronize()
        g_samples = {name: [] for name in names}
        e_samples = {name: [] for name in names}
        for r in range(reps):
            for name in (names if r % 2 == 0 else names[::-1]):
                g = graphs[name]
                g_samples[name].append(events_ms(g.replay) * 1000.0 / calls[name])
            for name in (names if r % 2 == 0 else names[::-1]):
                e_samples[name].append(eager_ms(impls[name], calls[name]) * 1000.0)
    finally:
        graphs.clear()
    return {name: (statistics.median(g_samples[name]), statistics.median(e_samples[name])) for name in names}


def measure_loop(fn, budget_ms=60.0):
    """Eager per-call us of the loop baseline (it syncs: no graph), cheaply."""
    fn(0)
    torch.cuda.synchronize()
    est = eager_ms(fn, 1)
    calls = max(1, min(20, int(budget_ms / 3 / max(est, 1e-3))))
    return statistics.median(eager_ms(fn, calls) * 1000.0 for _ in range(3))


# ---------------------------------------------------------------------------------------------
# Output

HEAD = ("{:<16} {:>5} {:>4} {:>10} {:>10} {:>6} {:>11} {:>9} {:>10} {:>10} {:>6} {:>10} {:>7} {:>7} {:>9}"
        .format("model", "m", "act", "llmm_g_us", "torch_g_us", "ratio", "triton_g_us", "vs_triton", "llmm_e_us",
                "torch_e_us", "e_rat", "loop_us", "GB/s", "TFLOP/s", "rel_err"))


def copy_bandwidth_gbps():
    """Device-to-device copy bandwidth, (read + write) bytes / time over 1 GiB, best of 5 (CUDA events)."""
    a = torch.empty(1 << 29, dtype=torch.bfloat16, device="cuda")
    b = torch.empty_like(a)
    b.copy_(a)
    best = 0.0
    for _ in range(5):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        b.copy_(a)
        e1.record()
        e1.synchronize()
        best = max(best, 2 * a.numel() * 2 / (e0.elapsed_time(e1) * 1e-3) * 1e-9)
    del a, b
    return best


def fmt_row(r):
    flag = " !" if not (r["max_rel_err"] <= TOL) else ""
    if r.get("loop_rel_err") is not None and not (r["loop_rel_err"] <= TOL):
        flag += " loop_err=%.2e!" % r["loop_rel_err"]
    if r.get("triton_rel_err") is not None and not (r["triton_rel_err"] <= TOL):
        flag += " triton_err=%.2e!" % r["triton_rel_err"]
    loop = "%.1f" % r["loop_eager_us"] if r.get("loop_eager_us") is not None else "-"
    t_us = "%.2f" % r["triton_us"] if r.get("triton_us") is not None else "-"
    t_rat = "%.2f%s" % (r["triton_speedup"], "" if r.get("triton_tune_complete", True) else "p") \
        if r.get("triton_us") is not None else "-"
    return ("{:<16} {:>5} {:>4} {:>10.2f} {:>10.2f} {:>6.2f} {:>11} {:>9} {:>10.2f} {:>10.2f} {:>6.2f} {:>10} {:>7.0f} "
            "{:>7.1f} {:>9.2e}{}".format(r["model"][:16], r["m"], r["active_experts"], r["us"], r["baseline_us"],
                                         r["speedup"], t_us, t_rat, r["eager_us"], r["baseline_eager_us"],
                                         r["eager_speedup"], loop, r["gbps"], r["tflops"], r["max_rel_err"], flag))


def make_row(model, H, inter, E, top_k, m, active, wbytes, flops, times, err, loop_us, loop_err, copies, device,
             reps, dtype="bf16", tri=None):
    """tri: the Triton case's record (triton_case), or None where Triton was not run."""
    us, eager_us = times["llmm"]
    b_us, b_eager_us = times["torch_grouped"]
    t_us, t_eager_us = times.get("triton", (None, None))
    extra = {}
    if tri is not None:
        extra = {"triton_us": t_us, "triton_speedup": t_us / us if t_us is not None else None,
                 "triton_eager_us": t_eager_us, "triton_config": tri.get("config"),
                 "triton_rel_err": tri.get("rel_err"), "triton_tune_s": tri.get("tune_s"),
                 "triton_tune_complete": tri.get("complete"), "triton_tune_timed": tri.get("timed"),
                 "triton_compile_s": tri.get("compile_s"),
                 "triton_tune_candidates": tri.get("candidates"), "triton_skipped": tri.get("skipped"),
                 "triton": tri.get("version")}
    return dict({"suite": "moe_ffn", "case": "%s m%d" % (model, m), "model": model, "dtype": dtype, "m": m, "n": H,
            "k": inter, "top_k": top_k, "experts": E, "active_experts": active, "weight_bytes": wbytes,
            "us": us, "baseline": BASELINE, "baseline_us": b_us, "speedup": b_us / us,
            "eager_us": eager_us, "baseline_eager_us": b_eager_us, "eager_speedup": b_eager_us / eager_us,
            "loop_eager_us": loop_us, "loop_rel_err": loop_err, "gbps": wbytes / us * 1e-3,
            "tflops": flops / us * 1e-6, "max_rel_err": err, "weight_copies": copies, "reps": reps,
            "device": device, "torch": torch.__version__, "llmm": getattr(llmm, "__version__", "?")}, **extra)


BANDS = [("m <= 16", lambda m: m <= 16), ("m 32..512", lambda m: 32 <= m <= 512), ("m >= 1024", lambda m: m >= 1024),
         ("other m (17..31, 513..1023)", lambda m: 16 < m < 32 or 512 < m < 1024)]


def summary(rows):
    lines = []
    for label, inside in BANDS:
        rs = [r for r in rows if inside(r["m"]) and "fp8_us" in r]
        if rs:
            v = [r["fp8_vs_bf16"] for r in rs]
            t = [r["fp8_vs_torch"] for r in rs]
            lines.append("moe_ffn FP8 (%s scales) vs llmm bf16 moe_ffn, %s: min %.2fx, median %.2fx; vs torch bf16 "
                         "composition median %.2fx (graph, %d cases)" % (rs[0]["fp8_kind"], label, min(v),
                                                                         statistics.median(v), statistics.median(t),
                                                                         len(rs)))
    for label, inside in BANDS:
        rs = [r for r in rows if inside(r["m"])]
        if not rs:
            continue
        g = [r["speedup"] for r in rs]
        e = [r["eager_speedup"] for r in rs]
        lines.append("moe_ffn vs torch._grouped_mm FFN, %s: min %.2fx, median %.2fx (graph); eager min %.2fx, "
                     "median %.2fx (%d cases)" % (label, min(g), statistics.median(g), min(e), statistics.median(e),
                                                  len(rs)))
    for label, inside in BANDS:
        rs = [r for r in rows if inside(r["m"]) and "copy_frac" in r]
        if rs:
            f = [r["copy_frac"] for r in rs]
            t = [r["triton_copy_frac"] for r in rs if r.get("triton_copy_frac")]
            lines.append("moe_ffn active weights' bytes at the copy bandwidth, %s: llmm min %.0f%%, median %.0f%%%s%s "
                         "(%d cases)" % (label, 100 * min(f), 100 * statistics.median(f),
                                         "; Triton median %.0f%%" % (100 * statistics.median(t)) if t else "",
                                         " (issue 48's decode target: 90%)" if label == "m <= 16" else "", len(rs)))
    for label, inside in BANDS:
        rs = [r for r in rows if inside(r["m"]) and r.get("triton_us") is not None]
        no = [r for r in rows if inside(r["m"]) and "triton_us" in r and r.get("triton_us") is None]
        if not rs and not no:
            continue
        target = TRITON_TARGETS.get(label)
        tail = "target %.1fx" % target if target else "no target"
        if not rs:
            lines.append("moe_ffn vs the tuned Triton fused MoE, %s: no Triton figure (%d cases skipped; %s)" %
                         (label, len(no), tail))
            continue
        t = [r["triton_speedup"] for r in rs]
        if target:
            tail += ", met in %d/%d" % (sum(1 for v in t if v >= target), len(t))
        part = sum(1 for r in rs if not r.get("triton_tune_complete", True))
        lines.append("moe_ffn vs the tuned Triton fused MoE, %s: min %.2fx, median %.2fx (graph; %s)%s%s" %
                     (label, min(t), statistics.median(t), tail,
                      "; %d partially tuned" % part if part else "",
                      "; %d cases without a Triton figure" % len(no) if no else ""))
    return lines


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS),
                    help="comma list of %s (default all)" % ", ".join(MODELS))
    ap.add_argument("--m", default=",".join(map(str, DEFAULT_M)), help="comma list of token counts")
    ap.add_argument("--json", default=None, help="write one JSON line per case here")
    ap.add_argument("--reps", type=int, default=0, help="timed repetitions per case (default 15, 7 at m >= 1024)")
    ap.add_argument("--target-ms", type=float, default=2.0, help="GPU time of one timed sample (graph replay / loop)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-loop", action="store_true", help="skip the torch loop baseline")
    ap.add_argument("--no-triton", action="store_true", help="skip the Triton fused-MoE baseline")
    ap.add_argument("--triton-tune-s", type=float, default=20.0,
                    help="Triton tuning budget per case in s, compiles not counted (default 20)")
    ap.add_argument("--fp8", default=None, choices=["block", "channel"],
                    help="also time llmm.moe_ffn on the same experts in FP8 e4m3 (llmm-side quantization with "
                         "these scales): columns fp8_g_us, fp8/bf16 = llmm bf16 us / llmm FP8 us, and the "
                         "FP8 output's error against the torch bf16 composition")
    ap.add_argument("--ab-fused", action="store_true",
                    help="also time llmm.moe_ffn with fuse_decode=True (the direct route's fused epilogues) at "
                         "m <= 16: their A/B row against the default (fused_vs_unfused = us / fused us)")
    ap.add_argument("--ab-sorted", action="store_true",
                    help="also time llmm.moe_ffn with LLMM_MOE_FFN_SORTED=0 (the routed-order composition: a second "
                         "map and staging copy for the down GEMM) at m > 16: the sorted pipeline's A/B row "
                         "(routed_vs_sorted = routed-order us / us)")
    ap.add_argument("--cpu-check", action="store_true",
                    help="no GPU: correctness of the implementations on tiny float32 CPU cases (Triton's in its "
                         "interpreter, with its own alignment / bf16 / tuning checks), then the table, JSON and "
                         "summary code with wall-clock CPU times (meaningless)")
    a = ap.parse_args()
    a.models = [s.strip().lower() for s in a.models.split(",") if s.strip()]
    bad = [s for s in a.models if s not in MODELS]
    if bad:
        ap.error("unknown model(s) %s; choose from %s" % (", ".join(bad), ", ".join(MODELS)))
    try:
        a.m = [int(s) for s in a.m.split(",") if s.strip()]
    except ValueError:
        ap.error("--m takes a comma list of integers")
    if not a.m or min(a.m) < 1:
        ap.error("--m needs token counts >= 1")
    return a


# ---------------------------------------------------------------------------------------------
# --cpu-check

def cpu_check(args):
    """Tiny float32 cases on the CPU: llmm (its float64 reference), the grouped composition (CPU
    torch._grouped_mm where this torch has it), the loop and Triton's fused MoE (interpreter, default
    configs) against a float64 loop; first triton_fused_moe.cpu_check (alignment, f32 / bf16, tune)."""
    have_grouped = hasattr(torch, "_grouped_mm")
    tiny = [("tiny-a", 64, 32, 8, 2), ("tiny-b", 48, 40, 16, 6), ("tiny-c", 32, 24, 4, 4)]
    ms = [1, 3, 17, 64]
    rows, bad = [], 0
    out_f = open(args.json, "w") if args.json else None
    print("cpu-check: torch %s, llmm %s, torch._grouped_mm on CPU: %s" %
          (torch.__version__, getattr(llmm, "__version__", "?"), "yes" if have_grouped else "no"))
    tfm = None
    if args.no_triton:
        print("cpu-check: the Triton column is skipped (--no-triton)")
    else:
        tfm, why = load_triton(True)
        if tfm is None:
            print("cpu-check: the Triton column is skipped: bench/triton_fused_moe.py not importable (%s)" % why)
        else:
            import triton
            print("cpu-check: Triton %s in its interpreter (TRITON_INTERPRET=1; its f32 -> bf16 casts truncate "
                  "where the GPU rounds to nearest)" % triton.__version__)
            bad += tfm.cpu_check(log=print)
    print(HEAD)
    for ci, (name, H, inter, E, top_k) in enumerate(tiny):
        w13, w2 = make_weights(H, inter, E, torch.float32, "cpu", args.seed + ci)
        for m in ms:
            x, ids, wts = make_routing(m, H, E, top_k, torch.float32, "cpu", args.seed * 1000003 + 7919 * ci + m)
            ref64 = torch_loop_ffn(x.double(), w13.double(), w2.double(), ids, wts.double())
            got = {"llmm": llmm_ffn(x, w13, w2, ids, wts), "torch_loop": torch_loop_ffn(x, w13, w2, ids, wts)}
            if have_grouped:
                got["torch_grouped"] = torch_grouped_ffn(x, w13, w2, ids, wts)
            # int64 ids go through the same paths
            got["llmm_i64"] = llmm_ffn(x, w13, w2, ids.long(), wts)
            if tfm is not None:  # default config: odd K and N (masked tiles), E 16 and 4, top_k 6 and 4
                got["triton"] = tfm.fused_moe(x, w13, w2, wts, ids)
            errs = {k: rel_err(v, ref64) for k, v in got.items()}
            for k, v in got.items():
                assert v.shape == x.shape and v.dtype == x.dtype, (k, v.shape, v.dtype)
            worst = max(errs.values())
            if not worst <= 1e-4:
                bad += 1
                print("cpu-check FAIL %s m %d: %s" % (name, m, errs))
            # the table/JSON/summary code with wall-clock times (meaningless numbers)
            def wall_us(fn):
                t0 = time.perf_counter()
                fn()
                return (time.perf_counter() - t0) * 1e6
            base = got["torch_grouped"] if have_grouped else got["torch_loop"]
            gfn = torch_grouped_ffn if have_grouped else torch_loop_ffn
            times = {"llmm": (wall_us(lambda: llmm_ffn(x, w13, w2, ids, wts)),) * 2,
                     "torch_grouped": (wall_us(lambda: gfn(x, w13, w2, ids, wts)),) * 2}
            tri = None
            if tfm is not None:
                times["triton"] = (wall_us(lambda: tfm.fused_moe(x, w13, w2, wts, ids)),) * 2
                tri = {"config": tfm.default_config(m, E, top_k), "rel_err": rel_err(got["triton"], base),
                       "tune_s": 0.0, "complete": True}
            active, wbytes, flops = case_numbers(m, H, inter, top_k, ids, 4)
            r = make_row(name, H, inter, E, top_k, m, active, wbytes, flops, times, rel_err(got["llmm"], base),
                         wall_us(lambda: torch_loop_ffn(x, w13, w2, ids, wts)), rel_err(got["torch_loop"], base), 1,
                         "cpu", 1, dtype="f32", tri=tri)
            rows.append(r)
            print(fmt_row(r) + "   [f64 errs: %s]" % ", ".join("%s %.1e" % kv for kv in errs.items()))
            if out_f:
                out_f.write(json.dumps(r) + "\n")
    # bf16 through the grouped composition (the dtype the GPU run uses), against float64
    if have_grouped:
        name, H, inter, E, top_k = tiny[0]
        w13, w2 = make_weights(H, inter, E, torch.bfloat16, "cpu", args.seed)
        x, ids, wts = make_routing(33, H, E, top_k, torch.bfloat16, "cpu", args.seed + 1)
        ref64 = torch_loop_ffn(x.double(), w13.double(), w2.double(), ids, wts.double())
        e_g = rel_err(torch_grouped_ffn(x, w13, w2, ids, wts), ref64)
        e_l = rel_err(torch_loop_ffn(x, w13, w2, ids, wts), ref64)
        try:
            e_m = "%.2e" % rel_err(llmm_ffn(x, w13, w2, ids, wts), ref64)
        except Exception as e:  # llmm's CPU backend may not take bf16 torch tensors
            e_m = "n/a (%s)" % (str(e).splitlines()[0] if str(e) else type(e).__name__)
        print("cpu-check bf16 m 33 vs float64: torch_grouped %.2e, torch_loop %.2e, llmm %s" % (e_g, e_l, e_m))
        if not (e_g <= TOL and e_l <= TOL):
            bad += 1
            print("cpu-check FAIL bf16 over %.0e" % TOL)
    if out_f:
        out_f.close()
    for line in summary(rows):
        print(line + "   [cpu wall clock: meaningless]")
    print("cpu-check: %s (%d cases, tolerance 1e-4 vs float64)" % ("FAILED" if bad else "ok", len(rows)))
    return 1 if bad else 0


# ---------------------------------------------------------------------------------------------
# The GPU run

def gpu_run(args):
    if not torch.cuda.is_available():
        fail("torch %s sees no CUDA device (this benchmark needs one; --cpu-check runs without)" % torch.__version__)
    if not hasattr(torch, "_grouped_mm"):
        fail("torch %s has no torch._grouped_mm (needs torch >= 2.8)" % torch.__version__)
    if not llmm.cuda_available():
        fail("llmm %s has no usable CUDA backend (built_with_cuda=%s)" %
             (getattr(llmm, "__version__", "?"), llmm.built_with_cuda()))
    t_start = time.time()
    dev = "cuda"
    cap = torch.cuda.get_device_capability()
    device = "cuda:%d %s" % (torch.cuda.current_device(), torch.cuda.get_device_name())
    print("moe_ffn: torch %s, llmm %s, %s (sm%d%d), bf16, seed %d" %
          (torch.__version__, getattr(llmm, "__version__", "?"), device, cap[0], cap[1], args.seed), flush=True)
    if not (cap == (9, 0) or cap[0] == 10):
        print("moe_ffn: note: torch._grouped_mm's bf16 fast path needs sm90/sm100; sm%d%d takes its fallback" % cap,
              flush=True)
    tfm = None
    if args.no_triton:
        print("moe_ffn: the Triton column is skipped (--no-triton)", flush=True)
    else:
        tfm, why = load_triton(False)
        if tfm is None:
            print("moe_ffn: the Triton column is skipped: bench/triton_fused_moe.py not importable (%s)" % why,
                  flush=True)
        else:
            import triton
            print("moe_ffn: Triton %s fused MoE, tuned per case (budget %.0f s besides compiles)" %
                  (triton.__version__, args.triton_tune_s), flush=True)
    copy_gbps = copy_bandwidth_gbps()
    print("moe_ffn: device-to-device copy %.0f GB/s (read + write bytes / time, 1 GiB): the floor of each row is "
          "its active experts' weight bytes at that rate" % copy_gbps, flush=True)
    print("ratio = torch_grouped us / llmm us (> 1: llmm faster); vs_triton = triton us / llmm us ('p': tuning "
          "stopped at its budget); g = CUDA-graph replay, e = eager; loop = transformers-style eager loop "
          "(m <= %d); GB/s and TFLOP/s from llmm's graph time" % LOOP_MAX_M)
    print(HEAD, flush=True)
    out_f = open(args.json, "w") if args.json else None
    stream = torch.cuda.Stream()
    rows, failed, over_tol = [], [], []
    for mi, key in enumerate(args.models):
        model, H, inter, E, top_k = MODELS[key]
        w13s = w2s = None
        w13q = w2q = w13s_ = w2s_ = None
        torch.cuda.empty_cache()
        try:
            w13, w2 = make_weights(H, inter, E, torch.bfloat16, dev, args.seed + 101 * mi)
        except torch.cuda.OutOfMemoryError:
            print("%-16s skipped: out of memory allocating the weights" % model, flush=True)
            continue
        total = w13.numel() * 2 + w2.numel() * 2
        for m in args.m:
            reps = args.reps if args.reps > 0 else (15 if m < 1024 else 7)
            copies = 1
            if m <= 64 and total < ROTATE_BELOW:
                copies = min(4, max(2, int(math.ceil(ROTATE_TARGET / total))))
            try:
                w13s = [w13] + [w13.clone() for _ in range(copies - 1)]
                w2s = [w2] + [w2.clone() for _ in range(copies - 1)]
                x, ids, wts = make_routing(m, H, E, top_k, torch.bfloat16, dev,
                                           args.seed * 1000003 + 7919 * mi + m)
                active, wbytes, flops = case_numbers(m, H, inter, top_k, ids, 2)

                def f_llmm(i):
                    return llmm_ffn(x, w13s[i % copies], w2s[i % copies], ids, wts)

                def f_torch(i):
                    return torch_grouped_ffn(x, w13s[i % copies], w2s[i % copies], ids, wts)

                def f_loop(i):
                    return torch_loop_ffn(x, w13s[i % copies], w2s[i % copies], ids, wts)

                ref = f_torch(0)
                got = f_llmm(0)
                torch.cuda.synchronize()
                err = rel_err(got, ref)
                loop_us = loop_err = None
                if m <= LOOP_MAX_M and not args.no_loop:
                    loop_err = rel_err(f_loop(0), ref)
                del got
                tri = tcfg = None
                if tfm is not None:
                    try:
                        tri, tcfg = triton_case(tfm, x, w13, w2, ids, wts, ref, args.triton_tune_s)
                    except torch.cuda.OutOfMemoryError:
                        raise
                    except Exception as e:  # keep llmm's and torch's figures
                        tri = {"skipped": "error: %s: %s" % (type(e).__name__, (str(e).splitlines() or [""])[0])}
                        torch.cuda.synchronize()

                def f_triton(i):
                    return tfm.fused_moe(x, w13s[i % copies], w2s[i % copies], wts, ids, tcfg)

                impls = {"llmm": f_llmm, "torch_grouped": f_torch}
                fp8_err = None
                if args.fp8:
                    if w13q is None:
                        w13q, w13s_ = fp8_stack(w13, args.fp8)
                        w2q, w2s_ = fp8_stack(w2, args.fp8)
                    w13qs = [w13q] + [w13q.clone() for _ in range(copies - 1)]
                    w2qs = [w2q] + [w2q.clone() for _ in range(copies - 1)]

                    def f_fp8(i):
                        return llmm.moe_ffn(x, w13qs[i % copies], w2qs[i % copies], ids, wts,
                                            w_gate_up_scale=w13s_, w_down_scale=w2s_)

                    fp8_err = rel_err(f_fp8(0), ref)
                    impls["llmm_fp8"] = f_fp8
                if args.ab_fused and m <= 16:
                    def f_fused(i):
                        return llmm.moe_ffn(x, w13s[i % copies], w2s[i % copies], ids, wts, fuse_decode=True)

                    impls["llmm_fused"] = f_fused
                if args.ab_sorted and m > 16:
                    def f_routed(i):
                        os.environ["LLMM_MOE_FFN_SORTED"] = "0"  # read by each call (and each capture)
                        try:
                            return llmm_ffn(x, w13s[i % copies], w2s[i % copies], ids, wts)
                        finally:
                            del os.environ["LLMM_MOE_FFN_SORTED"]

                    impls["llmm_routed"] = f_routed
                if tcfg is not None:
                    impls["triton"] = f_triton
                try:
                    times = measure(impls, copies, reps, args.target_ms, stream)
                except torch.cuda.OutOfMemoryError:
                    raise
                except Exception as e:
                    if "triton" not in impls:
                        raise
                    tri["skipped"] = "timing failed: %s: %s" % (type(e).__name__, (str(e).splitlines() or [""])[0])
                    torch.cuda.synchronize()
                    del impls["triton"]
                    times = measure(impls, copies, reps, args.target_ms, stream)
                if m <= LOOP_MAX_M and not args.no_loop:
                    loop_us = measure_loop(f_loop)
                del ref
            except torch.cuda.OutOfMemoryError:
                print("%-16s %5d skipped: out of memory" % (model, m), flush=True)
                w13s = w2s = None
                torch.cuda.empty_cache()
                continue
            except Exception as e:
                msg = str(e).splitlines()[0] if str(e) else type(e).__name__
                print("%-16s %5d FAILED: %s: %s" % (model, m, type(e).__name__, msg), flush=True)
                failed.append("%s m%d" % (model, m))
                w13s = w2s = None
                torch.cuda.empty_cache()
                continue
            w13s = w2s = None
            r = make_row(model, H, inter, E, top_k, m, active, wbytes, flops, times, err, loop_us, loop_err, copies,
                         device, reps, tri=tri)
            r["copy_gbps"] = copy_gbps
            r["copy_frac"] = r["gbps"] / copy_gbps
            if r.get("triton_us"):
                r["triton_copy_frac"] = wbytes / r["triton_us"] * 1e-3 / copy_gbps
            if "llmm_fp8" in times:
                f_us, f_eager = times["llmm_fp8"]
                r.update(fp8_kind=args.fp8, fp8_us=f_us, fp8_eager_us=f_eager, fp8_rel_err=fp8_err,
                         fp8_vs_bf16=r["us"] / f_us, fp8_vs_torch=r["baseline_us"] / f_us)
                if not (fp8_err <= FP8_TOL):
                    over_tol.append(r["case"] + " (fp8)")
            if "llmm_fused" in times:
                f_us, f_eager = times["llmm_fused"]
                r.update(fused_us=f_us, fused_eager_us=f_eager, fused_vs_unfused=r["us"] / f_us,
                         fused_vs_unfused_eager=r["eager_us"] / f_eager)
            if "llmm_routed" in times:
                o_us, o_eager = times["llmm_routed"]
                r.update(routed_us=o_us, routed_eager_us=o_eager, routed_vs_sorted=o_us / r["us"])
            rows.append(r)
            if not (err <= TOL) or (loop_err is not None and not (loop_err <= TOL)):
                over_tol.append(r["case"])
            if tri is not None and tri.get("rel_err") is not None and not (tri["rel_err"] <= TOL):
                over_tol.append(r["case"] + " (triton)")
            print(fmt_row(r), flush=True)
            if "fp8_us" in r:
                print("%-16s %5d   fp8 %s: %.2f us graph (%.2f eager), llmm bf16 / fp8 %.2fx, torch bf16 / fp8 "
                      "%.2fx, rel err %.2e vs the bf16 composition" %
                      (r["model"][:16], m, r["fp8_kind"], r["fp8_us"], r["fp8_eager_us"], r["fp8_vs_bf16"],
                       r["fp8_vs_torch"], r["fp8_rel_err"]), flush=True)
            if "fused_us" in r:
                print("%-16s %5d   fuse_decode=True: %.2f us graph (%.2f eager); unfused / fused %.3fx graph, %.3fx "
                      "eager" % (r["model"][:16], m, r["fused_us"], r["fused_eager_us"], r["fused_vs_unfused"],
                                 r["fused_vs_unfused_eager"]), flush=True)
            if "routed_us" in r:
                print("%-16s %5d   routed order (LLMM_MOE_FFN_SORTED=0): %.2f us graph (%.2f eager); routed / sorted "
                      "%.3fx graph" % (r["model"][:16], m, r["routed_us"], r["routed_eager_us"], r["routed_vs_sorted"]),
                      flush=True)
            if tri is not None:
                print(triton_note(tfm, tri), flush=True)
            if out_f:
                out_f.write(json.dumps(r) + "\n")
                out_f.flush()
        del w13, w2
        w13q = w2q = None
    if out_f:
        out_f.close()
    for line in summary(rows):
        print(line, flush=True)
    print("moe_ffn: %d cases in %.0f s%s%s" %
          (len(rows), time.time() - t_start,
           "; %d FAILED: %s" % (len(failed), ", ".join(failed)) if failed else "",
           "; rel err over %.0e: %s" % (TOL, ", ".join(over_tol)) if over_tol else ""), flush=True)
    return 1 if failed or over_tol else 0


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    if args.cpu_check:
        return cpu_check(args)
    return gpu_run(args)


if __name__ == "__main__":
    sys.exit(main())
