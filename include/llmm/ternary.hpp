// Ternary (1.58-bit) weights: the TQ2_0_g128 format, a device weight cache, a grow-only buffer
// pool, and gemm_tq2: out[m, n] = sum_k in[m, k] * W[n, k], from decode (M = 1) to DiT prefill.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "llmm/buffer.hpp"
#include "llmm/context.hpp"
#include "llmm/matmul.hpp"
#include "llmm/view.hpp"

namespace llmm {

// One block of 128 weights: 32 bytes of 2-bit codes (4 a byte, LSB first; code 0/1/2 means
// -1/0/+1, code 3 is invalid) and an f16 scale: 34 bytes, 2.125 bits a weight. A weight [N, K]
// is N rows of K/128 blocks, row-major (the seed's AoS stream).
#pragma pack(push, 1)
struct BlockTQ2_128 {
  std::uint8_t qs[32];
  std::uint16_t d;  // f16 bits
};
#pragma pack(pop)
static_assert(sizeof(BlockTQ2_128) == 34);
inline constexpr std::int64_t kTq2BlockWeights = 128;
inline constexpr std::size_t kTq2BlockBytes = 34;

// Bytes of an [n, k] weight in AoS form (checked; throws on overflow or k % 128 != 0).
std::size_t tq2_aos_bytes(std::int64_t n, std::int64_t k);

// W[n, k] as f32 (row-major). Throws InvalidArgument for a bad size, for code 3, naming the
// row, block and byte ("tq2_dequantize: invalid code 3 in row 2, block 1, byte 5"), or for a
// non-finite (Inf or NaN) f16 scale, naming the row and block. TernaryWeightCache refuses the same.
std::vector<float> tq2_dequantize(const void* aos, std::size_t bytes, std::int64_t n, std::int64_t k);

// How tq2_quantize picks a block's scale.
enum class Tq2ScaleRule {
  AbsMean,  // BitNet b1.58: scale = mean |w| of the block; codes = clamp(round(w / scale), -1, 1)
  AbsMax,   // scale = max |w|: round-trips exactly a weight that is already ternary x scale
};
// Quantizes f32 W[n, k] (k % 128 == 0). The scale is rounded to f16 first, and the codes are
// computed against that rounded scale. An all-zero block gets scale 0 and code 1 (zero).
// Refuses (InvalidArgument naming the row and block) a non-finite weight and a block whose
// scale rounds above the f16 range: it never stores an Inf or NaN scale.
std::vector<BlockTQ2_128> tq2_quantize(const float* w, std::int64_t n, std::int64_t k,
                                       Tq2ScaleRule rule = Tq2ScaleRule::AbsMean);

// ---------------------------------------------------------------------------------------------
// A weight in the kernels' layout (SoA): codes [n][k/4] bytes (a row's codes contiguous, 32
// bytes per 128-block, 16-byte aligned), scales [n][k/128] f16 bits. On a CUDA context the two
// arrays live in device memory; on a CPU context in host memory (the reference backend).
class TernaryWeight {
 public:
  std::uint64_t key() const { return key_; }
  // Process-unique number of this upload: a key evicted and uploaded again names a new weight.
  std::uint64_t upload_id() const { return upload_id_; }
  std::int64_t n() const { return n_; }  // rows of one expert (of the weight, when experts() == 1)
  std::int64_t k() const { return k_; }
  // A stack of experts (TernaryWeightCache::get_or_upload_experts) holds experts() weights of
  // [n, k] one after another: expert e is rows e * n .. e * n + n - 1 of codes() and scales().
  std::int64_t experts() const { return experts_; }
  std::int64_t rows() const { return experts_ * n_; }
  DeviceKind device() const { return device_; }
  int device_index() const { return device_index_; }
  const std::uint8_t* codes() const { return codes_; }
  const std::uint16_t* scales() const { return scales_; }
  std::size_t bytes() const { return codes_bytes_ + scales_bytes_; }  // packed: 2.125 bits a weight
  // The scales again, transposed: [k/128][scales_t_ld()] f16 bits, ld = experts() * n8 with n8 =
  // n rounded up to 8; the scale of block b of expert e's row j is at b * ld + e * n8 + j, the
  // padding columns zero. The Hopper tiled engine copies one k-block's scales of 128 rows from
  // here in one contiguous, 16-byte aligned piece. Costs 1/16 of the packed bytes more.
  const std::uint16_t* scales_t() const { return scales_t_; }
  std::int64_t scales_t_ld() const { return scales_t_ld_; }
  // Bytes the upload holds: codes, scales, the transposed scales and alignment padding.
  std::size_t held_bytes() const { return held_bytes_; }

 private:
  friend class TernaryWeightCache;
  std::uint64_t key_ = 0, upload_id_ = 0;
  std::int64_t n_ = 0, k_ = 0, experts_ = 1;
  DeviceKind device_ = DeviceKind::CPU;
  int device_index_ = 0;
  const std::uint8_t* codes_ = nullptr;
  const std::uint16_t* scales_ = nullptr;
  const std::uint16_t* scales_t_ = nullptr;
  std::int64_t scales_t_ld_ = 0;
  std::size_t codes_bytes_ = 0, scales_bytes_ = 0, held_bytes_ = 0;
  DeviceBuffer device_mem_;                 // CUDA: codes, scales, transposed scales
  std::vector<unsigned char> host_mem_;     // CPU
};
using WeightHandle = std::shared_ptr<const TernaryWeight>;

// Keyed cache of uploaded ternary weights for one device (the context's). Converts AoS to SoA
// and uploads once per key; the returned handle keeps the memory alive even after evict().
// Thread-safe: one mutex; concurrent calls with one key upload once.
class TernaryWeightCache {
 public:
  explicit TernaryWeightCache(const Context& ctx);
  // Throws InvalidArgument for k % 128 != 0, n or k < 1, bytes != n * (k/128) * 34, code 3 or a
  // non-finite scale (naming the block), or a key already cached with another n, k or byte count.
  WeightHandle get_or_upload(std::uint64_t key, const void* aos, std::size_t bytes, std::int64_t n, std::int64_t k);
  // A stack of n_experts ternary experts of [n, k] each (matmul_id_tq2's weights): `aos` holds
  // them one after another, n_experts * n rows of k/128 blocks (bytes = n_experts * n * k/128 *
  // 34). The same refusals, and n_experts >= 1; a key cached with another shape is refused.
  WeightHandle get_or_upload_experts(std::uint64_t key, const void* aos, std::size_t bytes, std::int64_t n_experts,
                                     std::int64_t n, std::int64_t k);
  bool evict(std::uint64_t key);  // true if the key was cached
  // Evicts w's key only while it still holds w itself (not a later upload under the same key):
  // a stale handle never releases another weight. True if it evicted.
  bool evict(const WeightHandle& w);
  std::size_t bytes_held() const;
  std::size_t size() const;
  std::uint64_t upload_count() const;  // conversions + uploads done so far

 private:
  WeightHandle upload(std::uint64_t key, const void* aos, std::size_t bytes, std::int64_t experts, std::int64_t n,
                      std::int64_t k);
  DeviceKind device_;
  int device_index_;
  mutable std::mutex mu_;
  std::unordered_map<std::uint64_t, WeightHandle> map_;
  std::uint64_t uploads_ = 0;
};

// Grow-only scratch for the host-I/O gemm_tq2: named slots that only ever grow. The allocation
// counter is process-wide, so "a warmed pool allocates nothing" is a plain counter delta.
class BufferPool {
 public:
  BufferPool(DeviceKind device, int device_index);
  void* get(const std::string& slot, std::size_t bytes);  // grows the slot when too small
  std::size_t capacity(const std::string& slot) const;
  static std::uint64_t alloc_count();  // allocations by every pool of the process

 private:
  struct Slot {
    DeviceBuffer device;
    std::vector<unsigned char> host;
    std::size_t capacity = 0;
  };
  DeviceKind device_;
  int device_index_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Slot> slots_;
};

enum class Tq2Route {
  Auto,
  Cpu,     // float64 reference (CPU contexts)
  StreamV2,   // decode v2: f16 tensor cores, activation split once into shared memory (m <= 16)
  StreamV4,   // decode v4: int8 digits on the sm_90 streaming engine (copy-engine ring; m <= 8, sm_90)
  StreamV5,   // decode v5: v4's decoder with warp-owned row bands and K parts (m <= 16, sm_90)
  Tiled,      // prefill: tensor cores on decoded tiles
  DequantLt,  // prefill: weight dequantized to f16 chunk by chunk, cuBLASLt GEMMs (any m)
  TiledSm90,  // prefill: the Hopper tiled engine, codes decoded into register fragments (sm_90; f16,
              // bf16, or f32 Fast input: bf16/f32 go through a scaled f16 copy in the workspace);
              // Auto takes it for 16-bit input, m > 16, where its tiles fill the SMs
  TiledSm90SplitK,  // TiledSm90 with each tile's K cut into parts (a function of n and k only, so
                    // batch-invariant), summed in a fixed order: for weights with few 128-row
                    // tiles (small n); Auto takes it (before TiledSm90) at m <= 128 where the
                    // parts' units fill the SMs. Workspace for the parts' f32 sums.
};
const char* tq2_route_name(Tq2Route r) noexcept;

// Where StreamV4 and StreamV5 get their activation image (the int8-digit records every block
// keeps in shared memory): Staged, a first kernel writes it once for all blocks and each block
// loads it with one bulk copy; InBlock, each block's consumer warps convert it from the input
// themselves while the first weight stages are in flight (one launch, no workspace; m <= 4, and
// on StreamV5 K whole). Auto: Staged (in-block measured 1.08-1.59x slower on the H200). Other
// routes ignore it. For tests, calibration, and callers who want no workspace at m <= 4.
enum class Tq2StreamImage { Auto, Staged, InBlock };

struct Tq2Options {
  Precision precision = Precision::Exact;  // f32 input: Exact keeps f32 accuracy
  Tq2Route force_route = Tq2Route::Auto;
  // Device workspace of DequantLt, of TiledSm90 (bf16/f32 input), of TiledSm90SplitK, of StreamV2 at m >= 3 and of StreamV4 (tq2_workspace_bytes; 256-byte
  // aligned, on the context's device, not used by any other work in flight). nullptr: the context's grow-only buffer, allocated by
  // the first call that needs more: a CUDA-graph capture must follow a warm-up call at the
  // largest shape (which also creates the context's cuBLASLt handle and workspace).
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  // DequantLt: weight rows dequantized per chunk, rounded up to 128 (0: automatic). For tests
  // and calibration (tq2_workspace_bytes counts it).
  std::int64_t dequant_chunk_rows = 0;
  // StreamV4/V5's activation image (above). A forced InBlock they cannot take is refused.
  Tq2StreamImage stream_image = Tq2StreamImage::Auto;
  // Ternary-Bonsai-2's Hadamard fold: the product takes H (s * x) for x, H the normalized
  // Sylvester-Walsh-Hadamard matrix of rotation_block x rotation_block (a power of two dividing k)
  // repeated along k, s = rotation_signs (k floats, +-1 for the fold, on the context's device).
  // 0: no rotation. The CPU reference rotates in float64 and rounds to f32 once. CUDA contexts
  // refuse a rotation for now (rotate x first: llmm.HadamardRotation); the sm_90 streaming routes'
  // stage kernel will apply it once its GPU tests have run.
  const float* rotation_signs = nullptr;
  int rotation_block = 0;
};

// Device workspace bytes gemm_tq2 needs for these sizes and options: DequantLt's, StreamV2's
// staged activation (m >= 3), StreamV4's (m <= 8), 0 for routes that need none. force_route Auto
// gives the largest of the three (a bound for whichever route Auto takes).
// Pure; throws InvalidArgument for sizes gemm_tq2 would refuse.
std::size_t tq2_workspace_bytes(std::int64_t m, std::int64_t n, std::int64_t k, DType in_dtype, DType out_dtype,
                                const Tq2Options& opts = {});

// Pure router: CPU -> Cpu; before sm_80 refused (no kernel is built for it); m <= 8 -> StreamV5 on sm_90 for n > 211 x 128
// (K whole in every item) where its activation image fits; m <= 4 (m <= 8 for n <= 4096) ->
// StreamV4 on sm_90 where the whole K's activation fits in shared memory (k <= ~40k at m = 1,
// ~13k at m = 4); m = 9..16 at k >= 12288 -> StreamV5 on sm_90 (its wide kernels); m <= 16 ->
// StreamV2;
// m * n * k >= 2^27 -> DequantLt; else Tiled (see gemm_tq2.cpp for why; calibrated against the
// GPU in docs/performance.md).
Tq2Route plan_tq2(std::int64_t m, std::int64_t n, std::int64_t k, DType in_dtype, const ArchInfo& arch,
                  Tq2Route force = Tq2Route::Auto);

// The same route with why it was chosen (for logs and receipts: LLMM_LOG prints the reason of
// every call). gemm_tq2 itself may still send an f16 input the Hopper engine's TMA cannot read
// (base not 16-byte aligned, row stride not a multiple of 8) to DequantLt; its log says so.
struct Tq2Plan {
  Tq2Route route = Tq2Route::Auto;
  std::string reason;
};
Tq2Plan plan_gemm_tq2(std::int64_t m, std::int64_t n, std::int64_t k, DType in_dtype, const ArchInfo& arch,
                      Tq2Route force = Tq2Route::Auto);

// Device tensors: in [m, k] (f32, f16, bf16; innermost stride 1), out [m, n] (f32 or in's dtype).
// No synchronisation; refuses (before enqueueing anything) a null or foreign handle, k or n
// that differ from the handle's, bad dtypes, strides or overlap.
Receipt gemm_tq2(Context& ctx, const WeightHandle& w, const View& in, const View& out, const Tq2Options& opts = {});

// The seed's encode_gemm_tq2: host f32 in [m, k] and out [m, n] (row-major), through the
// context's grow-only pool (use_pool = false allocates fresh buffers per call, for the A/B
// benchmark); waits for the result.
Receipt gemm_tq2(Context& ctx, const WeightHandle& w, const float* host_in, float* host_out, std::int64_t m,
                 std::int64_t n, std::int64_t k, const Tq2Options& opts = {}, bool use_pool = true);

}  // namespace llmm
