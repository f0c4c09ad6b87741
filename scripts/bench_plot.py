"""Pictures of llmm-bench JSON Lines (used by `scripts/bench-summary --plot DIR`): per suite a
speedup bar chart against the baseline measured in the same run (dense: cuBLASLt; MoE:
torch._grouped_mm where its rows were merged, else the per-expert cuBLAS loop) and a roofline of
the achieved rate against arithmetic intensity under the copy and GEMM ceilings. Ceilings come
from the run's own smoke rows when present, else the anchors measured on the H200 (4.24 TB/s
device copy, 710 TFLOP/s bf16 GEMM), as the title says. Needs matplotlib
(pip install -r scripts/requirements-plot.txt)."""
import os

ANCHOR_COPY_TBS, ANCHOR_BF16_TFLOPS = 4.24, 710.0


def _ceilings(rows):
    copy = [r["gbps"] / 1000 for r in rows if r["suite"] == "smoke" and "copy" in r["case"] and r.get("gbps")]
    gemm = [r["tflops"] for r in rows if r["suite"] == "smoke" and "gemm" in r["case"] and r.get("tflops")]
    if copy and gemm:
        return max(copy), max(gemm), "this run's smoke suite"
    return ANCHOR_COPY_TBS, ANCHOR_BF16_TFLOPS, "H200 anchors (device copy, bf16 GEMM)"


def _speedups(rows, torch_by_key):
    """(suite, [(label, ratio, baseline name)]) for the suites with same-run baselines."""
    out = {}
    for r in rows:
        if r["suite"] not in ("dense", "moe", "ternary") or not r.get("us") or r["case"].endswith(("_gather", "_mma_sync", "_mapped", "_fused")):
            continue
        label = "%s %s" % (r["case"], r["dtype"])
        if r["suite"] == "moe" and (r["case"], r["dtype"]) in torch_by_key:
            t = torch_by_key[(r["case"], r["dtype"])]
            out.setdefault("moe", []).append((label + " " + r["route"], t["us"] / r["us"], "torch._grouped_mm"))
        elif r.get("speedup"):
            out.setdefault(r["suite"], []).append((label + " " + r["route"], r["speedup"], r.get("baseline") or ""))
    return out


def plot(rows, system, torch_rows, outdir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(outdir, exist_ok=True)
    torch_by_key = {(r["case"], r["dtype"]): r for r in torch_rows}
    written = []
    for suite, bars in _speedups(rows, torch_by_key).items():
        bars = bars[:80]  # one picture stays readable
        fig, ax = plt.subplots(figsize=(10, max(3, 0.22 * len(bars) + 1)))
        labels = [b[0] for b in bars]
        vals = [b[1] for b in bars]
        colors = ["#2a7" if v >= 1 else "#c44" for v in vals]
        ax.barh(range(len(bars)), vals, color=colors)
        ax.axvline(1.0, color="k", lw=0.8)
        ax.set_yticks(range(len(bars)))
        ax.set_yticklabels(labels, fontsize=6)
        ax.invert_yaxis()
        base = sorted({b[2] for b in bars})
        ax.set_xlabel("speedup = baseline time / llmm time, same run (baselines: " + ", ".join(base)[:90] + ")", fontsize=8)
        ax.set_title("llmm %s suite vs its baseline\n%s" % (suite, (system or "")[:110]), fontsize=8)
        fig.tight_layout()
        path = os.path.join(outdir, "speedup_%s.png" % suite)
        fig.savefig(path, dpi=90)
        plt.close(fig)
        written.append(path)
    copy_tbs, gemm_tflops, source = _ceilings(rows)
    pts = [r for r in rows if r["suite"] in ("dense", "moe", "ternary") and r.get("tflops") and r.get("gbps")
           and not r["case"].endswith(("_gather", "_mma_sync", "_mapped", "_fused"))]
    if pts:
        fig, ax = plt.subplots(figsize=(8, 6))
        for suite, marker in (("dense", "o"), ("moe", "s"), ("ternary", "^")):
            sel = [r for r in pts if r["suite"] == suite]
            if sel:
                ax.scatter([1000 * r["tflops"] / r["gbps"] for r in sel], [r["tflops"] for r in sel], marker=marker,
                           s=14, label=suite, alpha=0.7)
        xs = [0.1 * 1.25 ** i for i in range(55)]  # 0.1 .. ~20000 FLOPs per byte
        ax.plot(xs, [min(gemm_tflops, copy_tbs * x) for x in xs], "k-", lw=1,
                label="roof: %.2f TB/s, %.0f TFLOP/s" % (copy_tbs, gemm_tflops))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (FLOPs per byte the row counts)")
        ax.set_ylabel("achieved TFLOP/s")
        ax.set_title("llmm roofline (ceilings: %s)\n%s" % (source, (system or "")[:100]), fontsize=8)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = os.path.join(outdir, "roofline.png")
        fig.savefig(path, dpi=90)
        plt.close(fig)
        written.append(path)
    return written
