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
