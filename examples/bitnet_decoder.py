"""Two BitNet-b1.58-2B-shaped decoder layers end to end, their seven linears on llmm's ternary
weights (TernaryLinear), against the same stack on torch bf16 dense weights: tokens per second of
a prefill and of a decode loop, eager and (on CUDA) each decode step replayed from a CUDA graph.

The layers are BitNet b1.58's (random ternary weights, one f16-rounded scale a tensor): RMSNorm,
q / k / v projections (20 query and 5 KV heads of 128 at hidden 2560), rotary embedding, causal
attention over a static KV cache (torch's scaled_dot_product_attention), a sub-norm before the
output projection, then RMSNorm, gate and up (6912), ReLU^2(gate) * up, a sub-norm, down. Both
stacks run the same torch code for everything but the linears, and the activations are bf16 on
CUDA (what a BitNet model runs; no int8 activation quantization on either side) and f32 on the CPU
(llmm's CPU backend is the float64 reference, not a fast path). Errors are against the same stack
in float64 on the CPU with the decoded weights.

    python examples/bitnet_decoder.py [--device cpu|cuda] [--prefill 128] [--decode 32] [--small]

--small (the CPU default) shrinks the layers (hidden 256, FFN 384, 4 / 2 heads of 64).
"""
import argparse
import time

import numpy as np
import torch

import llmm
import llmm.torch_ops as T


def config(small):
    if small:
        return dict(hidden=256, inter=384, heads=4, kv_heads=2, head_dim=64, layers=2)
    return dict(hidden=2560, inter=6912, heads=20, kv_heads=5, head_dim=128, layers=2)


def random_layers(c, rng):
    """Per layer: {name: float32 [out, in] ternary weight times one f16-rounded scale}."""
    h, hd = c["hidden"], c["head_dim"]
    shapes = {"q": (c["heads"] * hd, h), "k": (c["kv_heads"] * hd, h), "v": (c["kv_heads"] * hd, h),
              "o": (h, c["heads"] * hd), "gate": (c["inter"], h), "up": (c["inter"], h), "down": (h, c["inter"])}
    return [{name: (rng.integers(-1, 2, size=s).astype(np.float32) * np.float32(np.float16(0.02)))
             for name, s in shapes.items()} for _ in range(c["layers"])]


class Decoder(torch.nn.Module):
    """The stack with a static KV cache of max_len positions; `linears[l][name]` is any callable
    [tokens, in] -> [tokens, out]. forward(x [tokens, hidden], pos [tokens] int64 on x's device)
    writes the cache at pos and attends causally over it: no host synchronization, so one decode
    step can be captured in a CUDA graph."""

    def __init__(self, c, linears, max_len, dtype, device):
        super().__init__()
        self.c, self.linears, self.max_len = c, linears, max_len
        hd, kvh = c["head_dim"], c["kv_heads"]
        self.k_cache = [torch.zeros(1, kvh, max_len, hd, dtype=dtype, device=device) for _ in linears]
        self.v_cache = [torch.zeros(1, kvh, max_len, hd, dtype=dtype, device=device) for _ in linears]
        inv = 1.0 / (500000.0 ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        ang = torch.arange(max_len, dtype=torch.float64)[:, None] * inv[None, :]
        self.cos = torch.cat([ang.cos(), ang.cos()], -1).to(dtype=dtype, device=device)
        self.sin = torch.cat([ang.sin(), ang.sin()], -1).to(dtype=dtype, device=device)
        self.slots = torch.arange(max_len, device=device)

    @staticmethod
    def rms(x, eps=1e-5):
        xf = x.float() if x.dtype != torch.float64 else x
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)

    def rope(self, t, pos):  # t [1, heads, tokens, hd]
        cos, sin = self.cos[pos][None, None], self.sin[pos][None, None]
        half = t.shape[-1] // 2
        rot = torch.cat([-t[..., half:], t[..., :half]], -1)
        return t * cos + rot * sin

    def forward(self, x, pos):
        c = self.c
        tokens, hd = x.shape[0], c["head_dim"]
        # causal over the cache: slot j is visible to the token at position p when j <= p
        mask = self.slots[None, :] <= pos[:, None]
        for li, lin in enumerate(self.linears):
            a = self.rms(x)
            q = lin["q"](a).view(tokens, c["heads"], hd).transpose(0, 1)[None]
            k = lin["k"](a).view(tokens, c["kv_heads"], hd).transpose(0, 1)[None]
            v = lin["v"](a).view(tokens, c["kv_heads"], hd).transpose(0, 1)[None]
            q, k = self.rope(q, pos), self.rope(k, pos)
            self.k_cache[li].index_copy_(2, pos, k)
            self.v_cache[li].index_copy_(2, pos, v)
            o = torch.nn.functional.scaled_dot_product_attention(q, self.k_cache[li], self.v_cache[li],
                                                                 attn_mask=mask[None, None], enable_gqa=True)
            x = x + lin["o"](self.rms(o[0].transpose(0, 1).reshape(tokens, c["heads"] * hd)))
            a = self.rms(x)
            g, u = lin["gate"](a), lin["up"](a)
            x = x + lin["down"](self.rms(torch.relu(g).square() * u))
        return x


def build(kind, c, layers, dtype, device, max_len):
    """kind 'llmm': TernaryLinear on the ternary weights; 'torch': dense x @ W^T in dtype;
    'ref': float64 dense (the CPU reference)."""
    linears = []
    for w in layers:
        if kind == "llmm":
            lin = {name: T.TernaryLinear(llmm.upload_tq2(llmm.quantize_tq2(m, rule="absmax"), *m.shape,
                                                            device=str(device)))
                   for name, m in w.items()}
        else:
            wt = {name: torch.from_numpy(m).to(dtype=dtype, device=device) for name, m in w.items()}
            lin = {name: (lambda a, t=t: a @ t.T) for name, t in wt.items()}
        linears.append(lin)
    return Decoder(c, linears, max_len, dtype, device)


def release(model):
    for lin in model.linears:
        for layer in lin.values():
            llmm.release_tq2(layer.weight_handle)


def generate(model, x_prefill, x_decode):
    """Prefill the prompt's rows, then one decode step per row of x_decode: (prefill output,
    stacked decode outputs). Inputs stand in for embeddings (no sampling: the stacks compared
    must see the same inputs)."""
    dev = x_prefill.device
    p = x_prefill.shape[0]
    out = model(x_prefill, torch.arange(p, device=dev))
    steps = [model(x_decode[i:i + 1], torch.tensor([p + i], device=dev)) for i in range(x_decode.shape[0])]
    return out, torch.cat(steps)


def timed(fn, sync, reps=3):
    fn()
    sync()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t0)
    return best


def graph_step_us(model, hidden, pos0, dtype, device, reps=50):
    """One decode step captured in a CUDA graph (static input row and position), replayed."""
    x = torch.randn(1, hidden, dtype=dtype, device=device)
    pos = torch.tensor([pos0], device=device)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up on the capture stream: workspaces are sized here
        model(x, pos)
        model(x, pos)
    s.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        model(x, pos)
    g.replay()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            g.replay()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / reps * 1e6)
    return best


def run(device="cpu", prefill=16, decode=4, small=True, seed=0, quiet=False):
    """Returns the worst relative error (llmm's stack against the float64 one, over the prefill
    and decode outputs)."""
    c = config(small)
    rng = np.random.default_rng(seed)
    layers = random_layers(c, rng)
    dev = torch.device(device)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    max_len = prefill + decode
    xp = torch.from_numpy(rng.standard_normal((prefill, c["hidden"]), dtype=np.float32))
    xd = torch.from_numpy(rng.standard_normal((decode, c["hidden"]), dtype=np.float32))
    xp_d, xd_d = xp.to(dev, dtype), xd.to(dev, dtype)
    ours = build("llmm", c, layers, dtype, dev, max_len)
    ref = build("ref", c, layers, torch.float64, torch.device("cpu"), max_len)
    with torch.inference_mode():
        got = generate(ours, xp_d, xd_d)
        want = generate(ref, xp_d.cpu().double(), xd_d.cpu().double())
    err = max(float((g.double().cpu() - w).abs().max() / w.abs().max()) for g, w in zip(got, want))
    if not quiet:
        print(f"bitnet_decoder {device} ({dtype}): {c['layers']} layers, hidden {c['hidden']}, FFN {c['inter']}, "
              f"heads {c['heads']} / {c['kv_heads']}; prefill {prefill}, decode {decode}; "
              f"max rel err vs float64 {err:.2e}")
    if device != "cuda" or quiet:  # the timings are for the script's own output
        release(ours)
        return err
    sync = torch.cuda.synchronize
    dense = build("torch", c, layers, dtype, dev, max_len)
    rows = {}
    with torch.inference_mode():
        for name, model in (("llmm", ours), ("torch bf16", dense)):
            t_pre = timed(lambda: model(xp_d, torch.arange(prefill, device=dev)), sync)
            t_dec = timed(lambda: [model(xd_d[i:i + 1], torch.tensor([prefill + i], device=dev))
                                   for i in range(decode)], sync)
            g_us = graph_step_us(model, c["hidden"], prefill, dtype, dev)
            rows[name] = (prefill / t_pre, decode / t_dec, 1e6 / g_us)
    release(ours)
    base = rows["torch bf16"]
    for name, (pre, dec, gr) in rows.items():
        print(f"  {name:11s} prefill {pre:10.0f} tok/s ({pre / base[0]:.2f}x)   decode eager {dec:8.0f} tok/s "
              f"({dec / base[1]:.2f}x)   decode graph replay {gr:8.0f} tok/s ({gr / base[2]:.2f}x)")
    return err


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--prefill", type=int, default=None, help="prompt tokens (default: 16 on cpu, 128 on cuda)")
    ap.add_argument("--decode", type=int, default=None, help="decode steps (default: 4 on cpu, 32 on cuda)")
    ap.add_argument("--small", action="store_true", help="small layers (always on for --device cpu)")
    a = ap.parse_args()
    cuda = a.device == "cuda"
    run(a.device, a.prefill or (128 if cuda else 16), a.decode or (32 if cuda else 4), small=a.small or not cuda)
