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


def fp8_model():
    """The bf16 model's experts as FP8 e4m3 with 128 x 128 block scales (llmm.quantize_fp8 per
    expert): (w13 codes, w13 scales, w2 codes, w2 scales), scales [E, ceil(n/128), ceil(k/128)]."""
    import llmm

    w13, w2 = model(torch.float32)
    out = []
    for w in (w13, w2):
        pairs = [llmm.quantize_fp8(w[e], scale="block") for e in range(E)]
        out += [torch.stack([c for c, _ in pairs]), torch.stack([s for _, s in pairs])]
    return tuple(out)


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

        lo, hi = ld.local_expert_range(E, world, rank)
        if dtype_name == "fp8":
            c13, s13, c2, s2 = fp8_model()
            moe = ld.ExpertParallelMoE(c13[lo:hi], c2[lo:hi], E, w_gate_up_scale=s13[lo:hi], w_down_scale=s2[lo:hi])
            dtype = torch.bfloat16
        else:
            dtype = getattr(torch, dtype_name)
            w13, w2 = model(dtype)
            moe = ld.ExpertParallelMoE(w13[lo:hi], w2[lo:hi], E)
        x, ids, wts = tokens(rank, dtype)
        out = moe(x, ids, wts)
        torch.save(out, "%s/out%d.pt" % (out_dir, rank))
    finally:
        dist.destroy_process_group()
