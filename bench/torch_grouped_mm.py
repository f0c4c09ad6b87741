#!/usr/bin/env python3
"""torch._grouped_mm baseline for llmm-bench's MoE suite, on the SAME routing.

    LLMM_MOE_ROUTING=build/moe-routing.jsonl build/cuda/bench/llmm-bench --suite moe --json bench.json
    python3 bench/torch_grouped_mm.py --routing build/moe-routing.jsonl --json torch.json

llmm-bench writes one line per bf16 MoE case to the routing file (case name, E, top_k, K, N, M,
weight copies, per-expert row counts). For each case this script times
torch._grouped_mm(a, b, offs=offs) on rows already permuted by expert (the routing itself, the
gather and the scatter are NOT counted): a [M * top_k, K] bf16, b the experts' weights
[E, K, N] bf16 (by default a transposed view of a row-major [E, N, K] stack, the layout llmm
reads; --weight-layout kn: a contiguous [E, K, N] stack), offs int32 cumulative row counts [E].
Timing follows llmm-bench (bench/gpu/timing.cpp): eager warm-up, a CUDA graph of back-to-back
calls lasting ~3 ms per replay (weights rotating over the same number of copies of the expert
stack as llmm-bench used), at least 40 ms of warm replays, then 20 timed replays between CUDA
events; per-call median, min and max. Each case's output is checked on a few rows against a
float64 reference. Rows are JSON lines in llmm-bench's format with suite "moe_torch";
scripts/bench-summary merges them into the llmm rows of the same case and dtype. GB/s is over
the active experts' weight bytes, as in llmm-bench's MoE rows.

Fails soft: without the routing file, torch, CUDA, torch._grouped_mm or its bf16 fast path
(sm90/sm100), it prints one 'torch_grouped_mm: skipped: ...' line and exits 0 with no rows.
Exits 1 when the routing file is malformed or some case failed. --device cpu only exercises the script on small synthetic
routing files (wall-clock timing, no graphs): its times mean nothing.
"""
import argparse
import bisect
import json
import sys
import time

TARGET_MS = 3.0  # one graph replay, as GraphTimer's default
WARM_MS = 40.0   # warm replays before timing, as GraphTimer
MAX_CALLS = 1000


def note(msg):
    print("torch_grouped_mm: " + msg, flush=True)


def load_cases(path):
    cases = []
    with open(path) as f:
        for i, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            c = json.loads(line)
            counts = c["counts"]
            if len(counts) != c["n_experts"] or sum(counts) != c["m"] * c["top_k"] or min(counts) < 0:
                raise ValueError("%s line %d (%s): counts do not match n_experts %d and m x top_k %d" %
                                 (path, i, c.get("case"), c["n_experts"], c["m"] * c["top_k"]))
            cases.append(c)
    return cases


class Timer:
    """Per-call median/min/max of a function of the call index, like llmm-bench's GraphTimer."""

    def __init__(self, torch, device, repeats):
        self.torch, self.device, self.repeats = torch, device, repeats

    def run(self, fn):
        torch = self.torch
        if self.device == "cpu":  # script test only
            fn(0)
            samples = []
            for r in range(self.repeats):
                t0 = time.perf_counter()
                fn(r)
                samples.append((time.perf_counter() - t0) * 1e6)
            samples.sort()
            return samples[len(samples) // 2], samples[0], samples[-1], 1
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for i in range(3):
            fn(i)
        torch.cuda.synchronize()
        e0.record()
        for i in range(5):
            fn(i)
        e1.record()
        e1.synchronize()
        est_ms = e0.elapsed_time(e1) / 5
        calls = max(1, min(MAX_CALLS, int(TARGET_MS / max(est_ms, 1e-4))))
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(calls):
                fn(i)

        def replay_ms():
            e0.record()
            g.replay()
            e1.record()
            e1.synchronize()
            return e0.elapsed_time(e1)

        warm, w = 0.0, 0
        while w < 200 and warm < WARM_MS:
            warm += replay_ms()
            w += 1
        samples = sorted(replay_ms() * 1000.0 / calls for _ in range(self.repeats))
        del g
        return samples[len(samples) // 2], samples[0], samples[-1], calls


def check_rows(torch, a, w0, offs_list, out, layout, n_rows):
    """Max |err| and max |err| / sum_k |a||b| over n_rows rows spread over the output (float64)."""
    rows = a.shape[0]
    picks = sorted({min(rows - 1, int((i + 0.5) * rows / n_rows)) for i in range(n_rows)})
    max_abs, max_rel = 0.0, 0.0
    for r in picks:
        e = bisect.bisect_right(offs_list, r)  # group g holds rows [offs[g-1], offs[g])
        wd = w0[e].double()                    # [N, K] (nk) or [K, N] (kn)
        x = a[r].double()
        ref = wd @ x if layout == "nk" else x @ wd
        scale = wd.abs() @ x.abs() if layout == "nk" else x.abs() @ wd.abs()
        got = out[r].double()
        err = (got - ref).abs()
        if not bool(torch.isfinite(got).all()):
            return float("inf"), float("inf"), len(picks)
        max_abs = max(max_abs, float(err.max()))
        max_rel = max(max_rel, float((err / scale.clamp_min(1e-300)).max()))
    return max_abs, max_rel, len(picks)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--routing", required=True, help="JSON lines written by llmm-bench (LLMM_MOE_ROUTING)")
    ap.add_argument("--json", required=True, help="output JSON lines (created empty when nothing is measured)")
    ap.add_argument("--weight-layout", choices=["nk", "kn"], default="nk",
                    help="nk: b = [E, N, K] stack transposed to [E, K, N] (llmm's layout); kn: contiguous [E, K, N]")
    ap.add_argument("--repeats", type=int, default=20, help="timed replays per case")
    ap.add_argument("--check-rows", type=int, default=8, help="output rows checked against float64 per case")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: test the script only")
    args = ap.parse_args()
    t_start = time.time()
    open(args.json, "w").close()

    try:
        cases = load_cases(args.routing)
    except OSError as e:
        note("skipped: cannot read routing file %s: %s" % (args.routing, e))
        return 0
    except (ValueError, KeyError, TypeError) as e:  # a broken file is a bug, not a missing dependency
        note("FAILED: malformed routing file %s: %s" % (args.routing, e))
        return 1
    skipped_dtype = sum(1 for c in cases if c["dtype"] != "bf16")
    cases = [c for c in cases if c["dtype"] == "bf16"]
    if not cases:
        note("skipped: no bf16 cases in %s" % args.routing)
        return 0
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install
        note("skipped: torch not importable (%s)" % e)
        return 0
    if not hasattr(torch, "_grouped_mm"):
        note("skipped: torch %s has no torch._grouped_mm" % torch.__version__)
        return 0
    dev = args.device
    if dev == "cuda":
        if not torch.cuda.is_available():
            note("skipped: torch %s sees no CUDA device" % torch.__version__)
            return 0
        cap = torch.cuda.get_device_capability()
        if not (cap == (9, 0) or cap[0] == 10):
            # Elsewhere bf16 takes torch's fallback: a loop over groups with a host sync.
            note("skipped: torch._grouped_mm's bf16 fast path needs sm90/sm100, device is sm%d%d" % cap)
            return 0
        device_label = "cuda:%d %s" % (torch.cuda.current_device(), torch.cuda.get_device_name())
    else:
        device_label = "cpu"
    try:  # a tiny probe: the op exists and runs on this build and device
        pa = torch.randn(4, 16, device=dev, dtype=torch.bfloat16)
        pb = torch.randn(2, 16, 16, device=dev, dtype=torch.bfloat16).transpose(-2, -1)
        torch._grouped_mm(pa, pb, offs=torch.tensor([1, 4], device=dev, dtype=torch.int32))
        if dev == "cuda":
            torch.cuda.synchronize()
    except Exception as e:
        note("skipped: torch._grouped_mm probe failed on %s: %s" % (dev, str(e).splitlines()[0] if str(e) else e))
        return 0

    timer = Timer(torch, dev, args.repeats)
    print("torch %s, %s, weight layout %s, %d bf16 cases%s" %
          (torch.__version__, device_label, args.weight_layout, len(cases),
           " (%d non-bf16 cases not timed: torch._grouped_mm's fast path is bf16 only)" % skipped_dtype
           if skipped_dtype else ""), flush=True)
    fmt = "{:<30} {:>5} {:>6} {:>6} {:>6} {:>10} {:>8} {:>8} {:>9} {:>9}"
    print(fmt.format("case", "act", "m", "n", "k", "us", "TFLOP/s", "GB/s", "max_err", "max_rel"), flush=True)
    rows_out, failed = 0, []
    out_f = open(args.json, "a")
    model_key, w, a_full = None, None, None
    for c in cases:
        E, top_k, K, N, m = c["n_experts"], c["top_k"], c["k"], c["n"], c["m"]
        rows = m * top_k
        key = (c["model"], E, K, N, int(c.get("weight_copies", 1)))
        try:
            if key != model_key:
                w, a_full, model_key = None, None, None
                if dev == "cuda":
                    torch.cuda.empty_cache()
                copies = key[4]
                shape = (E, N, K) if args.weight_layout == "nk" else (E, K, N)
                w = [torch.randn(*shape, device=dev, dtype=torch.bfloat16) for _ in range(copies)]
                max_rows = max(cc["m"] * cc["top_k"] for cc in cases
                               if (cc["model"], cc["n_experts"], cc["k"], cc["n"], int(cc.get("weight_copies", 1))) == key)
                a_full = torch.randn(max_rows, K, device=dev, dtype=torch.bfloat16) * 0.25
                model_key = key
            bs = [x.transpose(-2, -1) if args.weight_layout == "nk" else x for x in w]  # [E, K, N] views
            a = a_full[:rows]
            offs_list, acc = [], 0
            for n_e in c["counts"]:
                acc += n_e
                offs_list.append(acc)
            offs = torch.tensor(offs_list, device=dev, dtype=torch.int32)
            out = torch._grouped_mm(a, bs[0], offs=offs)
            if dev == "cuda":
                torch.cuda.synchronize()
            max_abs, max_rel, n_checked = check_rows(torch, a, w[0], offs_list, out, args.weight_layout,
                                                     args.check_rows)
            del out
            copies = len(bs)
            med, lo, hi, calls = timer.run(lambda i: torch._grouped_mm(a, bs[i % copies], offs=offs))
        except Exception as e:
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            note("%s FAILED: %s" % (c["case"], msg))
            failed.append(c["case"])
            if dev == "cuda" and isinstance(e, torch.cuda.OutOfMemoryError):
                w, a_full, model_key = None, None, None
                torch.cuda.empty_cache()
            continue
        active = sum(1 for n_e in c["counts"] if n_e > 0)
        flops = 2.0 * rows * N * K
        wbytes = float(active) * N * K * 2
        row = {"suite": "moe_torch", "case": c["case"], "route": "torch._grouped_mm",
               "kernel": "cutlass_bf16_grouped_b%s" % args.weight_layout, "dtype": "bf16", "precision": "-",
               "batch": active, "m": m, "n": N, "k": K, "us": med, "us_min": lo, "us_max": hi,
               "tflops": flops / med * 1e-6, "gbps": wbytes / med * 1e-3, "baseline": "-", "baseline_us": None,
               "speedup": None, "max_abs_err": max_abs, "max_rel_err": max_rel,
               "err_note": "%d rows x %d cols vs float64" % (n_checked, N), "device": device_label,
               "torch": torch.__version__, "calls": calls, "repeats": args.repeats, "weight_copies": len(bs),
               "routing": c.get("routing")}
        out_f.write(json.dumps(row) + "\n")
        out_f.flush()
        rows_out += 1
        print(fmt.format(c["case"][:30], active, m, N, K, "%.2f" % med, "%.1f" % row["tflops"], "%.0f" % row["gbps"],
                         "%.2e" % max_abs, "%.2e" % max_rel), flush=True)
    out_f.close()
    summary = "%d rows in %.0f s (torch %s, weights %s)" % (rows_out, time.time() - t_start, torch.__version__,
                                                             args.weight_layout)
    if failed:
        note("%s; %d FAILED: %s" % (summary, len(failed), ", ".join(failed[:8]) + (" ..." if len(failed) > 8 else "")))
        return 1
    note(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
