"""Host cost of one llmm call from Python on CUDA, next to torch's own op, on problems so small that
the GPU time is negligible: what a decode step pays per op before any kernel work.

Each figure is the best of 7 batches of N back-to-back calls ending in one synchronize, divided
by N (wall clock, microseconds per call). "graph replay" captures N calls in one CUDA graph and
times its replay: the GPU-side cost with no Python in the loop.

    python bench/python_overhead.py [--n 2000] [--json FILE]
"""
import argparse
import json
import time

import torch

import llmm
import llmm.torch_ops as T


def per_call_us(fn, n, sync):
    fn()
    sync()
    best = float("inf")
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


def graph_replay_us(fn, n):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()  # warm-up on the capture stream (scratch and workspaces allocated here)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):  # the warmed stream: llmm's workspaces are per stream
        for _ in range(n):
            fn()
    return per_call_us(g.replay, 20, torch.cuda.synchronize) / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    n, sync, dev = a.n, torch.cuda.synchronize, "cuda"
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(1, 256, device=dev, dtype=torch.bfloat16, generator=g)
    w = torch.randn(256, 256, device=dev, dtype=torch.bfloat16, generator=g)
    experts = torch.randn(8, 256, 256, device=dev, dtype=torch.bfloat16, generator=g)
    ids = torch.tensor([[1, 5]], device=dev, dtype=torch.int32)
    lin = T.TernaryLinear.from_float(torch.randn(256, 256), device=dev)
    xf = torch.randn(1, 256, device=dev, generator=g)
    nn_lin = torch.nn.Linear(256, 256, bias=False, device=dev, dtype=torch.bfloat16).requires_grad_(False)
    out = torch.empty(1, 256, device=dev, dtype=torch.bfloat16)
    out_id = torch.empty(1, 2, 256, device=dev)

    rows = []

    def row(name, fn, baseline=None, graph=False):
        us = per_call_us(fn, n, sync)
        r = {"case": name, "us_per_call": round(us, 2)}
        if baseline is not None:
            r["vs_torch_matmul"] = round(baseline / us, 3)
        if graph:
            r["graph_replay_us"] = round(graph_replay_us(fn, 200), 2)
        rows.append(r)
        return us

    torch_us = row("torch.matmul bf16 1x256x256 (baseline)", lambda: torch.matmul(x, w.T), graph=True)
    fast = "C++ (llmm._llmm_torch)" if llmm._fast() else "DLPack (llmm._llmm_torch not built)"
    row(f"llmm.matmul (torch tensors), {fast}", lambda: llmm.matmul(x, w, transpose_b=True), torch_us, graph=True)
    # The same call through the DLPack path (out= given): the host path's A/B in one run.
    row("llmm.matmul (torch tensors, out=), DLPack", lambda: llmm.matmul(x, w, out, transpose_b=True), torch_us)
    row("torch.ops.llmm.matmul, grad mode", lambda: T.matmul(x, w, transpose_b=True), torch_us)
    # matmul_id bf16, 8 experts of 256x256, one token, top_k 2: the C++ path and its DLPack A/B.
    row(f"llmm.matmul_id direct, {fast}", lambda: llmm.matmul_id(experts, x, ids, route="direct"), torch_us,
        graph=True)
    row("llmm.matmul_id direct (out=), DLPack", lambda: llmm.matmul_id(experts, x, ids, out_id, route="direct"),
        torch_us)
    # moe_ffn bf16 on the same 8 experts (gate_up 8 x 256 x 256 split as 128 + 128, down 8 x 256 x
    # 128), one token, top_k 2: the whole FFN's host cost (DLPack path: no C++ fast path yet).
    gu_ffn = experts
    dn_ffn = torch.randn(8, 256, 128, device=dev, dtype=torch.bfloat16)
    tw_ffn = torch.rand(1, 2, device=dev)
    row("llmm.moe_ffn (whole FFN), DLPack", lambda: llmm.moe_ffn(x, gu_ffn, dn_ffn, ids, tw_ffn), torch_us,
        graph=True)
    with torch.inference_mode():
        row("torch.ops.llmm.matmul, inference_mode", lambda: T.matmul(x, w, transpose_b=True), torch_us, graph=True)
        row("torch.ops.llmm.matmul_id direct, inference_mode", lambda: T.matmul_id(experts, x, ids, route="direct"),
            torch_us, graph=True)
        row("TernaryLinear f32 (gemm_tq2), inference_mode", lambda: lin(xf), torch_us, graph=True)
        # What a BitNet layer runs: bf16 activations, against nn.Linear bf16 on the same shape.
        lin_us = row("nn.Linear bf16 1x256x256, inference_mode", lambda: nn_lin(x), torch_us, graph=True)
        tl_us = row("TernaryLinear bf16 (gemm_tq2), inference_mode", lambda: lin(x), torch_us, graph=True)
        rows[-1]["vs_nn_linear"] = round(lin_us / tl_us, 3)

    print(f"{'case':52s} {'us/call':>9s} {'torch/this':>10s} {'graph us':>9s}")
    for r in rows:
        print(f"{r['case']:52s} {r['us_per_call']:9.2f} {r.get('vs_torch_matmul', float('nan')):10.3f} "
              f"{r.get('graph_replay_us', float('nan')):9.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
