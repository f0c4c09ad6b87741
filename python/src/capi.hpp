// The C entry points llmm._llmm hands to llmm._llmm_torch through the capsule `_llmm._capi`.
//
// Why a capsule: the torch extension is a second module, and a second copy of the library's
// state (the per-device contexts, cuBLASLt handles and plans, the ternary-weight caches) would
// split what must be one. So the torch side only turns at::Tensors into Views and calls these;
// everything stateful runs in _llmm. Each function is called with the GIL held and returns 0, or
// -1 with the Python error set (llmm.Error for a refusal, TypeError for a wrong argument type),
// having enqueued nothing.
#pragma once
#include <Python.h>

#include <cstdint>

#include "llmm/view.hpp"

namespace llmm::capi {

inline constexpr unsigned kAbi = 3;  // bump when a signature below changes
inline constexpr const char* kCapsuleName = "llmm._llmm._capi";

struct Table {
  unsigned abi;
  // out = op(a) @ op(b) on out's device and `stream` (llmm.matmul's contract).
  int (*matmul)(const View& a, const View& b, const View& out, bool transpose_a, bool transpose_b, PyObject* precision,
                PyObject* route, std::uintptr_t stream);
  // out[m, n] = x[m, k] @ W[n, k]^T for the llmm.TernaryWeight `weight` (llmm.gemm_tq2's contract),
  // x Hadamard-rotated first where rotation_signs (float32 [k]) is given (null: none).
  int (*gemm_tq2)(PyObject* weight, const View& x, const View& out, PyObject* precision, PyObject* route,
                  const View* rotation_signs, int rotation_block, std::uintptr_t stream);
  // out[t, s, :] = weights[ids[t, s]] @ x(t, s) with the library's own grouped scratch for out's
  // device and `stream` (llmm.matmul_id's contract without scratch=). The flags are the Python
  // objects as given, so that their refusals are the DLPack path's.
  int (*matmul_id)(const View& weights, const View& x, const View& ids, const View& out, PyObject* layout,
                   PyObject* may_repeat, PyObject* route, PyObject* precision, PyObject* grouped_kernel,
                   std::uintptr_t stream);
};

}  // namespace llmm::capi
