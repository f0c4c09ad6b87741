#!/usr/bin/env python3
"""transformers' own experts implementations against llmm's, on the experts module of a
Qwen3-MoE-style block (issue 48: "MoE blocks >= 2x faster than transformers' fastest built-in
experts implementation at prefill and decode").

    python bench/transformers_experts.py [--models qwen3-30b,qwen3-235b,mixtral,dsv2-lite]
                                         [--m 1,16,256,4096] [--json FILE] [--reps N]
    python bench/transformers_experts.py --cpu-check   # no GPU: correctness of every path only

Per case (bf16; transformers' Qwen3MoeExperts built from a Qwen3MoeConfig of the model's sizes, its
gate_up_proj [E, 2I, H] and down_proj [E, H, I] set to bench/moe_ffn.py's random weights; routing
as there: torch.topk of random logits, softmax over the chosen ones, int64 ids as a router gives
them, weights in bf16) this times the module's forward(hidden_states, top_k_index, top_k_weights)
under each `config._experts_implementation`:
  eager        the module's own loop over the active experts (it syncs with the host: eager
               timing only, at m <= 64)
  batched_mm   transformers' batched experts (each routed row gathers its expert's weights:
               m <= 16 only, its gathered weights grow as m * top_k * 3 I H)
  grouped_mm   transformers' torch._grouped_mm experts
  llmm         llmm.transformers_experts: one torch.ops.llmm.moe_ffn call
as CUDA-graph replay and eager time per call (bench/moe_ffn.py's method: alternating rounds,
medians; decode cases rotate weight copies past L2). Each implementation's output is compared
with llmm's (max |diff| / max |ref|; over 3e-2 is a failure). best = the fastest transformers
implementation in graph replay where it captures, else eager; ratio = best us / llmm us (issue 48's
target: >= 2). --json writes one line per case (suite "transformers_experts"). Exits 2 without
torch, CUDA, transformers >= 5 or llmm, 1 when a case failed or an output is over tolerance.
"""
import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import moe_ffn as M  # noqa: E402  (torch, llmm, timing and inputs shared with bench/moe_ffn.py)

torch = M.torch
llmm = M.llmm
TOL = 3e-2
TARGET = 2.0
IMPLS = ("eager", "batched_mm", "grouped_mm", "llmm")
EAGER_MAX_M = 64
BATCHED_MAX_M = 16


def fail(msg, code=2):
    print("transformers_experts: " + msg, file=sys.stderr, flush=True)
    sys.exit(code)


def load_transformers():
    try:
        import transformers
        from transformers.models.qwen3_moe import modeling_qwen3_moe as qm
    except Exception as e:
        fail("cannot import transformers' Qwen3-MoE (transformers >= 5 needed): %s" % e)
    major = int(transformers.__version__.split(".")[0])
    if major < 5:
        fail("transformers %s has no ExpertsInterface (>= 5 needed)" % transformers.__version__)
    import llmm.transformers_experts  # noqa: F401  (registers "llmm")
    return transformers, qm


def experts_module(transformers, qm, H, inter, E, top_k, w13, w2):
    cfg = transformers.Qwen3MoeConfig(hidden_size=H, moe_intermediate_size=inter, num_experts=E,
                                      num_experts_per_tok=top_k, hidden_act="silu")
    ex = qm.Qwen3MoeExperts(cfg)
    ex.gate_up_proj = torch.nn.Parameter(w13, requires_grad=False)  # the same storage: no copy
    ex.down_proj = torch.nn.Parameter(w2, requires_grad=False)
    return ex.eval()


def runner(ex, impl, x, ids, wts):
    def f(_i=0):
        ex.config._experts_implementation = impl
        with torch.inference_mode():
            return ex(x, ids, wts)
    return f


def impls_for(m, wanted):
    out = []
    for name in wanted:
        if name == "eager" and m > EAGER_MAX_M:
            continue
        if name == "batched_mm" and m > BATCHED_MAX_M:
            continue
        out.append(name)
    return out


def cpu_check(args):
    transformers, qm = load_transformers()
    H, inter, E, top_k = 64, 32, 8, 2
    worst = 0.0
    for m in (1, 5, 33):
        w13, w2 = M.make_weights(H, inter, E, torch.float32, "cpu", 3)
        x, ids, wts = M.make_routing(m, H, E, top_k, torch.float32, "cpu", 7 + m)
        ids = ids.long()
        ex = experts_module(transformers, qm, H, inter, E, top_k, w13, w2)
        ref = runner(ex, "llmm", x, ids, wts)()
        for name in impls_for(m, IMPLS):
            if name == "llmm":
                continue
            try:
                got = runner(ex, name, x, ids, wts)()
            except Exception as e:  # an implementation this torch build lacks on the CPU
                print("cpu-check m %d %s: skipped (%s: %s)" % (m, name, type(e).__name__, str(e).splitlines()[0][:80]))
                continue
            err = M.rel_err(got, ref)
            worst = max(worst, err)
            print("cpu-check m %d %s vs llmm: %.2e" % (m, name, err))
    ok = worst <= 1e-4
    print("cpu-check: %s (worst %.2e, tolerance 1e-4 in float32)" % ("ok" if ok else "FAILED", worst))
    return 0 if ok else 1


def gpu_run(args):
    if not torch.cuda.is_available():
        fail("torch sees no CUDA device (--cpu-check runs without one)")
    transformers, qm = load_transformers()
    dev = "cuda"
    print("transformers_experts: torch %s, transformers %s, llmm %s, %s; bf16; ratio = best transformers us / "
          "llmm us (target %.1f)" % (torch.__version__, transformers.__version__, getattr(llmm, "__version__", "?"),
                                     torch.cuda.get_device_name(), TARGET), flush=True)
    out_f = open(args.json, "w") if args.json else None
    stream = torch.cuda.Stream()
    rows, failed = [], []
    t0 = time.time()
    for mi, key in enumerate(args.models):
        model, H, inter, E, top_k = M.MODELS[key]
        w13, w2 = M.make_weights(H, inter, E, torch.bfloat16, dev, args.seed + 101 * mi)
        total = (w13.numel() + w2.numel()) * 2
        for m in args.m:
            reps = args.reps if args.reps > 0 else (9 if m < 1024 else 5)
            copies = min(4, max(2, int(math.ceil(M.ROTATE_TARGET / total)))) if m <= 64 and total < M.ROTATE_BELOW else 1
            try:
                exs = [experts_module(transformers, qm, H, inter, E, top_k, w13 if c == 0 else w13.clone(),
                                      w2 if c == 0 else w2.clone()) for c in range(copies)]
                x, ids, wts = M.make_routing(m, H, E, top_k, torch.bfloat16, dev, args.seed * 1000003 + 7919 * mi + m)
                ids, wts = ids.long(), wts.to(torch.bfloat16)
                names = impls_for(m, args.impls)
                fns = {n: (lambda n: (lambda i: runner(exs[i % copies], n, x, ids, wts)()))(n) for n in names}
                ref = fns["llmm"](0)
                errs = {}
                for n in names:
                    if n != "llmm":
                        errs[n] = M.rel_err(fns[n](0), ref)
                torch.cuda.synchronize()
                # An implementation that syncs with the host cannot be captured: eager timing only.
                graphable, eager_only = {}, [n for n in names if n == "eager"]
                for n in names:
                    if n == "eager":
                        continue
                    try:
                        M.capture(fns[n], 1, stream)
                        graphable[n] = fns[n]
                    except Exception:
                        if n == "llmm":
                            raise
                        torch.cuda.synchronize()
                        eager_only.append(n)
                times = M.measure(graphable, copies, reps, args.target_ms, stream)
                for n in eager_only:
                    times[n] = (None, M.measure_loop(fns[n]))
            except torch.cuda.OutOfMemoryError:
                print("%-16s %5d skipped: out of memory" % (model, m), flush=True)
                torch.cuda.empty_cache()
                continue
            except Exception as e:
                print("%-16s %5d FAILED: %s: %s" % (model, m, type(e).__name__, (str(e).splitlines() or [""])[0]),
                      flush=True)
                failed.append("%s m%d" % (model, m))
                torch.cuda.empty_cache()
                continue
            l_g, l_e = times["llmm"]
            others = {n: t for n, t in times.items() if n != "llmm"}
            best_name = min(others, key=lambda n: others[n][0] if others[n][0] is not None else others[n][1]) \
                if others else None
            best_us = (others[best_name][0] if others[best_name][0] is not None else others[best_name][1]) \
                if best_name else None
            best_e = min(t[1] for t in others.values()) if others else None
            r = {"suite": "transformers_experts", "case": "%s_m%d" % (key, m), "model": model, "m": m, "H": H,
                 "I": inter, "E": E, "top_k": top_k, "llmm_us": l_g, "llmm_eager_us": l_e,
                 "times": {n: {"graph_us": t[0], "eager_us": t[1]} for n, t in times.items()}, "rel_err": errs,
                 "best": best_name, "best_us": best_us, "ratio": best_us / l_g if best_us else None,
                 "ratio_eager": best_e / l_e if best_e else None, "copies": copies,
                 "device": torch.cuda.get_device_name(), "transformers": transformers.__version__}
            rows.append(r)
            over = [n for n, e in errs.items() if not (e <= TOL)]
            if over:
                failed.append("%s m%d (error: %s)" % (model, m, ", ".join(over)))
            cells = "  ".join("%s %s/%.1f" % (n, "-" if t[0] is None else "%.1f" % t[0], t[1]) for n, t in times.items())
            print("%-16s %5d  %s  best %s: %.2fx graph, %.2fx eager%s" %
                  (model, m, cells, best_name, r["ratio"] or 0, r["ratio_eager"] or 0,
                   "  ERR " + ",".join(over) if over else ""), flush=True)
            if out_f:
                out_f.write(json.dumps(r) + "\n")
                out_f.flush()
        del w13, w2
        torch.cuda.empty_cache()
    for band, lo, hi in (("m <= 16", 0, 16), ("m 32..512", 32, 512), ("m >= 1024", 1024, 1 << 30)):
        rs = [r["ratio"] for r in rows if lo <= r["m"] <= hi and r["ratio"]]
        if rs:
            print("target %s: best transformers experts / llmm >= %.1f: min %.2f median %.2f over %d cases: %s" %
                  (band, TARGET, min(rs), sorted(rs)[len(rs) // 2], len(rs), "met" if min(rs) >= TARGET else "MISSED"))
    print("transformers_experts: %d cases in %.0f s%s" % (len(rows), time.time() - t0,
                                                          "; FAILED: " + ", ".join(failed) if failed else ""))
    if out_f:
        out_f.close()
    return 1 if failed else 0


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="qwen3-30b,qwen3-235b", help="comma list of " + ",".join(M.MODELS))
    ap.add_argument("--m", default="1,16,256,4096", help="comma list of token counts")
    ap.add_argument("--impls", default=",".join(IMPLS), help="comma list of " + ",".join(IMPLS) + " (llmm always)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--reps", type=int, default=0)
    ap.add_argument("--target-ms", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cpu-check", action="store_true", help="no GPU: every implementation against llmm on the CPU")
    a = ap.parse_args()
    a.models = [s.strip().lower() for s in a.models.split(",") if s.strip()]
    bad = [s for s in a.models if s not in M.MODELS]
    if bad:
        fail("unknown model(s) %s (known: %s)" % (", ".join(bad), ", ".join(M.MODELS)))
    a.m = [int(s) for s in a.m.split(",") if s.strip()]
    a.impls = [s.strip() for s in a.impls.split(",") if s.strip()]
    if "llmm" not in a.impls:
        a.impls.append("llmm")
    bad = [s for s in a.impls if s not in IMPLS]
    if bad:
        fail("unknown implementation(s) %s (known: %s)" % (", ".join(bad), ", ".join(IMPLS)))
    return a


if __name__ == "__main__":
    args = parse_args()
    sys.exit(cpu_check(args) if args.cpu_check else gpu_run(args))
