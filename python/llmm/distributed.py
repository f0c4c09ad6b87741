"""Expert parallelism: llmm's MoE FFN with its experts sharded over the ranks of a torch.distributed
process group (NCCL on GPUs, gloo on CPUs).

    import torch.distributed as dist, llmm.distributed
    dist.init_process_group("nccl")                       # or "gloo" (CPU tensors)
    moe = llmm.distributed.ExpertParallelMoE(w_gate_up[lo:hi], w_down[lo:hi], n_experts=E)
    out = moe(x, topk_ids, topk_weights)                  # this rank's tokens in, their outputs out

Each rank holds a contiguous range of experts (ranks in order; ranges may differ in size) and its
own tokens. A call sends every (token, slot) pair to the rank owning its expert with two
all_to_all_single exchanges (counts first, then the token rows, local expert ids and routing
weights), runs the local experts on llmm.moe_ffn (one slot a row: routing weight applied inside),
sends the rows back by the reverse exchange and adds each token's slots in slot order in float32,
then rounds once to x's dtype. The arithmetic of a pair does not depend on which rank computes it
or on what else it computes (llmm.moe_ffn's rows are independent on the CPU backend and within a
fixed route on CUDA), so the result is bitwise the same for every world size, world size 1 (no
process group needed) included. It is not bitwise llmm.moe_ffn over all experts: there the slot
sum is done before the one rounding; here each slot's row is rounded to x's dtype first.

An id outside [0, n_experts) contributes nothing (its pair is never sent), but a NaN / Inf
routing weight on it still makes the token's outputs NaN, as llmm.moe_ffn does.

Every process that imports this module has NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1
and NVSHMEM_DISABLE_NVLS=1 set (NVLink multicast can take shared GPUs out of service); nothing
here calls a multicast API.
"""
from __future__ import annotations

import os
from typing import List, Tuple

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ[_k] = _v

__all__ = ["ExpertParallelMoE", "local_expert_range", "masked_experts_ffn"]


class ExpertParallelMoE:
    """The MoE expert FFN with this rank's experts w_gate_up [E_local, 2 * inter, hidden] and
    w_down [E_local, hidden, inter] (llmm.moe_ffn's layouts; FP8 stacks with their scales too) out
    of n_experts in all. group: a torch.distributed process group (None: the default group, or a
    single process when torch.distributed is not initialized); single_process=True: this process
    alone, holding every expert, whatever the group (the reference the ranks equal bitwise). activation, route, precision: as
    llmm.moe_ffn's, for the local experts (pin route on CUDA for results independent of the
    token counts). The ranks' expert counts are exchanged once here (a collective: every rank of
    the group constructs its layer together)."""

    def __init__(self, w_gate_up, w_down, n_experts: int, *, group=None, activation: str = "silu",
                 route: str = "auto", precision: str = "exact", w_gate_up_scale=None, w_down_scale=None,
                 single_process: bool = False):
        import torch
        import torch.distributed as dist

        from . import Error

        self._torch, self._dist = torch, dist
        self.w_gate_up, self.w_down = w_gate_up, w_down
        self.w_gate_up_scale, self.w_down_scale = w_gate_up_scale, w_down_scale
        self.activation, self.route, self.precision = activation, route, precision
        self.n_experts = int(n_experts)
        local = int(w_gate_up.shape[0])
        if int(w_down.shape[0]) != local:
            raise Error(f"llmm.distributed.ExpertParallelMoE: w_gate_up holds {local} experts but w_down "
                        f"{int(w_down.shape[0])}")
        self.group = group
        if not single_process and dist.is_available() and dist.is_initialized():
            self.world, self.rank = dist.get_world_size(group), dist.get_rank(group)
            # gloo moves CPU tensors, NCCL CUDA ones: the collectives run where the weights live.
            mine = torch.tensor([local], dtype=torch.int64, device=w_gate_up.device)
            counts = [torch.zeros_like(mine) for _ in range(self.world)]
            dist.all_gather(counts, mine, group=group)
            self.counts: List[int] = [int(c.item()) for c in counts]
        else:
            self.world, self.rank, self.counts = 1, 0, [local]
        if sum(self.counts) != self.n_experts:
            raise Error(f"llmm.distributed.ExpertParallelMoE: the ranks hold {self.counts} experts "
                        f"({sum(self.counts)} in all) but n_experts is {self.n_experts}")
        starts = [0]
        for c in self.counts:
            starts.append(starts[-1] + c)
        self.starts = starts  # rank r owns experts [starts[r], starts[r + 1])
        # phase_seconds: set to a dict to time each call's phases (routing, exchange, experts,
        # combine) into it, the device synchronized at each boundary (benchmarks only: it
        # serializes what would overlap).
        self.phase_seconds = None

    def _mark(self, phase: str, x) -> None:
        if self.phase_seconds is None:
            return
        import time

        if x.is_cuda:
            self._torch.cuda.synchronize(x.device)
        now = time.perf_counter()
        if phase:
            self.phase_seconds[phase] = self.phase_seconds.get(phase, 0.0) + now - self._t
        self._t = now

    def _exchange(self, out, inp, out_splits: List[int], in_splits: List[int]):
        if self.world == 1:
            out.copy_(inp)
        else:
            self._dist.all_to_all_single(out, inp, out_splits, in_splits, group=self.group)
        return out

    def __call__(self, x, topk_ids, topk_weights):
        return self.forward(x, topk_ids, topk_weights)

    def forward(self, x, topk_ids, topk_weights):
        """x [m, hidden] (this rank's tokens), topk_ids [m, top_k] (global expert ids, any integer
        dtype), topk_weights [m, top_k] (float): out [m, hidden] in x's dtype."""
        import llmm

        torch = self._torch
        Error = llmm.Error
        if x.dim() != 2 or topk_ids.dim() != 2 or tuple(topk_weights.shape) != tuple(topk_ids.shape) or \
                topk_ids.shape[0] != x.shape[0]:
            raise Error(f"llmm.distributed.ExpertParallelMoE: x must be [m, hidden] and topk_ids, topk_weights "
                        f"[m, top_k]; got {tuple(x.shape)}, {tuple(topk_ids.shape)}, {tuple(topk_weights.shape)}")
        if topk_ids.dtype.is_floating_point or topk_ids.dtype.is_complex or topk_ids.dtype == torch.bool:
            raise Error(f"llmm.distributed.ExpertParallelMoE: topk_ids must be integers, got {topk_ids.dtype}")
        m, hidden = int(x.shape[0]), int(x.shape[1])
        top_k = int(topk_ids.shape[1])
        dev = x.device
        self._mark("", x)
        ids = topk_ids.reshape(-1).to(torch.int64)
        wts = topk_weights.reshape(-1)
        valid = (ids >= 0) & (ids < self.n_experts)

        # The pairs to send, grouped by owner rank, in pair order within each rank.
        pairs = torch.nonzero(valid).reshape(-1)
        bounds = torch.tensor(self.starts[1:], dtype=torch.int64, device=dev)
        owner = torch.bucketize(ids[pairs], bounds, right=True)
        order = torch.argsort(owner, stable=True)
        pairs, owner = pairs[order], owner[order]
        send_counts = torch.bincount(owner, minlength=self.world).to(torch.int64)
        self._mark("route", x)
        recv_counts = torch.empty_like(send_counts)
        self._exchange(recv_counts, send_counts, [1] * self.world, [1] * self.world)
        send: List[int] = [int(v) for v in send_counts.tolist()]
        recv: List[int] = [int(v) for v in recv_counts.tolist()]
        self._mark("counts", x)
        n_recv = sum(recv)

        starts = torch.tensor(self.starts[:-1], dtype=torch.int64, device=dev)
        x_send = x.index_select(0, pairs // top_k).contiguous()
        id_send = (ids[pairs] - starts[owner]).to(torch.int32)
        w_send = wts[pairs].contiguous()
        self._mark("route", x)
        x_recv = self._exchange(x.new_empty((n_recv, hidden)), x_send, recv, send)
        id_recv = self._exchange(torch.empty(n_recv, dtype=torch.int32, device=dev), id_send, recv, send)
        w_recv = self._exchange(wts.new_empty((n_recv,)), w_send, recv, send)
        self._mark("dispatch", x)

        # The local experts, one slot a row (its routing weight applied inside, as moe_ffn does).
        scales = {}
        if self.w_gate_up_scale is not None or self.w_down_scale is not None:
            scales = dict(w_gate_up_scale=self.w_gate_up_scale, w_down_scale=self.w_down_scale)
        if n_recv > 0:
            y = llmm.moe_ffn(x_recv, self.w_gate_up, self.w_down, id_recv.reshape(n_recv, 1),
                             w_recv.reshape(n_recv, 1), activation=self.activation, route=self.route,
                             precision=self.precision, **scales)
        else:
            y = x.new_empty((0, hidden))
        self._mark("experts", x)
        y_back = self._exchange(x.new_empty((int(pairs.numel()), hidden)), y.contiguous(), send, recv)
        self._mark("return", x)

        # Each token's slots in slot order, in float32, rounded once to x's dtype. A pair with an
        # id outside [0, n_experts) adds weight * 0 (NaN / Inf weights propagate).
        contrib = torch.zeros((m * top_k, hidden), dtype=torch.float32, device=dev)
        if pairs.numel():
            contrib[pairs] = y_back.to(torch.float32)
        dropped = torch.nonzero(~valid).reshape(-1)
        if dropped.numel():
            contrib[dropped] = (wts[dropped].to(torch.float32) * 0.0).reshape(-1, 1).expand(-1, hidden)
        contrib = contrib.reshape(m, top_k, hidden)
        acc = torch.zeros((m, hidden), dtype=torch.float32, device=dev)
        for s in range(top_k):
            acc = acc + contrib[:, s]
        out = acc.to(x.dtype)
        self._mark("combine", x)
        return out


def local_expert_range(n_experts: int, world: int, rank: int) -> Tuple[int, int]:
    """(first, end) of the experts rank holds under the even contiguous split (the first
    n_experts % world ranks hold one more): a helper for slicing full weights."""
    base, extra = divmod(int(n_experts), int(world))
    first = rank * base + min(rank, extra)
    return first, first + base + (1 if rank < extra else 0)



def masked_experts_ffn(x, counts, w_gate_up, w_down, *, activation: str = "silu", route: str = "auto",
                       precision: str = "exact", w_gate_up_scale=None, w_down_scale=None):
    """The expert FFN on the masked layout of DeepEP's low-latency mode: x [E_local, max_m, hidden]
    (expert e's received tokens in rows 0 .. counts[e] - 1 of slab e), counts [E_local] integers on
    x's device. Returns out [E_local, max_m, hidden] in x's dtype: row r of slab e is
    w_down[e] @ act(w_gate_up[e] @ x[e, r]) for r < counts[e], zero after (a count above max_m
    counts as max_m, a negative one as 0). The counts are read on the device (no host sync: CUDA-graph
    capturable); each row is a one-slot llmm.moe_ffn row with weight 1, so a row's bits do not
    depend on the other rows within a pinned route."""
    import torch

    import llmm

    if x.dim() != 3 or counts.dim() != 1 or int(counts.shape[0]) != int(x.shape[0]):
        raise llmm.Error(f"llmm.distributed.masked_experts_ffn: x must be [E_local, max_m, hidden] and counts "
                         f"[E_local]; got {tuple(x.shape)} and {tuple(counts.shape)}")
    if counts.dtype.is_floating_point or counts.dtype.is_complex or counts.dtype == torch.bool:
        raise llmm.Error(f"llmm.distributed.masked_experts_ffn: counts must be integers, got {counts.dtype}")
    e_local, max_m, hidden = (int(v) for v in x.shape)
    rows = torch.arange(max_m, device=x.device).reshape(1, max_m)
    expert = torch.arange(e_local, device=x.device, dtype=torch.int32).reshape(e_local, 1)
    live = rows < counts.to(x.device).reshape(e_local, 1).to(torch.int64)
    ids = torch.where(live, expert, torch.full_like(expert, -1)).reshape(e_local * max_m, 1)
    wts = torch.ones((e_local * max_m, 1), dtype=torch.float32, device=x.device)
    scales = {}
    if w_gate_up_scale is not None or w_down_scale is not None:
        scales = dict(w_gate_up_scale=w_gate_up_scale, w_down_scale=w_down_scale)
    out = llmm.moe_ffn(x.reshape(e_local * max_m, hidden), w_gate_up, w_down, ids, wts, activation=activation,
                       route=route, precision=precision, **scales)
    return out.reshape(e_local, max_m, hidden)
