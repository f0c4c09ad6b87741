// Device-side benchmark data: random fills (never zero) and a sampled float64 check.
#pragma once
#include <cstdint>

#include "core/dense/dense_args.hpp"

namespace llmm::bench {

// n elements of `dtype` at p: sign * (0.25 + u) * 2^e * scale, e in [-3, 3], like the tests'.
void fill_random_device(void* p, DType dtype, std::int64_t n, std::uint64_t seed, double scale, StreamHandle s);

// dst = src with 16-byte loads and stores over a grid-stride loop (bytes a multiple of 16):
// the copy ceiling of an ordinary kernel, beside cudaMemcpyAsync's.
void copy_kernel_device(void* dst, const void* src, std::size_t bytes, int sm_count, StreamHandle s);

// The launch floor of the timing method: a one-warp kernel that writes one float to sink.
// kernels 1: one plain launch; 2: a plain one, then one launched with programmatic dependent
// launch that waits on the first (griddepcontrol; sm_90, the streaming engine's staging +
// main pair). What a call of llmm's smallest kernels cannot go below in a CUDA graph.
void null_kernels_device(float* sink, int kernels, StreamHandle s);

// The two cudaFuncSetAttribute calls llmm's launchers make before each launch of a kernel with
// dynamic shared memory (cuda_common::set_smem_bytes), on the null kernel: their host cost.
void set_smem_attributes_device(int smem_bytes);

struct SampledError {
  double max_abs = 0, max_rel = 0;  // rel: |err| / sum_k |a||b| (error relative to its scale)
  int samples = 0;
};
// Copies a, b and c of a finished dense problem to the host and checks `samples` output
// elements (spread over batch, rows and columns) against float64 dot products.
SampledError sample_check(const cuda_dense::DenseArgs& g, int samples = 256);

}  // namespace llmm::bench
