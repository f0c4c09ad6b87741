"""A BitNet-b1.58-2B-shaped decoder layer's linear parts from a GGUF file: random ternary weights
(hidden 2560, 20 query / 5 KV heads of 128, FFN 6912 with a ReLU^2 gate) are written as TQ2_0
tensors with gguf-py, loaded with llmm.load_tq2_gguf, and run with gemm_tq2 at m = 1 and m = 512
(q, k, v, o projections on the input; the FFN end to end), against a float64 reference on the
decoded weights and, on CUDA, a bf16 dense torch version. Prints errors and per-part times: on
CUDA both eager (one Python call per op, host cost included) and CUDA-graph replay (the parts
captured once, as decode engines run a step; the GPU time without Python in the loop). On CUDA the
activations are bf16 by default (what a BitNet model runs: gemm_tq2 in and out in bf16, against
bf16 torch); --dtype f32 runs f32 activations (gemm_tq2's Exact path) instead.

    python examples/ternary_layer.py [--device cpu|cuda] [--m 1 512] [--small] [--dtype bf16|f32]

--small (the CPU default) shrinks the layer (hidden 512, FFN 768: GGUF rows are whole 256-blocks) so the float64 CPU backend finishes in seconds;
the CPU backend is the float64 reference, not a fast path. Needs gguf (pip install gguf); the
CUDA comparison needs torch.
"""
import argparse
import os
import tempfile
import time

import numpy as np

import llmm


def layer_shapes(small):
    hidden, inter, heads, kv_heads, head_dim = (512, 768, 8, 2, 64) if small else (2560, 6912, 20, 5, 128)
    return {"attn_q": (heads * head_dim, hidden), "attn_k": (kv_heads * head_dim, hidden),
            "attn_v": (kv_heads * head_dim, hidden), "attn_output": (hidden, heads * head_dim),
            "ffn_gate": (inter, hidden), "ffn_up": (inter, hidden), "ffn_down": (hidden, inter)}


def ternary(n, k, rng):
    codes = rng.integers(-1, 2, size=(n, k)).astype(np.float32)
    return codes * np.float32(np.float16(0.02))  # one scale per tensor, rounded to f16 as GGUF stores it


def run(device="cpu", ms=(1, 16), small=True, seed=0, quiet=False, dtype=None):
    import gguf

    dtype = dtype or ("bf16" if device == "cuda" else "f32")  # the CPU backend is the f32 reference

    rng = np.random.default_rng(seed)
    shapes = layer_shapes(small)
    dense = {name: ternary(n, k, rng) for name, (n, k) in shapes.items()}
    path = os.path.join(tempfile.mkdtemp(), "bitnet_layer.gguf")
    writer = gguf.GGUFWriter(path, "bitnet")
    for name, w in dense.items():
        writer.add_tensor(f"blk.0.{name}.weight", gguf.quants.quantize(w, gguf.GGMLQuantizationType.TQ2_0),
                          raw_dtype=gguf.GGMLQuantizationType.TQ2_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    dev = "cuda:0" if device == "cuda" else "cpu"
    weights = {name: llmm.load_tq2_gguf(path, f"blk.0.{name}.weight", device=dev) for name in shapes}
    if not quiet:
        packed = sum(w.nbytes for w in weights.values())
        print(f"ternary_layer {device} ({dtype} activations): {path} -> {len(weights)} TQ2_0 tensors, {packed / 1e6:.1f} MB packed "
              f"({sum(n * k for n, k in shapes.values()) * 2 / 1e6:.1f} MB as bf16)")
    torch = None
    if device == "cuda":
        import torch
    hidden = shapes["ffn_up"][1]
    worst = 0.0
    for m in ms:
        x_np = rng.standard_normal((m, hidden)).astype(np.float32)
        x = torch.from_numpy(x_np).cuda() if torch else x_np
        if torch and dtype == "bf16":
            x = x.to(torch.bfloat16)
            x_np = x.float().cpu().numpy()  # the reference sees the rounded activations

        def sync():
            if torch:
                torch.cuda.synchronize()

        def timed(fn, reps=20):
            """Eager: the best of 3 batches of reps back-to-back calls (host cost included)."""
            out = fn()
            sync()
            best = float("inf")
            for _ in range(3):
                t0 = time.perf_counter()
                for _ in range(reps):
                    out = fn()
                sync()
                best = min(best, (time.perf_counter() - t0) / reps * 1e6)
            return out, best

        def graph_us(fn, reps=50):
            """One CUDA graph of fn, replayed: warmed up on the capture stream first (workspaces
            are sized there; capture may not allocate them)."""
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                fn()
                fn()
            s.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=s):
                fn()
            g.replay()
            sync()
            best = float("inf")
            for _ in range(3):
                t0 = time.perf_counter()
                for _ in range(reps):
                    g.replay()
                sync()
                best = min(best, (time.perf_counter() - t0) / reps * 1e6)
            return best

        def host(a):
            return a.float().cpu().numpy() if torch else a

        def ffn(lin, relu2):
            g, u = lin("ffn_gate", x), lin("ffn_up", x)
            return lin("ffn_down", relu2(g) * u)

        def ours(name, a):  # bf16 in, bf16 out (f32: f32 out, gemm_tq2's default)
            return llmm.gemm_tq2(weights[name], a, out_dtype=a.dtype if torch else None)

        relu2 = (lambda a: torch.relu(a) ** 2) if torch else (lambda a: np.maximum(a, 0) ** 2)
        x64 = x_np.astype(np.float64)
        projections = ("attn_q", "attn_k", "attn_v", "attn_output")  # attn_output's k is hidden here
        parts = {name: (lambda lin, name=name: lin(name, x)) for name in projections}
        parts["ffn (gate, up, ReLU^2, down)"] = lambda lin: ffn(lin, relu2)
        parts["layer (q, k, v, o, ffn)"] = lambda lin: [parts[p](lin) for p in list(parts)[:5]]
        results = []
        for name in projections:
            y, t = timed(lambda: ours(name, x))
            ref = x64 @ dense[name].astype(np.float64).T
            results.append((name, t, float(np.max(np.abs(host(y) - ref)) / max(1e-30, np.max(np.abs(ref))))))
        y, t = timed(lambda: parts["ffn (gate, up, ReLU^2, down)"](ours))
        g64, u64 = x64 @ dense["ffn_gate"].T.astype(np.float64), x64 @ dense["ffn_up"].T.astype(np.float64)
        ref = (np.maximum(g64, 0) ** 2 * u64) @ dense["ffn_down"].T.astype(np.float64)
        results.append(("ffn (gate, up, ReLU^2, down)", t, float(np.max(np.abs(host(y) - ref)) / np.max(np.abs(ref)))))
        results.append(("layer (q, k, v, o, ffn)", timed(lambda: parts["layer (q, k, v, o, ffn)"](ours))[1],
                        max(err for _, _, err in results)))  # the same outputs as the rows above
        bf16, graphs = {}, {}
        if torch:
            wt = {name: torch.from_numpy(w).cuda().to(torch.bfloat16) for name, w in dense.items()}
            xb = x.to(torch.bfloat16)

            def dense_bf16(name, a):
                return (xb if a is x else a.to(torch.bfloat16)) @ wt[name].T

            for name, _, _ in results:
                bf16[name] = timed(lambda: parts[name](dense_bf16))[1]
                graphs[name] = (graph_us(lambda: parts[name](ours)), graph_us(lambda: parts[name](dense_bf16)))
        for name, t, err in results:
            worst = max(worst, err)
            if not quiet:
                line = f"  m={m:<4d} {name:30s} llmm {t:9.1f} us   max rel err {err:.2e}"
                if name in bf16:
                    g_ours, g_bf16 = graphs[name]
                    line += (f"   torch bf16 dense {bf16[name]:9.1f} us ({bf16[name] / t:.2f}x)   graph replay: "
                             f"llmm {g_ours:8.1f} us, bf16 {g_bf16:8.1f} us ({g_bf16 / g_ours:.2f}x)")
                print(line)
    for w in weights.values():
        llmm.release_tq2(w)
    return worst


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="cuda needs torch and a GPU")
    ap.add_argument("--m", type=int, nargs="+", default=None, help="token counts (default: 1 16 on cpu, 1 512 on cuda)")
    ap.add_argument("--small", action="store_true", help="a small layer: hidden 512, FFN 768 (always on for --device cpu)")
    ap.add_argument("--dtype", default=None, choices=["bf16", "f32"], help="activations (default: bf16 on cuda, f32 on cpu)")
    a = ap.parse_args()
    ms = a.m or ([1, 512] if a.device == "cuda" else [1, 16])
    print(f"max rel err {run(a.device, ms, small=a.small or a.device == 'cpu', dtype=a.dtype):.2e}")
