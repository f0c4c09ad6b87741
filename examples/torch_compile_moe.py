"""A Qwen3-MoE-style block as a torch nn.Module on llmm's custom ops, compiled with
torch.compile(fullgraph=True): a ternary input projection (TernaryLinear -> llmm::gemm_tq2), the
router (llmm::matmul), top-k, SiLU-gated experts (two llmm::matmul_id, shared then slotted) and the
weighted combine. The compiled block is checked against eager mode (same kernels) and against a
float64 evaluation with the same routing, then both are timed.

    python examples/torch_compile_moe.py [--device cpu|cuda] [--backend inductor|aot_eager|eager]
                                         [--dtype float32|bfloat16] [--tokens 16]

Inference only (no autograd formulas): run it under torch.inference_mode() or torch.no_grad().
"""
import argparse
import sys
import time


def _parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="cuda needs a GPU")
    ap.add_argument("--backend", default=None, help="torch.compile backend: inductor (default on cuda), aot_eager "
                                                   "(default on cpu), eager")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                    help="dtype of the activations and experts")
    ap.add_argument("--tokens", type=int, default=16, help="tokens in the batch")
    return ap


if __name__ == "__main__":
    _args = _parser().parse_args()  # before importing torch: --help works without it

try:
    import torch
except ImportError:
    sys.exit("torch_compile_moe.py needs torch (pip install torch): it compiles llmm's torch ops")

import llmm
import llmm.torch_ops as T


class MoeBlock(torch.nn.Module):
    def __init__(self, hidden, inter, experts, top_k, device, dtype, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.w_in = torch.randn(hidden, hidden, generator=g) * 0.05  # float source of the ternary weight
        self.proj = T.TernaryLinear.from_float(self.w_in, device=device)
        self.router = torch.nn.Parameter((torch.randn(experts, hidden, generator=g) * 0.05).to(device),
                                         requires_grad=False)  # f32 router, as usual
        self.gate_up = torch.nn.Parameter((torch.randn(experts, 2 * inter, hidden, generator=g) * 0.05).to(device, dtype),
                                          requires_grad=False)
        self.down = torch.nn.Parameter((torch.randn(experts, hidden, inter, generator=g) * 0.05).to(device, dtype),
                                       requires_grad=False)
        self.inter, self.experts, self.top_k = inter, experts, top_k

    def forward(self, x):  # x [tokens, hidden] -> ([tokens, hidden] f32, ids [tokens, top_k])
        tokens = x.shape[0]
        rows = tokens * self.top_k
        route = "direct" if rows <= 4 * min(self.experts, rows) else "grouped"  # llmm's calibrated rule
        h = self.proj(x)                                                   # gemm_tq2, x's dtype
        logits = T.matmul(h.float(), self.router, transpose_b=True)        # matmul, f32
        top = torch.topk(logits, self.top_k, dim=-1)
        ids = top.indices.to(torch.int32)
        weights = torch.softmax(top.values, dim=-1)
        gu = T.matmul_id(self.gate_up, h, ids, route=route, out_dtype=h.dtype)   # [tokens, top_k, 2 * inter]
        gate, up = gu.split(self.inter, dim=-1)
        act = (torch.nn.functional.silu(gate) * up).reshape(rows, self.inter)    # slot-major rows
        y = T.matmul_id(self.down, act, ids, layout="slotted", route=route, out_dtype=h.dtype)
        return (y.float() * weights[..., None]).sum(dim=1), ids


def reference(block, x, ids):
    """float64 evaluation of the block with the given routing (the dequantized ternary weight)."""
    n, k = block.w_in.shape
    wq = torch.from_numpy(llmm.dequantize_tq2(llmm.quantize_tq2(block.w_in), n, k)).double()
    h = x.double().cpu() @ wq.T
    logits = h @ block.router.double().cpu().T
    weights = torch.softmax(torch.gather(logits, 1, ids.long().cpu()), dim=-1)
    idx = ids.long().cpu()
    gu = torch.einsum("tsok,tk->tso", block.gate_up.double().cpu()[idx], h)
    gate, up = gu.split(block.inter, dim=-1)
    act = torch.nn.functional.silu(gate) * up
    y = torch.einsum("tsoi,tsi->tso", block.down.double().cpu()[idx], act)
    return (y * weights[..., None]).sum(dim=1)


def run(device="cpu", backend=None, dtype="float32", tokens=16, hidden=512, inter=192, experts=16, top_k=4,
        quiet=False):
    """Returns (max |compiled - eager| / max |eager|, max |eager - float64| / max |float64|)."""
    backend = backend or ("inductor" if device == "cuda" else "aot_eager")
    dt = getattr(torch, dtype)
    block = MoeBlock(hidden, inter, experts, top_k, device, dt)
    x = torch.randn(tokens, hidden, generator=torch.Generator().manual_seed(1)).to(device, dt)
    compiled = torch.compile(block, fullgraph=True, backend=backend)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def timed(fn, reps=10):
        out = fn(x)
        sync()
        t0 = time.perf_counter()
        for _ in range(reps):
            out = fn(x)
        sync()
        return out, (time.perf_counter() - t0) / reps * 1e6

    with torch.inference_mode():
        t0 = time.perf_counter()
        compiled(x)
        t_compile = time.perf_counter() - t0
        (y_eager, ids_eager), t_eager = timed(block)
        (y_comp, ids_comp), t_comp = timed(compiled)
    assert torch.equal(ids_comp, ids_eager), "compiled and eager routing differ"
    scale = y_eager.abs().max().item()
    err_compiled = (y_comp - y_eager).abs().max().item() / scale
    ref = reference(block, x, ids_eager)
    err_ref = (y_eager.double().cpu() - ref).abs().max().item() / ref.abs().max().item()
    if not quiet:
        print(f"torch_compile_moe {device} {dtype} backend={backend}: tokens={tokens} hidden={hidden} inter={inter} "
              f"experts={experts} top_k={top_k}")
        print(f"  compile (first call): {t_compile:6.1f} s   eager: {t_eager:9.1f} us   compiled: {t_comp:9.1f} us")
        print(f"  max rel diff compiled vs eager: {err_compiled:.2e}   eager vs float64: {err_ref:.2e}")
    return err_compiled, err_ref


if __name__ == "__main__":
    run(_args.device, _args.backend, _args.dtype, _args.tokens)
