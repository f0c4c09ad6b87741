"""A ternary linear layer: quantize a weight to TQ2_0_g128, run gemm_tq2, compare with the
dequantized matmul, and time both. NumPy on the CPU backend; torch tensors on a CUDA GPU when
torch and a GPU are present (pass --device cuda).

    python examples/ternary_linear.py [--device cpu|cuda] [--m 16 --n 3072 --k 3072]
"""
import argparse
import time

import numpy as np

import llmm


def run(device="cpu", m=16, n=3072, k=3072, seed=0, quiet=False):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((n, k)).astype(np.float32) * 0.02
    aos = llmm.quantize_tq2(w)  # BitNet b1.58 absmean rule
    wq = llmm.dequantize_tq2(aos, n, k)  # what the layer computes with
    weight = llmm.upload_tq2(aos, n, k, device=device if device == "cpu" else "cuda:0")
    x_np = rng.standard_normal((m, k)).astype(np.float32)
    if device == "cuda":
        import torch

        x = torch.from_numpy(x_np).cuda()
        w_ref = torch.from_numpy(wq).cuda()
        sync = torch.cuda.synchronize
        ref_fn = lambda: x @ w_ref.T  # noqa: E731
    else:
        x, sync = x_np, (lambda: None)
        ref_fn = lambda: x_np @ wq.T  # noqa: E731

    def timed(fn, reps=10):
        fn()
        sync()
        t0 = time.perf_counter()
        for _ in range(reps):
            out = fn()
        sync()
        return out, (time.perf_counter() - t0) / reps * 1e6

    y, t_llmm = timed(lambda: llmm.gemm_tq2(weight, x))
    ref, t_ref = timed(ref_fn)
    y_np = y.cpu().numpy() if device == "cuda" else y
    ref64 = x_np.astype(np.float64) @ wq.T.astype(np.float64)
    err = float(np.max(np.abs(y_np - ref64)))
    if not quiet:
        print(f"ternary_linear {device}: m={m} n={n} k={k}  packed {weight.nbytes / 1e6:.2f} MB "
              f"(dense f32 {n * k * 4 / 1e6:.1f} MB)")
        print(f"  llmm.gemm_tq2: {t_llmm:9.1f} us   reference matmul on the dequantized weight: {t_ref:9.1f} us")
        print(f"  max abs err vs float64: {err:.3e}")
        if device == "cpu":
            print("  (the CPU backend is llmm's float64 reference: it shows correctness, not speed; --device cuda "
                  "runs the kernels)")
    return err


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="cuda needs torch and a GPU")
    ap.add_argument("--m", type=int, default=16, help="rows of the input (tokens)")
    ap.add_argument("--n", type=int, default=3072, help="output features (weight rows)")
    ap.add_argument("--k", type=int, default=3072, help="input features (a multiple of 128)")
    a = ap.parse_args()
    run(a.device, a.m, a.n, a.k)
