"""What the unfused Hadamard rotation (llmm.hadamard) costs a Ternary-Bonsai-2 layer on CUDA: the
same ternary weight through TernaryLinear with and without its rotation, on Bonsai-2-27B's shapes
(hidden 5120, ffn 17408, block 1024), bf16 x, at decode and prefill token counts.

Each figure is the median of 7 batches of N back-to-back calls ending in one synchronize, divided
by N (us per call, eager: what a model running in eager mode pays, host cost included), and the
same calls replayed from one CUDA graph (the GPU time alone). The issue-50 target for the fused
rotation: within 3% of the unrotated time.

    python bench/ternary_rotation.py [--m 1,16,512] [--n 200] [--json FILE]
"""
import argparse
import json
import statistics
import time

import numpy as np
import torch

import llmm
import llmm.torch_ops as T

SHAPES = [("bonsai2_27b_gate", 17408, 5120), ("bonsai2_27b_down", 5120, 17408)]
BLOCK = 1024


def eager_us(fn, n):
    fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        runs.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(runs)


def graph_us(fn, n):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        for _ in range(n):
            fn()
    g.replay()
    torch.cuda.synchronize()
    runs = []
    for _ in range(7):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        runs.append(a.elapsed_time(b) * 1e3 / n)
    return statistics.median(runs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--m", default="1,16,512")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--json")
    a = ap.parse_args()
    rng = np.random.default_rng(50)
    rows = []
    print(f"{torch.cuda.get_device_name()}; us per call, median of 7 batches of {a.n}")
    print(f"{'shape':18} {'m':>5} {'plain eager':>12} {'rotated':>9} {'ratio':>6} {'plain graph':>12} {'rotated':>9} "
          f"{'ratio':>6}")
    for name, n, k in SHAPES:
        w = torch.from_numpy(rng.standard_normal((n, k), dtype=np.float32))
        weight = llmm.upload_tq2(llmm.quantize_tq2(w.numpy()), n, k, device="cuda")
        rot = llmm.HadamardRotation(rng.choice([-1.0, 1.0], size=k), BLOCK)
        plain, rotated = T.TernaryLinear(weight), T.TernaryLinear(weight, rotation=rot)
        for m in (int(v) for v in a.m.split(",")):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            with torch.inference_mode():
                e0, e1 = eager_us(lambda: plain(x), a.n), eager_us(lambda: rotated(x), a.n)
                g0, g1 = graph_us(lambda: plain(x), a.n), graph_us(lambda: rotated(x), a.n)
            rows.append(dict(shape=name, n=n, k=k, m=m, block=BLOCK, eager_plain_us=e0, eager_rotated_us=e1,
                             graph_plain_us=g0, graph_rotated_us=g1, device=torch.cuda.get_device_name()))
            print(f"{name:18} {m:5d} {e0:12.2f} {e1:9.2f} {e1 / e0:6.2f} {g0:12.2f} {g1:9.2f} {g1 / g0:6.2f}")
        llmm.release_tq2(weight)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
