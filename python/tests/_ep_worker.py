"""One rank of the expert-parallel tests (test_expert_parallel.py): builds the seeded model and
this rank's tokens, runs llmm.distributed.ExpertParallelMoE over gloo and saves the output."""
import torch
import torch.distributed as dist

E, HIDDEN, INTER, TOP_K = 6, 48, 24, 3


def model(dtype):
    g = torch.Generator().manual_seed(7)
    w13 = (torch.randn(E, 2 * INTER, HIDDEN, generator=g) / HIDDEN ** 0.5).to(dtype)
    w2 = (torch.randn(E, HIDDEN, INTER, generator=g) / INTER ** 0.5).to(dtype)
    return w13, w2


def tokens(rank, dtype):
    """Rank 0: uniform routing; 1: ids outside [0, E) (one with a NaN weight); 2: no tokens;
    3: every slot on expert 0 (hot). Ids repeat within a token."""
    g = torch.Generator().manual_seed(1000 + rank)
    m = [9, 7, 0, 11][rank % 4]
    x = torch.randn(m, HIDDEN, generator=g).to(dtype)
    ids = torch.randint(0, E, (m, TOP_K), generator=g)
    wts = torch.rand(m, TOP_K, generator=g)
    if rank % 4 == 1:
        ids[0, 1], ids[2, 0], ids[3, 2] = -1, E, E + 5
        wts[3, 2] = float("nan")
    if rank % 4 == 3:
        ids.zero_()
    return x, ids, wts


def work(rank, world, init_file, out_dir, dtype_name):
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    try:
        import llmm.distributed as ld

        dtype = getattr(torch, dtype_name)
        w13, w2 = model(dtype)
        lo, hi = ld.local_expert_range(E, world, rank)
        moe = ld.ExpertParallelMoE(w13[lo:hi], w2[lo:hi], E)
        x, ids, wts = tokens(rank, dtype)
        out = moe(x, ids, wts)
        torch.save(out, "%s/out%d.pt" % (out_dir, rank))
    finally:
        dist.destroy_process_group()
