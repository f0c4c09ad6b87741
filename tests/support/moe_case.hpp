// One matmul_id case end to end: weights [E, n, k] with padding between experts, an input in
// either layout (padded rows, or [m, top_k, k]), ids of any id dtype from a routing pattern
// (uniform, skewed, Zipf, repeats, out-of-range mixed in), a poisoned output, the call on ctx
// (uploading for CUDA), and the float64 comparison.
#include <cstdint>
#include <string>
#include <vector>

#include "llmm/moe.hpp"
#include "support/compare.hpp"
#include "support/tensor.hpp"

#pragma once

namespace llmm::test {

// Counts: expert e gets expert_counts[e] routed rows (their sum is m * top_k), spread over the
// rows in a random order (repeats within a token allowed: set MayRepeat).
enum class Routing { Uniform, Skewed, Zipf, Repeats, Counts };

struct MoeCase {
  MatmulIdParams p;             // sizes, layout, route, input/output dtypes (strides: from the pads)
  DType w_dtype = DType::F32;
  std::int64_t expert_pad = 0;  // extra elements between experts
  std::int64_t input_pad = 0;   // extra elements after each input row
  bool input_rank3 = false;     // Slotted input as [m, top_k, k] (then 3 more elements after each token)
  bool slot_major = false;      // Slotted input stored slot by slot: slot stride m rows, token stride one row
  DType ids_dtype = DType::U32;
  Routing routing = Routing::Uniform;
  std::vector<std::uint32_t> expert_counts;  // Routing::Counts
  int out_of_range_every = 0;   // every Nth routed row gets an id outside [0, n_experts) (0: none)
  Precision precision = Precision::Exact;
  bool shape_form = false;      // call matmul_id with the params read off the views
  int nonfinite_every = 0;      // > 0: Inf/NaN in some input and weight rows; IEEE classes checked
  MatmulIdGroupedKernel grouped_kernel = MatmulIdGroupedKernel::Auto;
  std::uint64_t seed = 1;
  std::string describe() const;
};

struct MoeOutcome {
  Receipt receipt;
  CompareResult cmp;
  std::vector<unsigned char> out_bytes;
  std::int64_t zero_rows_checked = 0;  // out-of-range rows verified to be exactly zero
};

// The case's buffers on the host: views of the case's shapes and strides (inputs random, out
// poisoned) and the params that describe them.
struct MoeBuffers {
  MatmulIdParams p;
  HostTensor w, in, ids, out;
};
MoeBuffers make_moe_buffers(const MoeCase& c);

// Ids as values (any integer: the case's dtype stores them, out-of-range ones included).
std::vector<std::int64_t> make_ids(const MoeCase& c);
// An id value as the case's dtype stores and reads it (a u32 or i32 id wraps).
std::int64_t as_stored(DType t, std::int64_t v);
// Writes make_ids(c) into an ids tensor of c.ids_dtype.
void store_ids(const MoeCase& c, const std::vector<std::int64_t>& ids, HostTensor& t);
MoeOutcome run_moe_case(Context& ctx, const MoeCase& c, MatmulIdScratch* scratch);

// Kernels of the grouped route's map on CUDA (a scratch always has the map's block histograms
// there, and n_experts <= 1024 leaves room for 32 chunks): 2 (moe_map_count, moe_map_sort) past
// one sorting block's 1024 routed rows, else 1.
int map_kernels(std::uint64_t routed_rows);

}  // namespace llmm::test
