"""The MoE expert FFN with its experts split over the ranks of a torch.distributed group
(llmm.distributed.ExpertParallelMoE): each rank routes its own tokens, the pairs travel to the
ranks owning their experts by all-to-all, and come back combined in slot order. Checks every
rank's output against the same layer in one process (bitwise) and prints the time per call.

    torchrun --nproc-per-node 2 examples/expert_parallel_moe.py                # CPU, gloo
    torchrun --nproc-per-node 2 examples/expert_parallel_moe.py --device cuda  # a GPU a rank, NCCL

Shapes default to a small Qwen3-MoE-like block; --hidden/--inter/--experts/--top-k/--tokens
change them.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist

import llmm.distributed as ld  # sets NCCL_NVLS_ENABLE=0 and the other no-multicast variables


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--inter", type=int, default=128)
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--top-k", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=32, help="tokens per rank")
    ap.add_argument("--calls", type=int, default=5)
    a = ap.parse_args()

    cuda = a.device == "cuda"
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    dtype = torch.bfloat16

    g = torch.Generator().manual_seed(0)  # every rank builds the same model, keeps its experts
    w13 = (torch.randn(a.experts, 2 * a.inter, a.hidden, generator=g) / a.hidden ** 0.5).to(dtype)
    w2 = (torch.randn(a.experts, a.hidden, a.inter, generator=g) / a.inter ** 0.5).to(dtype)
    w_router = torch.randn(a.experts, a.hidden, generator=g) / a.hidden ** 0.5
    lo, hi = ld.local_expert_range(a.experts, world, rank)
    moe = ld.ExpertParallelMoE(w13[lo:hi].to(dev), w2[lo:hi].to(dev), a.experts,
                               route="direct" if cuda else "auto")  # a pinned route: the same bits at any world size

    gr = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(a.tokens, a.hidden, generator=gr).to(dtype)
    logits = x.float() @ w_router.T
    top, ids = logits.topk(a.top_k, dim=1)
    wts = torch.softmax(top, dim=1)
    x, ids, wts = x.to(dev), ids.to(dev), wts.to(dev)

    out = moe(x, ids, wts)
    one = ld.ExpertParallelMoE(w13.to(dev), w2.to(dev), a.experts, route=moe.route, single_process=True)
    same = torch.equal(out, one(x, ids, wts))

    if cuda:
        torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(a.calls):
        moe(x, ids, wts)
    if cuda:
        torch.cuda.synchronize()
    dist.barrier()
    us = (time.perf_counter() - t0) / a.calls * 1e6
    print("rank %d of %d: experts [%d, %d), %d tokens: bitwise equal to one process: %s; %.0f us a call" %
          (rank, world, lo, hi, a.tokens, same, us), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
