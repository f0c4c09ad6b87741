"""A Qwen3-MoE-shaped FFN block with llmm.moe_ffn: router top-k on the host, then one call for the
experts (gate_up, SiLU(gate) * up, down, the routing-weighted sum over the top-k slots); compared
with a float64 per-expert reference and, on CUDA, with the same block in plain torch (both timed).
NumPy on the CPU; torch on a CUDA GPU with --device cuda. Shapes default to Qwen3-30B-A3B's
(hidden 2048, expert 768, 128 experts, top 8); pass --small for a quick run.
"""
import argparse
import time

import numpy as np

import llmm


def run(device="cpu", tokens=4, hidden=2048, inter=768, experts=128, top_k=8, seed=0, quiet=False, route="auto"):
    rng = np.random.default_rng(seed)
    w_router = rng.standard_normal((experts, hidden)).astype(np.float32) * 0.02
    w_gate_up = rng.standard_normal((experts, 2 * inter, hidden)).astype(np.float32) * 0.02
    w_down = rng.standard_normal((experts, hidden, inter)).astype(np.float32) * 0.02
    x = rng.standard_normal((tokens, hidden)).astype(np.float32)

    # Router (plain matmul + top-k on the host side of this example).
    logits = x @ w_router.T
    ids = np.argsort(-logits, axis=1)[:, :top_k].astype(np.uint32)
    top = np.take_along_axis(logits, ids.astype(np.int64), axis=1)
    weights = np.exp(top - top.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)

    if device == "cuda":
        import torch

        T = lambda a: torch.from_numpy(np.ascontiguousarray(a)).cuda()  # noqa: E731
        xd, gu, dn, idd = T(x), T(w_gate_up), T(w_down), T(ids.astype(np.int64))  # int64 ids, as torch.topk gives them
        wts = T(weights.astype(np.float32))
        sync = torch.cuda.synchronize
    else:
        xd, gu, dn, idd, wts, sync = x, w_gate_up, w_down, ids, weights.astype(np.float32), (lambda: None)

    def ffn():
        # route "auto" (the default): llmm's calibrated choice for both GEMMs; no scratch to size
        return llmm.moe_ffn(xd, gu, dn, idd, wts, route=route)  # [tokens, hidden]

    def reference():
        out = np.zeros((tokens, top_k, hidden))
        for t in range(tokens):
            for s in range(top_k):
                e = ids[t, s]
                h = w_gate_up[e].astype(np.float64) @ x[t].astype(np.float64)
                g, u = h[:inter], h[inter:]
                out[t, s] = w_down[e].astype(np.float64) @ (g / (1 + np.exp(-g)) * u)
        return out

    def torch_ffn():
        """The same block in plain torch, as an eager MoE layer usually is: one loop over the
        active experts, each gathering its rows, then the weighted sum (the pure-torch baseline)."""
        out = torch.zeros(tokens * top_k, hidden, device=xd.device, dtype=xd.dtype)
        flat = idt.flatten()
        for e in torch.unique(flat).tolist():
            slots = (flat == e).nonzero().squeeze(1)
            h = xd[slots // top_k] @ gu[e].T
            g, u = h[:, :inter], h[:, inter:]
            out[slots] = (torch.nn.functional.silu(g) * u) @ dn[e].T
        return (out.view(tokens, top_k, hidden) * wts[..., None]).sum(dim=1)

    def timed(fn, reps=20):
        y = fn()
        sync()
        t0 = time.perf_counter()
        for _ in range(reps):
            y = fn()
        sync()
        return y, (time.perf_counter() - t0) / reps * 1e6

    def combined_err(y):
        y_np = y.cpu().numpy() if device == "cuda" else y
        return float(np.max(np.abs(y_np.astype(np.float64) - combined_ref)))

    y, t_llmm = timed(ffn)
    t0 = time.perf_counter()
    ref = reference()
    t_ref = (time.perf_counter() - t0) * 1e6
    combined_ref = (ref * weights[..., None]).sum(axis=1)
    err = combined_err(y)
    if not quiet:
        print(f"qwen3_moe_ffn {device}: tokens={tokens} hidden={hidden} inter={inter} experts={experts} "
              f"top_k={top_k} route={route} f32")
        print(f"  llmm.moe_ffn (the whole expert FFN): {t_llmm:10.1f} us   max abs err vs float64: {err:.3e}")
    if device == "cuda":
        idt = idd.long()
        y_t, t_torch = timed(torch_ffn)
        err_t = combined_err(y_t)
        if not quiet:
            print(f"  pure torch (loop over active experts): {t_torch:10.1f} us   max abs err vs float64: {err_t:.3e}"
                  f"   llmm speedup: {t_torch / t_llmm:.2f}x")
    elif not quiet:
        print(f"  per-expert float64 NumPy reference: {t_ref:10.1f} us")
    return err


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="cuda needs torch and a GPU")
    ap.add_argument("--tokens", type=int, default=4, help="tokens in the batch")
    ap.add_argument("--route", default="auto", choices=["auto", "direct", "grouped"],
                    help="the route of moe_ffn's two GEMMs (auto: llmm.suggest_matmul_id_route's)")
    ap.add_argument("--small", action="store_true",
                    help="hidden 256, expert 96, 16 experts, top 4 (the default on the CPU)")
    ap.add_argument("--full", action="store_true", help="Qwen3-30B-A3B shapes on the CPU too (slow: the float64 "
                                                        "reference backend)")
    a = ap.parse_args()
    if a.small or (a.device == "cpu" and not a.full):
        if a.device == "cpu" and not a.small:
            print("qwen3_moe_ffn: small shapes on the CPU (its backend is the float64 reference, not a fast path; "
                  "--full for Qwen3-30B-A3B's)")
        run(a.device, tokens=a.tokens, hidden=256, inter=96, experts=16, top_k=4, route=a.route)
    else:
        run(a.device, tokens=a.tokens, route=a.route)
