"""scripts/bench-summary's router audit on synthetic llmm-bench rows (no GPU, no llmm import)."""
import importlib.machinery
import importlib.util
import os

_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "bench-summary")


def _summary():
    loader = importlib.machinery.SourceFileLoader("bench_summary", _PATH)
    spec = importlib.util.spec_from_loader("bench_summary", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def _row(case, us, baseline_us, route="tq2_stream_v2", baseline="tq2_stream_v4_x"):
    return {"suite": "ternary", "case": case, "route": route, "us": us, "baseline": baseline, "baseline_us": baseline_us}


def test_router_audit_names_only_ab_rows_where_another_route_won():
    rows = [
        _row("dit_out_m8_vs_v4", 11.91, 9.30),        # v4 1.28x faster than Auto's v2: flagged
        _row("dit_out_m8", 11.91, 9.16, baseline="cublas_bf16_dense"),  # not an A/B row: never flagged
        _row("dit_proj_m1_vs_v4", 10.89, 11.88),      # Auto faster
        _row("llama70b_down_m1_vs_v5", 26.29, 25.98),  # 1.2% faster: within the margin
        _row("x_m1_vs_v3", 10.0, None),               # no baseline time
    ]
    lines = _summary().router_audit(rows)
    assert len(lines) == 1
    assert "dit_out_m8_vs_v4" in lines[0] and "took tq2_stream_v2 (11.91 us)" in lines[0]
    assert "tq2_stream_v4_x ran 9.30 us (1.28x faster)" in lines[0]
    assert _summary().router_audit(rows, margin=0.01)[-1].startswith("router audit: ternary llama70b_down_m1_vs_v5")


def _dense(case, m, n, k, us, base_us, dtype="bf16", route="gemv_wide"):
    return {"suite": "dense", "case": case, "route": route, "dtype": dtype, "m": m, "n": n, "k": k, "us": us,
            "baseline": "cublaslt", "baseline_us": base_us}


def test_dense_decode_targets_split_by_weight_size_and_fit_the_fixed_cost():
    bs = _summary()
    # us = 2 + bytes / 4 TB/s for the route, 3 + bytes / 3.5 TB/s for cuBLASLt: exact fits
    def us(b, fixed, tbs):
        return fixed + b / (tbs * 1e6)
    rows = []
    for name, n, k in (("dit_out", 3072, 3072), ("bitnet2b_q", 2560, 2560), ("llama8b_up", 14336, 4096)):
        b = n * k * 2
        rows.append(_dense(name + "_m8_gemv_wide", 8, n, k, us(b, 2.0, 4.0), us(b, 3.0, 3.5)))
        rows.append(_dense(name + "_m16", 16, n, k, 10.0, 10.0, route="cublaslt"))  # auto
        rows.append(_dense(name + "_m1", 1, n, k, 5.0, 10.0, route="gemv_wide"))   # auto at m 1, not m 16
    rows.append({"suite": "ternary", "case": "dit_out_m8", "m": 8, "us": 1.0, "baseline_us": 2.0})  # other suites
    lines = bs.dense_decode_targets(rows)
    assert len(lines) == 3
    sk = [line for line in lines if "gemv_wide m 8" in line]
    assert len(sk) == 1
    small = [us(n * k * 2, 3.0, 3.5) / us(n * k * 2, 2.0, 4.0) for n, k in ((3072, 3072), (2560, 2560))]
    assert ("<= 30 MB %.2f-%.2fx (>= 1.3: 0/2)" % (min(small), max(small))) in sk[0]
    assert "> 30 MB" in sk[0] and "(>= 1.0: 1/1)" in sk[0]
    assert "fit 4.00 TB/s + 2.00 us, cuBLASLt 3.50 TB/s + 3.00 us" in sk[0]
    auto16 = [line for line in lines if "auto m 16" in line][0]
    assert "1.00-1.00x (>= 1.3: 0/2)" in auto16 and "fit -" in auto16  # flat times: no bandwidth to fit
    assert any("auto m 1:" in line and "2.00-2.00x (>= 1.3: 2/2)" in line for line in lines)
    assert bs.fit_line([(1.0, 5.0)]) is None


def _moe(case, us, gbps=None, m=16, dtype="bf16"):
    return {"suite": "moe", "case": case, "dtype": dtype, "m": m, "us": us, "gbps": gbps, "route": "grouped"}


def test_moe_targets_count_only_the_rows_auto_ran():
    bs = _summary()
    rows = [
        _moe("qwen3_gateup_hot_m16", 24.0), _moe("qwen3_gateup_hot_m16", 21.0),  # direct and grouped: best 21
        _moe("qwen3_gateup_hot_m16_fused", 20.0),                                  # an A/B row: not auto's
        _moe("qwen3_down_hot_m16", 12.0),
        _moe("qwen3_down_uniform_m1", 9.0), _moe("qwen3_down_uniform_m1_skinny", 6.0),  # a retired kernel's row
        _moe("qwen3_down_uniform_m1", 1.0, dtype="f16"),                           # not bf16: ignored
    ]
    dec = bs.moe_targets(rows, {("qwen3_gateup_hot_m16", "bf16"): {"us": 42.0}})[0]
    assert "(bf16, best route per case, 3 cases)" in dec
    assert "vs torch._grouped_mm min 2.00x (qwen3_gateup_hot_m16), >=2x in 1/1" in dec
