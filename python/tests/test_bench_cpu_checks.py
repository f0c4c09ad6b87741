"""The MoE benches' --cpu-check modes (every implementation they time, against llmm, on tiny CPU
cases) run in CI, so a bench that a GPU call will run is known to work before the call."""
import os
import subprocess
import sys

import pytest

from conftest import need_torch

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")


def run_check(script, *args):
    need_torch()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (BENCH, env.get("PYTHONPATH", "")) if p)
    r = subprocess.run([sys.executable, os.path.join(BENCH, script), "--cpu-check", *args], capture_output=True,
                       text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout


def test_moe_ffn_bench_cpu_check():
    out = run_check("moe_ffn.py")
    assert "cpu-check: ok" in out


def test_transformers_experts_bench_cpu_check():
    pytest.importorskip("transformers", minversion="5.0", reason="transformers >= 5 is not installed")
    out = run_check("transformers_experts.py")
    assert "cpu-check: ok" in out and "grouped_mm vs llmm" in out
