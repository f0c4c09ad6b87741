#!/usr/bin/env python3
"""Where the grouped expert GEMM loses against a dense GEMM of the same FLOPs: Qwen3-30B-A3B's
gate_up ([E 128, 1536, 2048]) and down ([128, 2048, 768]), bf16, m tokens x top_k 8, graph replay.

    python bench/moe_gemm_gap.py [--m 4096] [--rows uniform,balanced,dense]

Rows per GEMM:
  uniform   llmm.matmul_id route "grouped", bf16 out, torch.topk of random logits (map and
            staging included); the rows an expert gets vary (about +-6% at m 4096), so about
            half the experts need a second, narrow tile for their last rows
  balanced  the same call where every expert gets exactly m top_k / E rows (token t takes
            experts 8t .. 8t+7 mod E): one tile class, no tails
  dense     llmm.matmul route "tiled_sm90" and torch.matmul on one [m top_k, k] x [k, n]
            product (the same FLOPs, one weight matrix that stays in L2)
TFLOP/s = 2 m top_k n k / time. Set LLMM_TILED_SCHED=0 to time the engine's fixed tile share.
"""
import argparse

import torch

import llmm


def graph_us(fn, calls=20, reps=7):
    fn()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            for _ in range(calls):
                fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1000 / calls)
    return sorted(ts)[reps // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=4096)
    ap.add_argument("--rows", default="uniform,balanced,dense")
    args = ap.parse_args()
    rows = args.rows.split(",")
    torch.manual_seed(0)
    dev, m, E, top_k = "cuda", args.m, 128, 8
    for name, n, k in (("gate_up", 1536, 2048), ("down", 2048, 768)):
        w = torch.randn(E, n, k, device=dev, dtype=torch.bfloat16) * 0.02
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        out = torch.empty(m, top_k, n, device=dev, dtype=torch.bfloat16)
        ids = {
            "uniform": torch.topk(torch.randn(m, E, device=dev), top_k, dim=1).indices.to(torch.int32),
            "balanced": ((torch.arange(m, device=dev)[:, None] * top_k + torch.arange(top_k, device=dev)[None]) % E).to(torch.int32),
        }
        flops = 2 * m * top_k * n * k
        results = []
        for r in ("uniform", "balanced"):
            if r in rows:
                t = graph_us(lambda: llmm.matmul_id(w, x, ids[r], out, route="grouped", out_dtype=torch.bfloat16))
                results.append((f"matmul_id grouped, {r} routing", t))
        if "dense" in rows:
            xs = torch.randn(m * top_k, k, device=dev, dtype=torch.bfloat16)
            od = torch.empty(m * top_k, n, device=dev, dtype=torch.bfloat16)
            results.append(("dense llmm tiled_sm90", graph_us(lambda: llmm.matmul(xs, w[0].T, od, route="tiled_sm90"))))
            results.append(("dense torch.matmul", graph_us(lambda: torch.matmul(xs, w[0].T, out=od))))
        if "uniform" in rows:
            cnt = torch.bincount(ids["uniform"].flatten().long(), minlength=E)
            print(f"{name}: uniform routing, rows an expert {int(cnt.min())}..{int(cnt.max())}, "
                  f"{int((cnt > m * top_k // E).sum())} experts above {m * top_k // E}")
        for label, t in results:
            print(f"{name:8s} {label:36s} {t:9.1f} us {flops / t / 1e6:7.1f} TFLOP/s")


if __name__ == "__main__":
    main()
