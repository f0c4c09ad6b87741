"""Shared skips: torch tests skip without torch, CUDA tests without a GPU; LLMM_REQUIRE_GPU=1 (set by
scripts/gpu-check) turns those skips into failures, so a GPU run cannot pass by skipping."""
import os

import pytest

import llmm

REQUIRE_GPU = os.environ.get("LLMM_REQUIRE_GPU") == "1"


def _skip_or_fail(reason):
    if REQUIRE_GPU:
        pytest.fail(f"LLMM_REQUIRE_GPU=1 but {reason}")
    pytest.skip(reason)


def need_torch():
    """torch, or a skip (a failure under LLMM_REQUIRE_GPU=1)."""
    try:
        import torch
    except ImportError:
        _skip_or_fail("torch is not installed (pip install torch to run the torch tests)")
    return torch


def torch_or_skip_module(what):
    """torch for a test module that needs it throughout: the whole module skips without torch
    (saying `what`), and fails to import under LLMM_REQUIRE_GPU=1."""
    try:
        import torch
    except ImportError:
        if REQUIRE_GPU:
            raise
        pytest.skip(f"torch is not installed: {what}", allow_module_level=True)
    return torch


def need_cuda_torch():
    """torch with a CUDA device that llmm can use, or a skip (a failure under LLMM_REQUIRE_GPU=1)."""
    torch = need_torch()
    if not torch.cuda.is_available():
        _skip_or_fail("torch sees no CUDA device: CUDA tests skipped")
    if not llmm.cuda_available():
        _skip_or_fail("llmm was built without CUDA or finds no device: CUDA tests skipped")
    return torch


@pytest.fixture
def torch_mod():
    return need_torch()


@pytest.fixture
def cuda_torch():
    return need_cuda_torch()
