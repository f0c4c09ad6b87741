// Expert-ID matmul (Mixture of Experts): every token's top_k expert rows in one call.
//   out[t, s, :] = W[ids[t, s]] . in(t, s)   for a stack of n_experts row-major [n, k] weights.
// Fail-closed capability with exact byte extents; Direct (one kernel) and GroupedPrefill (map +
// grouped GEMM) routes, each correct for any ids (repeated, out of range), and Auto (the default:
// suggest_matmul_id_route's choice); the grouped route's scratch is the caller's or the context's
// own. No host synchronisation on any. Views are checked by shape and stride, not only by bytes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "llmm/buffer.hpp"
#include "llmm/context.hpp"
#include "llmm/dtype.hpp"
#include "llmm/matmul.hpp"
#include "llmm/view.hpp"

namespace llmm {

inline constexpr std::uint32_t kMatmulIdSchemaVersion = 2;  // 2: ids dtypes, input strides, compact scratch
// The map's sorting blocks have a thread per expert: the grouped route's expert limit.
inline constexpr std::uint32_t kMatmulIdGroupedMaxExperts = 1024;

enum class MatmulIdInputLayout {
  SharedPerToken,  // input [m, k]: one row shared by a token's top_k slots
  Slotted,         // input [m * top_k, k]: a row per (token, slot)
};
// A hint (route suggestion, the capability's top_k check): both routes are correct for any ids.
enum class MatmulIdMultiplicity {
  DistinctPerToken,  // a token's ids are distinct (then top_k <= n_experts is required)
  MayRepeat,
};
enum class MatmulIdRoute {
  Direct,          // one kernel over every routed row (decode)
  GroupedPrefill,  // map kernel (a stable counting sort of the routed rows by expert) + grouped GEMM
  Auto,            // suggest_matmul_id_route's choice for the call on the context's device
};
const char* matmul_id_route_name(MatmulIdRoute r) noexcept;

struct MatmulIdParams {
  std::uint32_t m = 0, n = 0, k = 0, top_k = 0, n_experts = 0;
  std::uint64_t expert_stride_bytes = 0;  // from expert e to e + 1: >= one [n, k] matrix, dtype-aligned
  MatmulIdInputLayout input_layout = MatmulIdInputLayout::SharedPerToken;
  MatmulIdMultiplicity id_multiplicity = MatmulIdMultiplicity::DistinctPerToken;
  MatmulIdRoute route = MatmulIdRoute::Auto;  // Auto, or the caller's explicit choice
  DType input_dtype = DType::F32;   // f32 (the seed's), f16 or bf16
  DType output_dtype = DType::F32;  // f32 or the input's dtype
  DType ids_dtype = DType::U32;     // u32, i32 or i64 ids [m, top_k], contiguous
  // Input strides in elements (innermost stride 1). Unset: dense rows, i.e. token stride k
  // (SharedPerToken) or top_k * k (Slotted) and slot stride k (Slotted). Any value >= 0 is
  // valid (padded rows, a broadcast input); SharedPerToken has no slot stride (unset or 0).
  std::optional<std::uint64_t> input_token_stride, input_slot_stride;
};

struct MatmulIdScratchRequirement {
  std::size_t expert_counts_bytes = 0;  // n_experts u32
  std::size_t routed_rows_bytes = 0;    // m * top_k u32: every routed row, listed by expert
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

// Pure and allocation-free: the exact byte contract of a call (bytes from each buffer's first
// element to one past its last), or InvalidArgument naming the problem (zero dims, distinct
// top_k > n_experts, stride smaller than a matrix or misaligned, overflow anywhere, routed rows
// beyond u32, GroupedPrefill with > 1024 experts, unsupported dtypes). With route Auto it checks
// what every route needs and reports no scratch (Auto takes grouped only where it can run, and a
// call without a scratch uses the context's).
MatmulIdCapability matmul_id_capability(DType weight_dtype, const MatmulIdParams& params);

// The params of a call on these views, read off their shapes and strides (pure):
//   weights [n_experts, n, k], strides [expert stride, k, 1] (any stride on a dimension of 1);
//   input   [m, k] (SharedPerToken), [m * top_k, k] or [m, top_k, k] (Slotted), innermost
//           stride 1, any other strides >= 0; a rank-3 input is Slotted whatever `layout` says;
//   ids     [m, top_k], contiguous, u32 / i32 / i64;   out [m, top_k, n], contiguous.
// Throws InvalidArgument naming the view and the sizes that disagree; every size is
// range-checked to u32. Zero sizes are allowed here (matmul_id handles them).
MatmulIdParams matmul_id_params(const View& weights, const View& input, const View& ids, const View& out,
                                MatmulIdInputLayout layout = MatmulIdInputLayout::SharedPerToken,
                                MatmulIdMultiplicity multiplicity = MatmulIdMultiplicity::DistinctPerToken,
                                MatmulIdRoute route = MatmulIdRoute::Auto);

// A route suggestion calibrated on one H200 (docs/performance.md, MoE): Direct while the average
// routed rows per active expert, m * top_k / min(n_experts, m * top_k), is at most 4 (run 5: each
// weight row then feeds few rows, and streaming it per row won 1.03-2.3x over the mma.sync grouped
// kernel), GroupedPrefill above. On sm_90 with a 16-bit input, where the grouped route runs the
// Hopper engine (which sorts the routed rows itself at m <= 16), GroupedPrefill from m = 4 on,
// whatever the routing (H200, 2026-12-06, bf16, four layer shapes x uniform / hot / Zipf routing:
// grouped / direct time 0.51-1.22x at m 4, geometric mean 0.84x; 0.29-1.10x at m 8; <= 0.99x at
// m 16 and 32; run 9: 1.4-22x faster at m 64); m <= 2 stays Direct. More experts than the
// grouped route takes always get Direct. params.route is ignored. What route Auto runs;
// separate from matmul_id_capability, which never guesses.
MatmulIdRoute suggest_matmul_id_route(const MatmulIdParams& params, const ArchInfo& arch);

// Scratch of the grouped route on one device (host memory for CPU contexts), for callers that
// manage memory themselves; a call given none uses its context's own (a grow-only one per stream,
// with room to stage the routed rows where the Hopper engine would stage them; see matmul_id).
// expert counts [max_experts] and the routed rows listed by expert (a counting sort: expert e's
// rows, in increasing routed-row order, start at the sum of the counts before e), u32. It holds
// max_tokens * max_top_k routed rows; max_top_k 0 means max_experts (enough for any distinct
// routing: top_k <= n_experts).
// staged_row_bytes > 0 adds room to stage every routed input row in expert order (max_tokens *
// max_top_k rows of that many bytes: k * the input's element size, e.g. 2 * 4096 for a bf16
// k = 4096 input). The Hopper engine then copies the routed rows there first and loads each tile
// with one TMA box: measured ~2x faster at m >= 1024 on an H200 than gathering the rows inside
// the GEMM (docs/performance.md, MoE). Calls whose rows do not fit gather instead. Calls that reuse one scratch on one stream are ordered by that
// stream; to use it from several streams, order them yourself (events) or give each stream its
// own scratch. Throws OutOfMemory when the memory cannot be had.
class MatmulIdScratch {
 public:
  MatmulIdScratch(const Context& ctx, std::uint32_t max_experts, std::uint32_t max_tokens, std::uint32_t max_top_k = 0,
                  std::uint64_t staged_row_bytes = 0);
  std::uint32_t max_experts() const { return max_experts_; }
  std::uint32_t max_tokens() const { return max_tokens_; }
  std::uint32_t max_top_k() const { return max_top_k_; }
  std::uint64_t row_capacity() const { return static_cast<std::uint64_t>(max_tokens_) * max_top_k_; }  // routed rows
  DeviceKind device() const { return device_; }
  int device_index() const { return device_index_; }
  std::uint32_t* counts() const { return counts_; }
  std::uint32_t* rows() const { return rows_; }
  std::size_t counts_bytes() const { return static_cast<std::size_t>(max_experts_) * 4; }
  std::size_t rows_bytes() const { return static_cast<std::size_t>(row_capacity()) * 4; }
  // CUDA only (null on CPU): the map's per-chunk expert histograms when the routed rows span
  // several sorting blocks, a fixed 128 KiB after the lists.
  std::uint32_t* map_block_counts() const { return block_counts_; }
  std::size_t map_block_count_words() const { return block_counts_ ? kMapBlockCountWords : 0; }
  // CUDA only (null on CPU): the Hopper engine's tile counter, one word after the histograms.
  std::uint32_t* tile_counter() const { return block_counts_ ? block_counts_ + kMapBlockCountWords : nullptr; }
  void* staged() const { return staged_; }  // null when staged_row_bytes was 0
  std::size_t staged_bytes() const { return staged_bytes_; }
  std::uint64_t staged_row_bytes() const { return staged_row_bytes_; }

 private:
  std::uint32_t max_experts_, max_tokens_, max_top_k_;
  DeviceKind device_;
  int device_index_;
  DeviceBuffer device_mem_;
  std::vector<std::uint32_t> host_mem_;
  std::uint32_t* counts_ = nullptr;
  std::uint32_t* rows_ = nullptr;
  std::uint32_t* block_counts_ = nullptr;
  static constexpr std::size_t kMapBlockCountWords = 32768;
  std::uint64_t staged_row_bytes_ = 0;
  void* staged_ = nullptr;
  std::size_t staged_bytes_ = 0;
};

// The GEMM under the grouped route (tests and benchmarks pick one by name; Auto is the router's).
enum class MatmulIdGroupedKernel {
  Auto,       // TiledSm90Fused at m <= 16 where it takes the call, else TiledSm90, else MmaSync
  MmaSync,    // moe_grouped: mma.sync tiles, every dtype combination, sm_80+
  TiledSm90,  // the Hopper tiled engine after moe_map: 16-bit weights and input of one dtype, k % 8 == 0, sm_90
  TiledSm90Fused,  // the same engine sorting the routed rows itself: one kernel, up to 2048 routed rows (m * top_k)
};
const char* matmul_id_grouped_kernel_name(MatmulIdGroupedKernel k) noexcept;

struct MatmulIdOptions {
  Precision precision = Precision::Exact;  // f32 input on tensor cores: Exact keeps f32 accuracy
  // The grouped route's GEMM (ignored on the direct route); a forced kernel that cannot take the
  // call is refused, on a CPU context every forced one.
  MatmulIdGroupedKernel grouped_kernel = MatmulIdGroupedKernel::Auto;
};

// What a matmul_id call launches, and why: the route that runs (Direct when k or n_experts is 0:
// zero rows), its kernels in launch order as check_launchable and note_launch name them (the
// receipt's kernel string joins them with "+" on CUDA; empty when no output element exists),
// and for GroupedPrefill whether the Hopper engine runs it and whether the routed rows are
// staged in expert order first.
struct MatmulIdPlan {
  MatmulIdRoute route = MatmulIdRoute::Direct;
  std::vector<std::string> kernels;
  bool engine = false;  // GroupedPrefill on the Hopper tiled engine (else mma.sync or the CPU reference)
  bool staged = false;  // the engine reads routed rows staged in expert order (the scratch has room)
  bool fused = false;   // the engine sorts the routed rows itself: one kernel, the scratch unused
  bool pooled = false;  // GroupedPrefill without a caller's scratch: the context's own serves it
  std::string reason;   // GroupedPrefill on CUDA: why this GEMM
};

// The plan of matmul_id(ctx, weights, input, ids, out, scratch, params, opts) without running it:
// the same checks (the same errors, thrown here instead), the same pure planning functions the
// call uses; no allocation on the device, nothing enqueued. E.g. to see that a scratch without
// staged_row_bytes makes the engine gather its rows, or that a forced kernel is refused.
MatmulIdPlan plan_matmul_id(const Context& ctx, const View& weights, const View& input, const View& ids, const View& out,
                            const MatmulIdScratch* scratch, const MatmulIdParams& params, const MatmulIdOptions& opts = {});

// weights, input, ids and out must be exactly the views matmul_id_params describes, and
// describe `params` (every size, stride and dtype equal; a mismatch names the field): shapes,
// not just byte counts. out must not overlap weights, input, ids or the scratch. Ids outside
// [0, n_experts) give a zero output row (as do all rows when k or n_experts is 0); m, top_k or
// n of 0 is an empty call. Enqueues on ctx's stream; never synchronises.
// scratch may be null: a grouped call then uses the context's grow-only scratch for its current
// stream (counts, row lists and, where the Hopper engine stages rows, m * top_k * k input
// elements), allocated or grown before anything is enqueued (so the first call of a shape,
// like cuBLASLt's first, belongs outside CUDA-graph capture; OutOfMemory when it cannot be had).
// Growing frees the old one through cudaFree, which waits for the device.
Receipt matmul_id(Context& ctx, const View& weights, const View& input, const View& ids, const View& out,
                  MatmulIdScratch* scratch, const MatmulIdParams& params, const MatmulIdOptions& opts = {});
// The same with the params read off the views (matmul_id_params).
Receipt matmul_id(Context& ctx, const View& weights, const View& input, const View& ids, const View& out,
                  MatmulIdScratch* scratch, MatmulIdInputLayout layout, MatmulIdMultiplicity multiplicity,
                  MatmulIdRoute route, const MatmulIdOptions& opts = {});

// FP8 e4m3 experts (DeepSeek-V3 / Qwen3 FP8 checkpoints): codes [n_experts, n, k] F8E4M3 with
// matmul_id's weight strides, and f32 scales [n_experts, sr, sc], contiguous, (sr, sc) =
// fp8_scale_shape(kind, n, k): per tensor, output channel or [128, 128] block of each expert.
struct Fp8Experts {
  View codes;
  Fp8ScaleKind kind = Fp8ScaleKind::Block128;
  View scales;
};

// matmul_id on FP8 experts: W(e, j, l) = e4m3(code) * scale, any float input, f32 accumulation,
// the same contract otherwise (ids, layouts, output, scratch, no host sync). Routes: Direct (the
// streaming kernel decodes the codes: exact products) and GroupedPrefill (on sm_90 with a bf16
// input and staging room, the Hopper engine: the codes converted to bf16 in shared memory, each
// weight scaled and rounded once, x unchanged; else moe_grouped: the weights decoded and scaled
// into bf16 tiles, the input rounded to bf16). Auto: Direct while a weight row feeds at most 4
// routed rows on average (m * top_k / min(n_experts, m * top_k) <= 4), else GroupedPrefill.
// Scale values are read by the kernels (checked on the CPU backend only). The views-only form of
// matmul_id.
Receipt matmul_id(Context& ctx, const Fp8Experts& weights, const View& input, const View& ids, const View& out,
                  MatmulIdScratch* scratch, MatmulIdInputLayout layout = MatmulIdInputLayout::SharedPerToken,
                  MatmulIdMultiplicity multiplicity = MatmulIdMultiplicity::DistinctPerToken,
                  MatmulIdRoute route = MatmulIdRoute::Auto, const MatmulIdOptions& opts = {});

}  // namespace llmm
