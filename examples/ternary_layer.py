"""A BitNet-b1.58-2B-shaped decoder layer's linear parts from a GGUF file: random ternary weights
(hidden 2560, 20 query / 5 KV heads of 128, FFN 6912 with a ReLU^2 gate) are written as TQ2_0
tensors with gguf-py, loaded with llmm.load_tq2_gguf, and run with gemm_tq2 at m = 1 and m = 512
(q, k, v, o projections on the input; the FFN end to end), against a float64 reference on the
decoded weights and, on CUDA, a bf16 dense torch version. Prints errors and per-part times.

    python examples/ternary_layer.py [--device cpu|cuda] [--m 1 512] [--small]

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


def run(device="cpu", ms=(1, 16), small=True, seed=0, quiet=False):
    import gguf

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
        print(f"ternary_layer {device}: {path} -> {len(weights)} TQ2_0 tensors, {packed / 1e6:.1f} MB packed "
              f"({sum(n * k for n, k in shapes.values()) * 2 / 1e6:.1f} MB as bf16)")
    torch = None
    if device == "cuda":
        import torch
    hidden = shapes["ffn_up"][1]
    worst = 0.0
    for m in ms:
        x_np = rng.standard_normal((m, hidden)).astype(np.float32)
        x = torch.from_numpy(x_np).cuda() if torch else x_np

        def sync():
            if torch:
                torch.cuda.synchronize()

        def timed(fn, reps=5):
            out = fn()
            sync()
            t0 = time.perf_counter()
            for _ in range(reps):
                out = fn()
            sync()
            return out, (time.perf_counter() - t0) / reps * 1e6

        def host(a):
            return a.float().cpu().numpy() if torch else a

        def ffn(lin, relu2):
            g, u = lin("ffn_gate", x), lin("ffn_up", x)
            return lin("ffn_down", relu2(g) * u)

        def ours(name, a):
            return llmm.gemm_tq2(weights[name], a)

        relu2 = (lambda a: torch.relu(a) ** 2) if torch else (lambda a: np.maximum(a, 0) ** 2)
        x64 = x_np.astype(np.float64)
        results = []
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            a = x if name != "attn_output" else (x if shapes[name][1] == hidden else None)
            if a is None:
                continue
            y, t = timed(lambda: ours(name, a))
            ref = x64 @ dense[name].astype(np.float64).T
            results.append((name, t, float(np.max(np.abs(host(y) - ref)) / max(1e-30, np.max(np.abs(ref))))))
        y, t = timed(lambda: ffn(ours, relu2))
        g64, u64 = x64 @ dense["ffn_gate"].T.astype(np.float64), x64 @ dense["ffn_up"].T.astype(np.float64)
        ref = (np.maximum(g64, 0) ** 2 * u64) @ dense["ffn_down"].T.astype(np.float64)
        results.append(("ffn (gate, up, ReLU^2, down)", t, float(np.max(np.abs(host(y) - ref)) / np.max(np.abs(ref)))))
        bf16 = {}
        if torch:
            wt = {name: torch.from_numpy(w).cuda().to(torch.bfloat16) for name, w in dense.items()}
            xb = x.to(torch.bfloat16)
            for name, _, _ in results[:-1]:
                bf16[name] = timed(lambda: xb @ wt[name].T)[1]
            bf16[results[-1][0]] = timed(lambda: (relu2(xb @ wt["ffn_gate"].T) * (xb @ wt["ffn_up"].T)) @ wt["ffn_down"].T)[1]
        for name, t, err in results:
            worst = max(worst, err)
            if not quiet:
                line = f"  m={m:<4d} {name:30s} llmm {t:10.1f} us   max rel err {err:.2e}"
                if name in bf16:
                    line += f"   torch bf16 dense {bf16[name]:9.1f} us ({bf16[name] / t:.2f}x)"
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
    a = ap.parse_args()
    ms = a.m or ([1, 512] if a.device == "cuda" else [1, 16])
    print(f"max rel err {run(a.device, ms, small=a.small or a.device == 'cpu'):.2e}")
