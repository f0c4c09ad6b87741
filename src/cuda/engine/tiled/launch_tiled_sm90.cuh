// Host side of one tiled-engine launch, shared by the instances: the shared-memory opt-in and
// the launch itself, each failure named after the kernel.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <string>

#include "core/engine/tiled_sm90_plan.hpp"
#include "cuda/common/launch_pdl.cuh"
#include "cuda/common/tensor_map.hpp"
#include "cuda/dense/dense_common.cuh"
#include "llmm/error.hpp"

namespace llmm::engine {

// The staged MoE instance takes its tiles from the scratch's tile counter; LLMM_TILED_SCHED=0
// gives each CTA a fixed share instead (the A/B of docs/performance.md).
inline bool tiled_sm90_sched_env() {
  static const bool on = [] {
    const char* v = std::getenv("LLMM_TILED_SCHED");
    return !(v && v[0] == '0');
  }();
  return on;
}

template <class Params, class WParams>
void launch_tiled_sm90(void (*kernel)(CUtensorMap, CUtensorMap, CUtensorMap, Params, WParams), const CUtensorMap& tm_w,
                       const CUtensorMap& tm_x, const CUtensorMap& tm_x_narrow, const Params& p, const WParams& wp,
                       const TiledSm90Launch& l, StreamHandle stream, const std::string& name, bool pdl = false) {
  // Per device and cheap (not a stream operation, fine under graph capture): set every launch.
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, l.smem_bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    fail(ErrorCode::Cuda, name, ": cannot reserve ", l.smem_bytes, " bytes of shared memory: ", cudaGetErrorString(e));
  }
  // pdl: the kernel may start while the one before it on the stream finishes (it waits for it
  // before reading anything that kernel wrote: griddepcontrol.wait in tiled_sm90_kernel).
  if (pdl)
    cuda_common::launch_pdl(kernel, dim3(l.grid), dim3(kTiledThreads), static_cast<std::size_t>(l.smem_bytes), stream, tm_w,
                            tm_x, tm_x_narrow, p, wp);
  else
    kernel<<<l.grid, kTiledThreads, l.smem_bytes, stream>>>(tm_w, tm_x, tm_x_narrow, p, wp);
  cuda_dense::host::check_launch(name);
}

// A [batch][rows][k] operand of elem_bytes-byte elements (2: f16/bf16, 4: f32) with row stride
// ld and batch stride bs (elements; bs 0 broadcasts one entry), read in boxes of one 128-byte
// swizzle row of k (64 or 32 elements) x box_rows.
inline CUtensorMap tiled_sm90_operand_map(const void* base, std::int64_t rows, std::int64_t k, std::int64_t ld,
                                          std::int64_t bs, std::int64_t batch, std::uint32_t box_rows, int elem_bytes,
                                          const char* who) {
  const bool batched = bs != 0 && batch > 1;
  const std::uint64_t dims[3] = {static_cast<std::uint64_t>(k), static_cast<std::uint64_t>(rows),
                                 static_cast<std::uint64_t>(batched ? batch : 1)};
  const std::uint64_t es = static_cast<std::uint64_t>(elem_bytes), row_bytes = static_cast<std::uint64_t>(ld) * es;
  const std::uint64_t strides[2] = {row_bytes, batched ? static_cast<std::uint64_t>(bs) * es : row_bytes * rows};
  const std::uint32_t box[3] = {static_cast<std::uint32_t>(128 / elem_bytes), box_rows, 1};
  return cuda_common::make_tensor_map_3d_sw128(base, elem_bytes, dims, strides, box, who);
}

}  // namespace llmm::engine
