#!/usr/bin/env python3
"""Where moe_ffn's time goes against the tuned Triton fused MoE: each implementation's CUDA
kernels (torch.profiler), the GPU time per call of each kernel name, averaged over the profiled
calls, with the share of the call; for one model's shapes at the given m.

    python bench/moe_ffn_profile.py [--model qwen3-30b] [--m 16,256] [--calls 20] [--triton-tune-s 8]
        [--ab-sorted] [--no-triton]
"""
import argparse
import collections
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import moe_ffn as bench  # noqa: E402  (the same weights, routing and Triton loader as the FFN bench)


def kernel_table(fn, calls):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    per = collections.defaultdict(lambda: [0.0, 0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            per[e.name][0] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
            per[e.name][1] += 1
    return {name: (us / calls, n / calls) for name, (us, n) in per.items()}


def show(label, table):
    total = sum(us for us, _ in table.values())
    print(f"  {label}: {total:.1f} us of kernels a call")
    for name, (us, n) in sorted(table.items(), key=lambda kv: -kv[1][0]):
        print(f"    {us:9.2f} us {100 * us / total:5.1f}%  x{n:4.1f}  {name[:110]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen3-30b", choices=sorted(bench.MODELS))
    ap.add_argument("--m", default="16,256")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--triton-tune-s", type=float, default=8.0)
    ap.add_argument("--ab-sorted", action="store_true", help="also profile moe_ffn with LLMM_MOE_FFN_SORTED=0")
    ap.add_argument("--no-triton", action="store_true", help="skip the Triton fused MoE")
    a = ap.parse_args()
    _, H, inter, E, top_k = bench.MODELS[a.model]
    tfm, why = (None, "skipped (--no-triton)") if a.no_triton else bench.load_triton(False)
    w13, w2 = bench.make_weights(H, inter, E, torch.bfloat16, "cuda", 1)
    bw = bench.copy_bandwidth_gbps() * 1e9
    print(f"{torch.cuda.get_device_name()}; {a.model} H {H} I {inter} E {E} top_k {top_k}; copy {bw / 1e12:.2f} TB/s; "
          f"Triton: {why or 'ok'}")
    for m in (int(v) for v in a.m.split(",")):
        x, ids, wts = bench.make_routing(m, H, E, top_k, torch.bfloat16, "cuda", 100 + m)
        active, wbytes, flops = bench.case_numbers(m, H, inter, top_k, ids, 2)
        print(f"m {m}: {active} active experts, {wbytes / 1e6:.0f} MB of weights: {wbytes / bw * 1e6:.1f} us at the "
              f"copy bandwidth; {flops / 1e9:.1f} GFLOP: {flops / 800e12 * 1e6:.1f} us at 800 TFLOP/s")
        show("llmm.moe_ffn", kernel_table(lambda: bench.llmm_ffn(x, w13, w2, ids, wts), a.calls))
        if a.ab_sorted:  # the routed-order composition, same weights and routing (read by each call)
            os.environ["LLMM_MOE_FFN_SORTED"] = "0"
            try:
                show("llmm.moe_ffn, LLMM_MOE_FFN_SORTED=0", kernel_table(lambda: bench.llmm_ffn(x, w13, w2, ids, wts), a.calls))
            finally:
                del os.environ["LLMM_MOE_FFN_SORTED"]
        if tfm is not None:
            res = tfm.tune(x, w13, w2, wts, ids, budget_s=a.triton_tune_s)
            if res["gate_up"] is None:
                print("  Triton: no config timed in the budget")
                continue
            cfg = {"gate_up": res["gate_up"], "down": res["down"]}
            print(f"  Triton config: {tfm.cfg_str(cfg['gate_up'])} / {tfm.cfg_str(cfg['down'])}")
            show("Triton fused MoE", kernel_table(lambda: tfm.fused_moe(x, w13, w2, wts, ids, config=cfg), a.calls))


if __name__ == "__main__":
    main()
