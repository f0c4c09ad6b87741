#!/usr/bin/env python3
"""llmm.distributed.ExpertParallelMoE on N ranks against llmm.moe_ffn on one (issue 51).

    torchrun --nproc-per-node 2 bench/expert_parallel.py [--model qwen3-235b] [--m 1,8,...]
                                                       [--json FILE] [--reps N] [--route direct]
    torchrun --nproc-per-node 2 bench/expert_parallel.py --cpu-check   # gloo, tiny shapes

Per m (tokens per rank; uniform random routing, seeded per rank), with bf16 weights built on
every rank from one seed, each rank keeping its contiguous share of the experts:
  ep_us      the layer's time per call on N ranks (each rank m tokens; the slowest rank's median)
  one_us     llmm.moe_ffn over all experts on rank 0 alone for all N x m tokens (the same routing)
  speedup    one_us / ep_us: N ranks' throughput over one GPU's (target >= 1.7x at m >= 4096
             on 2 GPUs)
  a2a        the share of the layer's time spent in its exchanges (counts, dispatch, return),
             from a separate profiled pass whose phases are synchronized (phase_seconds)
and checks every rank's output bitwise against the same layer in one process
(single_process=True, on rank 0, for each rank's tokens). Times are eager (events / host clock
around a loop, barrier-aligned), as a serving engine calls the layer. NCCL_NVLS_ENABLE=0 and the
other no-multicast variables are set by llmm.distributed itself.

Never run on GPUs yet: written while no multi-GPU machine was lent; --cpu-check runs every path.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import llmm
import llmm.distributed as ld

MODELS = {  # hidden, inter, experts, top_k
    "qwen3-235b": (4096, 1536, 128, 8),
    "qwen3-30b": (2048, 768, 128, 8),
    "tiny": (64, 32, 8, 2),
}


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="qwen3-235b", choices=sorted(MODELS))
    ap.add_argument("--m", default="1,8,64,512,4096,8192", help="comma list of tokens per rank")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--route", default="auto", help="moe_ffn route for the local experts and the baseline")
    ap.add_argument("--json", default=None)
    ap.add_argument("--cpu-check", action="store_true", help="gloo on CPU tensors, the tiny model, m 1,5")
    a = ap.parse_args()
    if a.cpu_check:
        a.model, a.m, a.reps = "tiny", "1,5", 2
    a.m = [int(v) for v in a.m.split(",") if v.strip()]
    return a


def timed(fn, reps, cuda, dev):
    """Median seconds of fn() over reps, each rep barrier-aligned across the ranks."""
    fn()
    samples = []
    for _ in range(reps):
        dist.barrier()
        if cuda:
            torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize(dev)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main():
    a = parse()
    cuda = not a.cpu_check
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    hidden, inter, experts, top_k = MODELS[a.model]
    dtype = torch.bfloat16
    g = torch.Generator().manual_seed(0)
    lo, hi = ld.local_expert_range(experts, world, rank)
    # Every rank draws the whole stack from one seed (the same weights everywhere), keeps its share.
    w13 = (torch.randn(experts, 2 * inter, hidden, generator=g) / hidden ** 0.5).to(dtype)
    w2 = (torch.randn(experts, hidden, inter, generator=g) / inter ** 0.5).to(dtype)
    moe = ld.ExpertParallelMoE(w13[lo:hi].to(dev), w2[lo:hi].to(dev), experts, route=a.route)
    full13 = w13.to(dev) if rank == 0 else None
    full2 = w2.to(dev) if rank == 0 else None
    del w13, w2
    out_f = open(a.json, "w") if (a.json and rank == 0) else None
    if rank == 0:
        print("expert_parallel: %s (hidden %d, inter %d, %d experts, top %d), %d ranks, %s, route %s" %
              (a.model, hidden, inter, experts, top_k, world, "cuda/nccl" if cuda else "cpu/gloo", a.route),
              flush=True)
        print("%7s %10s %10s %8s %6s  %s" % ("m/rank", "ep_us", "one_us", "speedup", "a2a", "bitwise"), flush=True)
    bad = 0
    for m in a.m:
        gr = torch.Generator().manual_seed(1000 * m + rank)
        x = torch.randn(m, hidden, generator=gr).to(dtype).to(dev)
        ids = torch.randint(0, experts, (m, top_k), generator=gr).to(dev)
        wts = torch.softmax(torch.randn(m, top_k, generator=gr), dim=1).to(dev)
        ep_s = timed(lambda: moe(x, ids, wts), a.reps, cuda, dev)
        moe.phase_seconds = {}
        moe(x, ids, wts)
        ph, moe.phase_seconds = moe.phase_seconds, None
        a2a = (ph.get("counts", 0) + ph.get("dispatch", 0) + ph.get("return", 0)) / max(sum(ph.values()), 1e-12)
        out = moe(x, ids, wts)
        # Everyone's tokens, routing and outputs to rank 0: the one-GPU baseline and the bitwise check.
        xs = [torch.empty_like(x) for _ in range(world)]
        idss = [torch.empty_like(ids) for _ in range(world)]
        wtss = [torch.empty_like(wts) for _ in range(world)]
        outs = [torch.empty_like(out) for _ in range(world)]
        for src, lst in ((x, xs), (ids, idss), (wts, wtss), (out, outs)):
            dist.all_gather(lst, src)
        worst = torch.tensor([ep_s], dtype=torch.float64, device=dev)
        dist.all_reduce(worst, op=dist.ReduceOp.MAX)
        if rank == 0:
            one = ld.ExpertParallelMoE(full13, full2, experts, route=a.route, single_process=True)
            same = all(torch.equal(one(xs[r], idss[r], wtss[r]), outs[r]) for r in range(world))
            X, I, Wt = torch.cat(xs), torch.cat(idss), torch.cat(wtss)
            one_s = timed(lambda: llmm.moe_ffn(X, full13, full2, I, Wt, route=a.route), a.reps, cuda, dev) \
                if not cuda else None
            if cuda:  # rank 0 alone: no barrier inside
                llmm.moe_ffn(X, full13, full2, I, Wt, route=a.route)
                ss = []
                for _ in range(a.reps):
                    torch.cuda.synchronize(dev)
                    t0 = time.perf_counter()
                    llmm.moe_ffn(X, full13, full2, I, Wt, route=a.route)
                    torch.cuda.synchronize(dev)
                    ss.append(time.perf_counter() - t0)
                one_s = statistics.median(ss)
            ep_us, one_us = float(worst.item()) * 1e6, one_s * 1e6
            bad += 0 if same else 1
            print("%7d %10.1f %10.1f %8.2f %5.0f%%  %s" % (m, ep_us, one_us, one_us / ep_us, 100 * a2a, same),
                  flush=True)
            if out_f:
                out_f.write(json.dumps({"suite": "expert_parallel", "model": a.model, "ranks": world, "m_per_rank": m,
                                        "ep_us": ep_us, "one_us": one_us, "speedup": one_us / ep_us,
                                        "a2a_share_rank0": a2a, "phases_rank0": ph, "bitwise": same,
                                        "route": a.route, "device": "cuda" if cuda else "cpu",
                                        "torch": torch.__version__}) + "\n")
        else:
            # rank 0 times the one-GPU baseline alone (CUDA) or with barriers (CPU: join them)
            if not cuda:
                fn = lambda: None  # noqa: E731
                timed(fn, a.reps, cuda, dev)
        dist.barrier()
    if out_f:
        out_f.close()
    dist.destroy_process_group()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
