"""A Qwen3-MoE-shaped FFN block with ternary experts: router top-k, gate_up and down as two
llmm.matmul_id_tq2 calls on TQ2_0_g128 expert stacks (upload_tq2_experts), SiLU(gate) * up,
weighted combine; compared with a float64 reference on the same (dequantized) ternary weights and,
on CUDA, with the block in plain torch on bf16 experts (both timed). NumPy on the CPU; torch on a
CUDA GPU with --device cuda (float16 activations there: the Hopper engine's input). Shapes
default to Qwen3-30B-A3B's (hidden 2048, expert 768, 128 experts, top 8); --small for a quick run.
"""
import argparse
import time

import numpy as np

import llmm


def run(device="cpu", tokens=4, hidden=2048, inter=768, experts=128, top_k=8, seed=0, quiet=False):
    rng = np.random.default_rng(seed)
    w_router = rng.standard_normal((experts, hidden)).astype(np.float32) * 0.02
    # Ternary experts: random weights quantized per 128-block (BitNet's absmean rule).
    gu_aos = llmm.quantize_tq2(rng.standard_normal((experts * 2 * inter, hidden)).astype(np.float32) * 0.02)
    dn_aos = llmm.quantize_tq2(rng.standard_normal((experts * hidden, inter)).astype(np.float32) * 0.02)
    w_gate_up = llmm.dequantize_tq2(gu_aos, experts * 2 * inter, hidden).reshape(experts, 2 * inter, hidden)
    w_down = llmm.dequantize_tq2(dn_aos, experts * hidden, inter).reshape(experts, hidden, inter)
    x = rng.standard_normal((tokens, hidden)).astype(np.float32)
    if device == "cuda":
        x = x.astype(np.float16).astype(np.float32)  # the values the f16 activations hold

    logits = x @ w_router.T
    ids = np.argsort(-logits, axis=1)[:, :top_k].astype(np.int64)
    top = np.take_along_axis(logits, ids, axis=1)
    weights = np.exp(top - top.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)

    dev = "cuda:0" if device == "cuda" else "cpu"
    gu = llmm.upload_tq2_experts(gu_aos, experts, 2 * inter, hidden, device=dev)
    dn = llmm.upload_tq2_experts(dn_aos, experts, hidden, inter, device=dev)
    if device == "cuda":
        import torch

        xd = torch.from_numpy(x).to("cuda", torch.float16)
        idd = torch.from_numpy(ids).cuda()
        # Room to stage every routed row as f16 for the Hopper engine (its fast route).
        s_gu = llmm.matmul_id_scratch(experts, tokens, "cuda:0", max_top_k=top_k, max_k=hidden, dtype="float16")
        s_dn = llmm.matmul_id_scratch(experts, tokens, "cuda:0", max_top_k=top_k, max_k=inter, dtype="float16")
        sync = torch.cuda.synchronize
    else:
        xd, idd, s_gu, s_dn, sync = x, ids, None, None, (lambda: None)

    def ffn():
        h = llmm.matmul_id_tq2(gu, xd, idd, scratch=s_gu, out_dtype="float16" if device == "cuda" else None)
        g, u = h[..., :inter], h[..., inter:]
        act = (g / (1 + (np.exp(-g) if device == "cpu" else (-g).exp()))) * u  # SiLU(g) * u
        act = act.reshape(tokens * top_k, inter)
        act = np.ascontiguousarray(act) if device == "cpu" else act.contiguous()
        return llmm.matmul_id_tq2(dn, act, idd, layout="slotted", scratch=s_dn)  # [tokens, top_k, hidden] f32

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
        """The same block in plain torch on bf16 experts (the dequantized ternary weights, which
        bf16 holds only approximately: an f16 scale has 11 bits), one loop over active experts."""
        out = torch.empty(tokens, top_k, hidden, device="cuda", dtype=torch.bfloat16)
        flat = idd.flatten()
        for e in torch.unique(flat).tolist():
            slots = (flat == e).nonzero().squeeze(1)
            h = xb[slots // top_k] @ gub[e].T
            g, u = h[:, :inter], h[:, inter:]
            out.view(-1, hidden)[slots] = (torch.nn.functional.silu(g) * u) @ dnb[e].T
        return out

    def timed(fn, reps=20):
        y = fn()
        sync()
        t0 = time.perf_counter()
        for _ in range(reps):
            y = fn()
        sync()
        return y, (time.perf_counter() - t0) / reps * 1e6

    def combined_err(y):
        y_np = y.float().cpu().numpy() if device == "cuda" else y
        combined = (y_np.astype(np.float64) * weights[..., None]).sum(axis=1)
        return float(np.max(np.abs(combined - combined_ref)))

    y, t_llmm = timed(ffn)
    ref = reference()
    combined_ref = (ref * weights[..., None]).sum(axis=1)
    err = combined_err(y)
    scale = float(np.max(np.abs(combined_ref)))
    if not quiet:
        print(f"ternary_moe_ffn {device}: tokens={tokens} hidden={hidden} inter={inter} experts={experts} "
              f"top_k={top_k}; ternary experts {(gu.nbytes + dn.nbytes) / 2**20:.1f} MiB packed")
        print(f"  llmm (2 x matmul_id_tq2 + SiLU): {t_llmm:10.1f} us   max abs err of the combined output vs "
              f"float64: {err:.3e} (largest output {scale:.3e})")
    if device == "cuda":
        xb = torch.from_numpy(x).to("cuda", torch.bfloat16)
        gub = torch.from_numpy(w_gate_up).to("cuda", torch.bfloat16)
        dnb = torch.from_numpy(w_down).to("cuda", torch.bfloat16)
        y_t, t_torch = timed(torch_ffn)
        err_t = combined_err(y_t)
        if not quiet:
            print(f"  pure torch, bf16 experts (loop over active experts): {t_torch:10.1f} us   max abs err vs "
                  f"float64: {err_t:.3e}   llmm speedup: {t_torch / t_llmm:.2f}x")
    llmm.release_tq2(gu)
    llmm.release_tq2(dn)
    return err / max(scale, 1e-30)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="cuda needs torch and a GPU")
    ap.add_argument("--tokens", type=int, default=4, help="tokens in the batch")
    ap.add_argument("--small", action="store_true", help="hidden 256, expert 128, 16 experts, top 4 (the default on "
                                                         "the CPU)")
    a = ap.parse_args()
    if a.small or a.device == "cpu":
        if a.device == "cpu" and not a.small:
            print("ternary_moe_ffn: small shapes on the CPU (its backend is the float64 reference, not a fast path)")
        run(a.device, tokens=a.tokens, hidden=256, inter=128, experts=16, top_k=4)
    else:
        run(a.device, tokens=a.tokens)
