// Expert-ID matmul (Mixture of Experts): every token's top_k expert rows in one call.
//   out[t, s, :] = W[ids[t, s]] . in(t, s)   for a stack of n_experts row-major [n, k] weights.
// Fail-closed capability with exact byte extents; Direct (one kernel) and GroupedPrefill (map +
// grouped GEMM, caller-owned scratch) routes; no host synchronisation on either.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "llmm/buffer.hpp"
#include "llmm/context.hpp"
#include "llmm/matmul.hpp"
#include "llmm/view.hpp"

namespace llmm {

inline constexpr std::uint32_t kMatmulIdSchemaVersion = 1;
// The map kernel runs one block with a thread per expert: the grouped route's expert limit.
inline constexpr std::uint32_t kMatmulIdGroupedMaxExperts = 1024;

enum class MatmulIdInputLayout {
  SharedPerToken,  // input [m, k]: one row shared by a token's top_k slots
  Slotted,         // input [m * top_k, k]: a row per (token, slot)
};
enum class MatmulIdMultiplicity {
  DistinctPerToken,  // the caller promises a token's ids are distinct (needed by GroupedPrefill)
  MayRepeat,
};
enum class MatmulIdRoute {
  Direct,          // one kernel over every routed row (decode, repeated ids)
  GroupedPrefill,  // map kernel (rows per expert) + grouped GEMM: two kernels
};
const char* matmul_id_route_name(MatmulIdRoute r) noexcept;

struct MatmulIdParams {
  std::uint32_t m = 0, n = 0, k = 0, top_k = 0, n_experts = 0;
  std::uint64_t expert_stride_bytes = 0;  // from expert e to e + 1: >= one [n, k] matrix, dtype-aligned
  MatmulIdInputLayout input_layout = MatmulIdInputLayout::SharedPerToken;
  MatmulIdMultiplicity id_multiplicity = MatmulIdMultiplicity::DistinctPerToken;
  MatmulIdRoute route = MatmulIdRoute::Direct;  // the caller's explicit choice
  DType input_dtype = DType::F32;   // f32 (the seed's), f16 or bf16
  DType output_dtype = DType::F32;  // f32 or the input's dtype
};

struct MatmulIdScratchRequirement {
  std::size_t expert_counts_bytes = 0;  // n_experts u32
  std::size_t routed_rows_bytes = 0;    // n_experts * m u32
};

struct MatmulIdCapability {
  std::uint32_t schema_version = kMatmulIdSchemaVersion;
  DType weight_dtype = DType::F32;
  MatmulIdRoute route = MatmulIdRoute::Direct;
  std::size_t required_weight_bytes = 0;
  std::size_t required_input_bytes = 0;
  std::size_t required_ids_bytes = 0;
  std::size_t required_output_bytes = 0;
  std::optional<MatmulIdScratchRequirement> scratch;  // GroupedPrefill only
};

// Pure and allocation-free: the exact byte contract of a call, or InvalidArgument naming the
// problem (zero dims, distinct top_k > n_experts, stride smaller than a matrix or misaligned,
// overflow anywhere, routed rows beyond u32, GroupedPrefill with MayRepeat or > 1024 experts,
// unsupported dtypes).
MatmulIdCapability matmul_id_capability(DType weight_dtype, const MatmulIdParams& params);

// A route suggestion calibrated on one H200 (docs/performance.md, MoE, run 5): Direct while the
// average routed rows per active expert, m * top_k / min(n_experts, m * top_k), is at most 4
// (each weight row then feeds few rows, and streaming it per row wins: 1.03-2.3x over Grouped
// at the measured points), GroupedPrefill above. MayRepeat ids, or more experts than the grouped
// route takes, always get Direct. Separate from matmul_id_capability, which never guesses.
MatmulIdRoute suggest_matmul_id_route(const MatmulIdParams& params, const ArchInfo& arch);

// Caller-owned scratch of the grouped route on one device (host memory for CPU contexts):
// expert counts [max_experts] and routed-row lists [max_experts][max_tokens], u32. Calls that
// reuse one scratch on one stream are ordered by that stream; to use it from several streams,
// order them yourself (events) or give each stream its own scratch.
class MatmulIdScratch {
 public:
  MatmulIdScratch(const Context& ctx, std::uint32_t max_experts, std::uint32_t max_tokens);
  std::uint32_t max_experts() const { return max_experts_; }
  std::uint32_t max_tokens() const { return max_tokens_; }
  DeviceKind device() const { return device_; }
  int device_index() const { return device_index_; }
  std::uint32_t* counts() const { return counts_; }
  std::uint32_t* rows() const { return rows_; }
  std::size_t counts_bytes() const { return static_cast<std::size_t>(max_experts_) * 4; }
  std::size_t rows_bytes() const { return static_cast<std::size_t>(max_experts_) * max_tokens_ * 4; }

 private:
  std::uint32_t max_experts_, max_tokens_;
  DeviceKind device_;
  int device_index_;
  DeviceBuffer device_mem_;
  std::vector<std::uint32_t> host_mem_;
  std::uint32_t* counts_ = nullptr;
  std::uint32_t* rows_ = nullptr;
};

struct MatmulIdOptions {
  Precision precision = Precision::Exact;  // f32 input on tensor cores: Exact keeps f32 accuracy
};

// weights, input, ids and out are buffers (contiguous views of any shape) of the capability's
// dtypes and at least its byte extents; out must not overlap weights, input or ids. Ids outside
// [0, n_experts) give a zero output row. Enqueues on ctx's stream; never synchronises.
Receipt matmul_id(Context& ctx, const View& weights, const View& input, const View& ids, const View& out,
                  MatmulIdScratch* scratch, const MatmulIdParams& params, const MatmulIdOptions& opts = {});

}  // namespace llmm
