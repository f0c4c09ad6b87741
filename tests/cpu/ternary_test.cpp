// Ternary on the CPU: the format by hand, quantize rules, the weight cache (semantics, refusals,
// threads), the buffer pool, gemm_tq2 through the CPU backend on the seed's cases, refusals.
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <thread>
#include <tuple>

#include <gtest/gtest.h>

#include "core/ternary/tq2_kernels.hpp"
#include "llmm/error.hpp"
#include "llmm/ternary.hpp"
#include "support/expect_error.hpp"
#include "support/random.hpp"
#include "support/tq2_case.hpp"

using namespace llmm;
using namespace llmm::test;

namespace {
std::vector<BlockTQ2_128> zero_blocks(std::int64_t n, std::int64_t k) {
  BlockTQ2_128 z{};
  std::memset(z.qs, 0x55, 32);  // every code 1: zero
  z.d = f32_to_f16_bits(1.0f);
  return std::vector<BlockTQ2_128>(static_cast<std::size_t>(n * (k / 128)), z);
}
std::size_t bytes_of(const std::vector<BlockTQ2_128>& b) { return b.size() * sizeof(BlockTQ2_128); }
}  // namespace

TEST(Tq2Format, SizesAndHandDecodedBlock) {
  EXPECT_EQ(sizeof(BlockTQ2_128), 34u);
  EXPECT_EQ(tq2_aos_bytes(2, 256), 2u * 2 * 34);
  expect_error([] { tq2_aos_bytes(2, 100); }, ErrorCode::InvalidArgument, "k 100 is not a multiple of 128");
  expect_error([] { tq2_aos_bytes(0, 128); }, ErrorCode::InvalidArgument, "must be >= 1");
  std::vector<BlockTQ2_128> b = zero_blocks(1, 128);
  b[0].qs[0] = 0b10'01'00'10;  // LSB first: codes 2, 0, 1, 2 -> +1, -1, 0, +1
  b[0].qs[31] = 0b00'10'01'01;  // codes 1, 1, 2, 0 -> 0, 0, +1, -1
  b[0].d = f32_to_f16_bits(0.5f);
  std::vector<float> w = tq2_dequantize(b.data(), bytes_of(b), 1, 128);
  EXPECT_EQ(w[0], 0.5f);
  EXPECT_EQ(w[1], -0.5f);
  EXPECT_EQ(w[2], 0.0f);
  EXPECT_EQ(w[3], 0.5f);
  for (int i = 4; i < 124; ++i) EXPECT_EQ(w[static_cast<std::size_t>(i)], 0.0f) << i;
  EXPECT_EQ(w[126], 0.5f);
  EXPECT_EQ(w[127], -0.5f);
}

TEST(Tq2Format, DequantizeRefusals) {
  std::vector<BlockTQ2_128> b = zero_blocks(2, 128);
  b[1].qs[7] = 0b01'11'01'01;  // code 3 in row 1, block 0, byte 7
  expect_error([&] { tq2_dequantize(b.data(), bytes_of(b), 2, 128); }, ErrorCode::InvalidArgument,
               "tq2_dequantize: invalid code 3 in row 1, block 0, byte 7");
  expect_error([&] { tq2_dequantize(b.data(), bytes_of(b) - 1, 2, 128); }, ErrorCode::InvalidArgument,
               "67 bytes given, an [2, 128] weight is 68");
  // A non-finite scale is no weight: refused by every reader of the bytes, naming the block.
  b[1].qs[7] = 0b01'01'01'01;
  for (std::uint16_t bits : {0x7c00, 0xfc00, 0x7e00}) {  // +Inf, -Inf, NaN
    b[1].d = bits;
    expect_error([&] { tq2_dequantize(b.data(), bytes_of(b), 2, 128); }, ErrorCode::InvalidArgument,
                 "tq2_dequantize: non-finite scale (f16 bits 0x");
    TernaryWeightCache cache(Context::cpu());
    expect_error([&] { cache.get_or_upload(3, b.data(), bytes_of(b), 2, 128); }, ErrorCode::InvalidArgument,
                 ") in row 1, block 0");
    EXPECT_EQ(cache.size(), 0u);
  }
}

TEST(Tq2Quantize, AbsMaxRoundTripsTernaryWeights) {
  Rng rng(5);
  const std::int64_t n = 3, k = 256;
  std::vector<float> w(static_cast<std::size_t>(n * k));
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t b = 0; b < 2; ++b) {
      float s = f16_bits_to_f32(f32_to_f16_bits(static_cast<float>(0.01 + rng.uniform())));
      for (int i = 0; i < 128; ++i)
        w[static_cast<std::size_t>(r * k + b * 128 + i)] = static_cast<float>(i == 0 ? 1 : rng.uniform_int(-1, 1)) * s;
    }
  std::vector<BlockTQ2_128> q = tq2_quantize(w.data(), n, k, Tq2ScaleRule::AbsMax);
  EXPECT_EQ(tq2_dequantize(q.data(), bytes_of(q), n, k), w);
  std::vector<BlockTQ2_128> q2 = tq2_quantize(tq2_dequantize(q.data(), bytes_of(q), n, k).data(), n, k, Tq2ScaleRule::AbsMax);
  EXPECT_EQ(std::memcmp(q.data(), q2.data(), bytes_of(q)), 0);
}

TEST(Tq2Quantize, AbsMeanRuleByHand) {
  std::vector<float> w(128);
  for (int i = 0; i < 64; ++i) w[static_cast<std::size_t>(i)] = 1.0f;
  for (int i = 64; i < 128; ++i) w[static_cast<std::size_t>(i)] = -0.1f;
  // mean |w| = (64 + 6.4) / 128 = 0.55: 1 / 0.55 rounds (clamped) to +1, -0.1 / 0.55 to 0.
  std::vector<BlockTQ2_128> q = tq2_quantize(w.data(), 1, 128);
  EXPECT_EQ(q[0].d, f32_to_f16_bits(0.55f));
  for (int i = 0; i < 16; ++i) EXPECT_EQ(q[0].qs[i], 0b10'10'10'10) << i;
  for (int i = 16; i < 32; ++i) EXPECT_EQ(q[0].qs[i], 0b01'01'01'01) << i;
  std::vector<float> zeros(128, 0.0f);
  q = tq2_quantize(zeros.data(), 1, 128);
  EXPECT_EQ(q[0].d, 0);
  for (auto byte : q[0].qs) EXPECT_EQ(byte, 0x55);
  zeros[3] = NAN;
  expect_error([&] { tq2_quantize(zeros.data(), 1, 128); }, ErrorCode::InvalidArgument, "non-finite weight at row 0, column 3");
}

// Weights of 7e4 or 1e5 made an Inf f16 scale (decoding gave NaN): refused now, naming the block.
TEST(Tq2Quantize, ScaleAboveTheF16RangeIsRefused) {
  std::vector<float> w(2 * 256, 0.5f);
  for (int i = 0; i < 128; ++i) w[256 + 128 + static_cast<std::size_t>(i)] = 7e4f;  // row 1, block 1
  expect_error([&] { tq2_quantize(w.data(), 2, 256, Tq2ScaleRule::AbsMean); }, ErrorCode::InvalidArgument,
               "tq2_quantize: row 1, block 1 (columns 128..255): its scale 70000 (mean |w|) exceeds the f16 range");
  w[256 + 128] = 1e5f;
  for (int i = 1; i < 128; ++i) w[256 + 128 + static_cast<std::size_t>(i)] = 1.0f;
  expect_error([&] { tq2_quantize(w.data(), 2, 256, Tq2ScaleRule::AbsMax); }, ErrorCode::InvalidArgument,
               "its scale 100000 (max |w|) exceeds the f16 range");
  // At the top of the range the scale is finite and decodes finite.
  for (int i = 0; i < 128; ++i) w[256 + 128 + static_cast<std::size_t>(i)] = 65504.0f;
  for (Tq2ScaleRule rule : {Tq2ScaleRule::AbsMean, Tq2ScaleRule::AbsMax}) {
    std::vector<BlockTQ2_128> q = tq2_quantize(w.data(), 2, 256, rule);
    for (float x : tq2_dequantize(q.data(), bytes_of(q), 2, 256)) ASSERT_TRUE(std::isfinite(x));
  }
}

TEST(Tq2Quantize, AbsMaxErrorIsHalfAScaleStep) {
  Rng rng(9);
  std::vector<float> w(4 * 384);
  for (auto& x : w) x = static_cast<float>(rng.uniform() * 2 - 1);
  std::vector<BlockTQ2_128> q = tq2_quantize(w.data(), 4, 384, Tq2ScaleRule::AbsMax);
  std::vector<float> back = tq2_dequantize(q.data(), bytes_of(q), 4, 384);
  for (std::size_t i = 0; i < w.size(); ++i) {
    float d = f16_bits_to_f32(q[i / 128].d);
    EXPECT_LE(std::fabs(back[i] - w[i]), 0.5f * d * (1 + 1e-3f) + 1e-6f) << i;
  }
}

TEST(Tq2Cache, UploadOnceSameHandleAndRefusals) {
  Context ctx = Context::cpu();
  TernaryWeightCache cache(ctx);
  std::vector<BlockTQ2_128> b = seed_tq2_blocks(40, 256, 1);
  WeightHandle h1 = cache.get_or_upload(7, b.data(), bytes_of(b), 40, 256);
  WeightHandle h2 = cache.get_or_upload(7, b.data(), bytes_of(b), 40, 256);
  EXPECT_EQ(h1.get(), h2.get());
  EXPECT_EQ(cache.upload_count(), 1u);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.bytes_held(), 40u * 256 / 4 + 40u * 2 * 2);
  EXPECT_EQ(h1->n(), 40);
  EXPECT_EQ(h1->k(), 256);
  EXPECT_EQ(h1->bytes(), 40u * 64 + 160);
  // The SoA codes of row 3, block 1 are the AoS block's bytes; its scale sits apart.
  EXPECT_EQ(std::memcmp(h1->codes() + 3 * 64 + 32, b[3 * 2 + 1].qs, 32), 0);
  EXPECT_EQ(h1->scales()[3 * 2 + 1], b[3 * 2 + 1].d);
  // The transposed copy: [k/128][ld] with ld = 40 rounded up to 8, padding zero.
  EXPECT_EQ(h1->scales_t_ld(), 40);
  for (int r = 0; r < 40; ++r)
    for (int blk = 0; blk < 2; ++blk) EXPECT_EQ(h1->scales_t()[blk * 40 + r], b[r * 2 + blk].d) << r << " " << blk;
  EXPECT_GE(h1->held_bytes(), h1->bytes() + 2u * 40 * 2);
  expect_error([&] { cache.get_or_upload(7, b.data(), bytes_of(b), 80, 128); }, ErrorCode::InvalidArgument,
               "key 7 holds an [40, 256] weight, asked for [80, 128]");
  expect_error([&] { cache.get_or_upload(8, b.data(), bytes_of(b), 40, 200); }, ErrorCode::InvalidArgument,
               "k 200 is not a multiple of 128");
  expect_error([&] { cache.get_or_upload(8, b.data(), bytes_of(b) - 34, 40, 256); }, ErrorCode::InvalidArgument,
               "key 8: 2686 bytes given, an [40, 256] TQ2_0_g128 weight is 2720");
  std::vector<BlockTQ2_128> bad = b;
  bad[5].qs[2] |= 0b11'00'00'00;
  expect_error([&] { cache.get_or_upload(9, bad.data(), bytes_of(bad), 40, 256); }, ErrorCode::InvalidArgument,
               "key 9: invalid code 3 in row 2, block 1, byte 2");
  EXPECT_EQ(cache.upload_count(), 1u);
  EXPECT_TRUE(cache.evict(7));
  EXPECT_FALSE(cache.evict(7));
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.bytes_held(), 0u);
  EXPECT_EQ(h1->k(), 256);  // the handle keeps the weight alive after eviction
  EXPECT_EQ(std::memcmp(h1->codes() + 3 * 64 + 32, b[3 * 2 + 1].qs, 32), 0);
}

// A row count that is not a multiple of 8: the transposed scales' rows are padded with zeros
// (the engine's TMA reads 128 rows' scales at once and relies on it for rows past n).
TEST(Tq2Cache, TransposedScalesPadRowsWithZeros) {
  Context ctx = Context::cpu();
  TernaryWeightCache cache(ctx);
  std::vector<BlockTQ2_128> b = seed_tq2_blocks(13, 384, 5);
  WeightHandle h = cache.get_or_upload(1, b.data(), bytes_of(b), 13, 384);
  ASSERT_EQ(h->scales_t_ld(), 16);
  for (int blk = 0; blk < 3; ++blk) {
    for (int r = 0; r < 13; ++r) EXPECT_EQ(h->scales_t()[blk * 16 + r], b[r * 3 + blk].d) << r << " " << blk;
    for (int r = 13; r < 16; ++r) EXPECT_EQ(h->scales_t()[blk * 16 + r], 0) << r << " " << blk;
  }
}

// A handle only ever releases its own upload: after the key was evicted and reused, the old
// handle leaves the new weight cached (the stale-handle bug of release_tq2).
TEST(Tq2Cache, StaleHandleNeverEvictsALaterUploadOfItsKey) {
  Context ctx = Context::cpu();
  TernaryWeightCache cache(ctx);
  std::vector<BlockTQ2_128> b = seed_tq2_blocks(40, 256, 1), c = seed_tq2_blocks(8, 128, 2);
  WeightHandle old = cache.get_or_upload(7, b.data(), bytes_of(b), 40, 256);
  EXPECT_TRUE(cache.evict(old));
  WeightHandle fresh = cache.get_or_upload(7, c.data(), bytes_of(c), 8, 128);
  EXPECT_NE(old->upload_id(), fresh->upload_id());
  EXPECT_FALSE(cache.evict(old));  // stale: the key now names another upload
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.get_or_upload(7, c.data(), bytes_of(c), 8, 128).get(), fresh.get());
  EXPECT_TRUE(cache.evict(fresh));
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_FALSE(cache.evict(WeightHandle{}));
}

TEST(Tq2Cache, EightThreadsRaceOnSameAndDifferentKeys) {
  Context ctx = Context::cpu();
  TernaryWeightCache cache(ctx);
  std::vector<BlockTQ2_128> b = seed_tq2_blocks(64, 384, 2);
  std::vector<std::thread> threads;
  std::vector<const TernaryWeight*> shared(8), own(8);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 20; ++rep) {
        shared[static_cast<std::size_t>(t)] = cache.get_or_upload(100, b.data(), bytes_of(b), 64, 384).get();
        own[static_cast<std::size_t>(t)] = cache.get_or_upload(200 + static_cast<std::uint64_t>(t), b.data(), bytes_of(b), 64, 384).get();
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(cache.upload_count(), 9u);  // key 100 once, keys 200..207 once each
  EXPECT_EQ(cache.size(), 9u);
  for (int t = 1; t < 8; ++t) EXPECT_EQ(shared[static_cast<std::size_t>(t)], shared[0]);
  EXPECT_EQ(std::set<const TernaryWeight*>(own.begin(), own.end()).size(), 8u);
}

TEST(Tq2Pool, GrowOnlyAndCounted) {
  BufferPool pool(DeviceKind::CPU, 0);
  std::uint64_t before = BufferPool::alloc_count();
  void* a = pool.get("in", 1000);
  EXPECT_NE(a, nullptr);
  EXPECT_EQ(BufferPool::alloc_count() - before, 1u);
  EXPECT_EQ(pool.get("in", 500), a);  // smaller: same buffer, no allocation
  EXPECT_EQ(pool.get("in", 1000), a);
  EXPECT_EQ(BufferPool::alloc_count() - before, 1u);
  pool.get("in", 4000);  // grows
  EXPECT_EQ(pool.capacity("in"), 4000u);
  pool.get("out", 10);
  EXPECT_EQ(BufferPool::alloc_count() - before, 3u);
  pool.get("in", 3999);
  EXPECT_EQ(pool.capacity("in"), 4000u);
  EXPECT_EQ(BufferPool::alloc_count() - before, 3u);
  EXPECT_EQ(pool.capacity("nothing"), 0u);
}

// plan_gemm_tq2 is plan_tq2's route with a reason, on every arch and across the decode and
// prefill rules: each reason names the route's case (a distinct reason a route at least).
TEST(Tq2Plan, EveryPlanSaysWhy) {
  ArchInfo cpu, sm80, h200;
  sm80.kind = h200.kind = DeviceKind::CUDA;
  sm80.cc_major = 8, sm80.sm_count = 108;
  h200.cc_major = 9, h200.sm_count = 132;
  ArchInfo volta = sm80;
  volta.cc_major = 7;
  std::map<Tq2Route, std::set<std::string>> reasons;
  int plans = 0;
  for (const ArchInfo& a : {cpu, sm80, h200})
    for (DType dt : {DType::F32, DType::F16, DType::BF16})
      for (std::int64_t m : {0, 1, 2, 4, 6, 8, 9, 16, 17, 64, 128, 129, 512, 4096})
        for (std::int64_t n : {64, 2560, 3072, 6912, 27648, 128256})
          for (std::int64_t k : {128, 2560, 3072, 8192, 14336, 28672}) {
            const Tq2Plan p = plan_gemm_tq2(m, n, k, dt, a);
            ASSERT_EQ(p.route, plan_tq2(m, n, k, dt, a)) << m << " " << n << " " << k;
            ASSERT_FALSE(p.reason.empty()) << tq2_route_name(p.route) << " m " << m << " n " << n << " k " << k;
            reasons[p.route].insert(p.reason);
            ++plans;
          }
  EXPECT_EQ(plans, 3 * 3 * 14 * 6 * 6);
  // Before sm_80 no kernel is built: Auto refuses, naming the device.
  expect_error([&] { plan_gemm_tq2(1, 3072, 3072, DType::F32, volta); }, ErrorCode::Unsupported,
               "gemm_tq2: needs an sm_80 or newer GPU (llmm's CUDA kernels are built for sm_80 and sm_90), got sm_70");
  for (Tq2Route r : {Tq2Route::Cpu, Tq2Route::StreamV2, Tq2Route::StreamV4,
                     Tq2Route::StreamV5, Tq2Route::DequantLt, Tq2Route::TiledSm90, Tq2Route::TiledSm90SplitK})
    EXPECT_FALSE(reasons[r].empty()) << tq2_route_name(r) << " never planned: pick shapes that reach it";
  EXPECT_EQ(plan_gemm_tq2(1, 3072, 3072, DType::F32, h200, Tq2Route::StreamV2).reason, "forced");
}

TEST(Tq2Plan, Routes) {
  ArchInfo cpu;
  EXPECT_EQ(plan_tq2(1, 3072, 3072, DType::F32, cpu), Tq2Route::Cpu);
  ArchInfo h200;
  h200.kind = DeviceKind::CUDA, h200.cc_major = 9, h200.sm_count = 132;
  for (std::int64_t m : {1, 2, 3, 4}) EXPECT_EQ(plan_tq2(m, 3072, 3072, DType::F32, h200), Tq2Route::StreamV4) << m;
  // v5 where K stays whole: at least 212 super-bands of 128 rows (27648 rows: 216), m <= 8, where
  // the activation fits (m = 8 at k = 8192 does not: v2).
  for (std::int64_t m : {0, 1, 2, 4, 5, 8}) EXPECT_EQ(plan_tq2(m, 27648, 3072, DType::F32, h200), Tq2Route::StreamV5) << m;
  // Below 212 super-bands K goes in parts; at m <= 2 where v4 would hold two blocks, v5 still
  // takes it with K in at most 2 parts (session 18's A/B rows).
  EXPECT_EQ(plan_tq2(1, 211 * 128 + 1, 3072, DType::F32, h200), Tq2Route::StreamV5);
  EXPECT_EQ(llmm::cuda_ternary::tq2_stream_v5_parts_for(1, 211 * 128, 3072).parts, 2);
  EXPECT_EQ(plan_tq2(1, 211 * 128, 3072, DType::F32, h200), Tq2Route::StreamV5);
  EXPECT_EQ(plan_tq2(9, 27648, 3072, DType::F32, h200), Tq2Route::StreamV2);  // wide v5 lost at k 3072
  EXPECT_EQ(plan_tq2(8, 28672, 8192, DType::F32, h200), Tq2Route::StreamV5);  // sliced, 2 parts (m = 6..8)
  EXPECT_EQ(plan_tq2(4, 28672, 8192, DType::F32, h200), Tq2Route::StreamV5);
  EXPECT_EQ(plan_tq2(4, 64, 128 * 256, DType::F32, h200), Tq2Route::StreamV2);  // 17 record columns of 32 KB
  // Where v4 would hold one block per SM, v5 with K in at most 4 parts; 5+ parts stay on v4.
  EXPECT_EQ(plan_tq2(1, 8192, 28672, DType::F32, h200), Tq2Route::StreamV5);  // Llama-70B down: 4 parts
  EXPECT_EQ(llmm::cuda_ternary::tq2_stream_v5_parts(8192, 28672).parts, 4);
  EXPECT_EQ(plan_tq2(4, 14336, 4096, DType::F32, h200), Tq2Route::StreamV5);  // Llama-8B up m4: 2 parts
  EXPECT_EQ(plan_tq2(4, 13824, 2560, DType::F32, h200), Tq2Route::StreamV5);  // BitNet-2B gate_up m4
  // Two v4 blocks an SM: v4 from 3 parts (3072x3072) or past m = 2; v5 at m <= 2 with <= 2 parts
  // (Llama-8B up m = 1: 9.41 vs 9.86 us, BitNet-2B gate_up m = 1 7.73 vs 8.74, session 18).
  EXPECT_EQ(plan_tq2(1, 14336, 4096, DType::F32, h200), Tq2Route::StreamV5);
  EXPECT_EQ(plan_tq2(1, 13824, 2560, DType::F32, h200), Tq2Route::StreamV5);
  EXPECT_GT(llmm::cuda_ternary::tq2_stream_v5_parts_for(1, 3072, 3072).parts, 2);
  EXPECT_EQ(plan_tq2(1, 640, 512, DType::F32, h200), Tq2Route::StreamV4);  // below 2^25 weights: v4
  EXPECT_EQ(plan_tq2(1, 4096, 14336, DType::F32, h200), Tq2Route::StreamV4);  // Llama-8B down: 7 parts
  EXPECT_EQ(plan_tq2(2, 2560, 6912, DType::F32, h200), Tq2Route::StreamV4);   // BitNet-2B down: 14 parts
  EXPECT_EQ(plan_tq2(4, 3840, 2560, DType::F32, h200), Tq2Route::StreamV4);   // BitNet-2B qkv: 5 parts
  EXPECT_EQ(plan_tq2(8, 640, 512, DType::F32, h200), Tq2Route::StreamV4);  // the Python test's shape
  // Long K where neither whole image fits (Llama-70B down at m = 2..6): v5 with a sliced image
  // (4 parts); at m = 7..8, where that slice does not fit either, 6 parts; m = 1 keeps the whole
  // image.
  for (std::int64_t m : {2, 3, 4, 5, 6, 7, 8}) EXPECT_EQ(plan_tq2(m, 8192, 28672, DType::F32, h200), Tq2Route::StreamV5) << m;
  // Up to kTq2V5MaxAutoParts (16) parts: Llama-8B down (7 parts) and BitNet-2B down (14 parts,
  // m = 8: v4's image does not fit) measured 1.93x / 1.10x v2 at m = 8 (session 16).
  for (std::int64_t m : {4, 5, 8}) EXPECT_EQ(plan_tq2(m, 4096, 14336, DType::F32, h200), Tq2Route::StreamV5) << m;
  EXPECT_EQ(plan_tq2(8, 2560, 6912, DType::F32, h200), Tq2Route::StreamV5);
  EXPECT_EQ(plan_tq2(5, 2560, 6912, DType::F32, h200), Tq2Route::StreamV4);  // v4's image fits to m = 5
  EXPECT_EQ(plan_tq2(6, 2560, 6912, DType::F32, h200), Tq2Route::StreamV5);
  EXPECT_EQ(llmm::cuda_ternary::tq2_stream_v5_parts(64, 128 * 68).parts, 17);
  EXPECT_EQ(plan_tq2(8, 64, 128 * 68, DType::F32, h200), Tq2Route::StreamV2);  // 17 parts: past the cap
  EXPECT_EQ(plan_tq2(2, 2560, 6912, DType::BF16, h200), Tq2Route::StreamV4);  // v4 fits: unchanged
  // v4 needs the whole K's activation in shared memory (and sm_90a): past that (and v5's part
  // cap) and elsewhere, v2, the portable decode kernel (v3 was retired).
  EXPECT_EQ(plan_tq2(2, 64, 128 * 8192, DType::F32, h200), Tq2Route::StreamV2);
  ArchInfo a100 = h200;
  a100.cc_major = 8;
  EXPECT_EQ(plan_tq2(1, 3072, 3072, DType::F32, a100), Tq2Route::StreamV2);
  expect_error([&] { plan_tq2(1, 3072, 3072, DType::F32, a100, Tq2Route::StreamV4); }, ErrorCode::Unsupported, "sm_90a");
  // m = 5..8: v4 on small N (n <= 4096), else v5 wherever it runs (K in parts too: 1.05-1.42x v2
  // at m = 8, session 16), else v2.
  for (std::int64_t m : {5, 8}) EXPECT_EQ(plan_tq2(m, 3072, 3072, DType::F32, h200), Tq2Route::StreamV4) << m;
  for (std::int64_t m : {3, 5, 8}) EXPECT_EQ(plan_tq2(m, 4097, 3072, DType::F32, h200), m <= 4 ? Tq2Route::StreamV4 : Tq2Route::StreamV5) << m;
  for (std::int64_t m : {5, 8}) {
    EXPECT_EQ(plan_tq2(m, 14336, 4096, DType::F32, h200), Tq2Route::StreamV5) << m;  // Llama-8B up: 2 parts
    EXPECT_EQ(plan_tq2(m, 13824, 2560, DType::F32, h200), Tq2Route::StreamV5) << m;  // BitNet-2B gate_up
  }
  EXPECT_EQ(plan_tq2(5, 28672, 8192, DType::F32, h200), Tq2Route::StreamV5);  // v4 does not fit, v5's whole image does
  EXPECT_EQ(plan_tq2(8, 4096, 128 * 256, DType::F32, h200), Tq2Route::StreamV5);  // v4's image does not fit: v5 sliced, 7 parts
  EXPECT_EQ(plan_tq2(5, 3072, 3072, DType::F32, a100), Tq2Route::StreamV2);
  // m = 9..16: v5's wide kernels where a slice fits and K is in at most 16 parts, at k >= 12288 or
  // on mid-sized shapes (fewer than 212 super-bands, at least 2^24 weights); else v2 (and v2 off
  // sm_90).
  for (std::int64_t m : {9, 12, 13, 16}) {
    EXPECT_EQ(plan_tq2(m, 3072, 3072, DType::F32, h200), Tq2Route::StreamV2) << m;   // 9.4 M weights
    EXPECT_EQ(plan_tq2(m, 3840, 2560, DType::F32, h200), Tq2Route::StreamV2) << m;   // 9.8 M
    EXPECT_EQ(plan_tq2(m, 2560, 6912, DType::F32, h200), Tq2Route::StreamV5) << m;   // 17.7 M, 14 parts
    EXPECT_EQ(plan_tq2(m, 13824, 2560, DType::F32, h200), Tq2Route::StreamV5) << m;  // 108 super-bands
    EXPECT_EQ(plan_tq2(m, 14336, 4096, DType::F32, h200), Tq2Route::StreamV5) << m;
    EXPECT_EQ(plan_tq2(m, 4096, 4096, DType::F32, h200), Tq2Route::StreamV5) << m;   // 2^24 weights
    EXPECT_EQ(plan_tq2(m, 4096, 4096 - 128, DType::F32, h200), Tq2Route::StreamV2) << m;
    EXPECT_EQ(plan_tq2(m, 28672, 8192, DType::F32, h200), Tq2Route::StreamV2) << m;  // 224 super-bands
    EXPECT_EQ(plan_tq2(m, 27648, 3072, DType::F32, h200), Tq2Route::StreamV2) << m;
    EXPECT_EQ(plan_tq2(m, 4096, 14336, DType::F32, h200), Tq2Route::StreamV5) << m;  // 7 parts of 16 groups
    EXPECT_EQ(plan_tq2(m, 8192, 28672, DType::F32, h200), Tq2Route::StreamV5) << m;  // 14 parts of 16 groups
    EXPECT_EQ(plan_tq2(m, 8192, 28672, DType::F32, a100), Tq2Route::StreamV2) << m;
  }
  EXPECT_EQ(plan_tq2(16, 212 * 128, 12288, DType::F32, h200), Tq2Route::StreamV5);  // k >= 12288
  EXPECT_EQ(plan_tq2(16, 212 * 128, 12160, DType::F32, h200), Tq2Route::StreamV2);
  EXPECT_EQ(plan_tq2(16, 64, 12288, DType::F32, h200), Tq2Route::StreamV2);          // 24 parts of 4 groups
  EXPECT_EQ(plan_tq2(16, 64, 128 * 8192, DType::F32, h200, Tq2Route::StreamV5), Tq2Route::StreamV5);  // forced: any parts
  EXPECT_EQ(plan_tq2(3, 3072, 3072, DType::F32, a100), Tq2Route::StreamV2);
  // m > 16: DequantLt from 2^27 multiply-adds, tq2_tiled below; forced DequantLt takes any m.
  EXPECT_EQ(plan_tq2(17, 3072, 3072, DType::F32, h200), Tq2Route::DequantLt);
  // 16-bit prefill on sm_90: the Hopper engine where its tiles fill the SMs, else DequantLt;
  // an f32 input (precision unknown to the plan) stays on DequantLt; not on sm_80.
  EXPECT_EQ(plan_tq2(1536, 27648, 3072, DType::BF16, h200), Tq2Route::TiledSm90);
  EXPECT_EQ(plan_tq2(128, 27648, 3072, DType::F16, h200), Tq2Route::TiledSm90);     // 216 tiles, 82% of 2 waves
  EXPECT_EQ(plan_tq2(1536, 3072, 3072, DType::BF16, h200), Tq2Route::DequantLt);   // 144 tiles: 55% of 2 waves
  EXPECT_EQ(plan_tq2(128, 2560, 6912, DType::BF16, h200), Tq2Route::TiledSm90SplitK);  // 20 tiles x 6 K parts
  EXPECT_EQ(plan_tq2(1024, 2560, 6912, DType::BF16, h200), Tq2Route::DequantLt);        // past the split route's m
  EXPECT_EQ(plan_tq2(1536, 27648, 3072, DType::F32, h200), Tq2Route::DequantLt);
  EXPECT_EQ(plan_tq2(1536, 27648, 3072, DType::BF16, a100), Tq2Route::DequantLt);
  EXPECT_EQ(plan_tq2(32, 2048, 2048, DType::F32, h200), Tq2Route::DequantLt);  // exactly 2^27
  EXPECT_EQ(plan_tq2(31, 2048, 2048, DType::F32, h200), Tq2Route::Tiled);
  EXPECT_EQ(plan_tq2(130, 333, 384, DType::F32, h200), Tq2Route::Tiled);
  EXPECT_EQ(plan_tq2(1536, 8, 128, DType::F32, h200), Tq2Route::Tiled);
  EXPECT_EQ(plan_tq2(1, 8, 128, DType::F16, h200, Tq2Route::DequantLt), Tq2Route::DequantLt);
  expect_error([&] { plan_tq2(4, 8, 128, DType::F32, cpu, Tq2Route::DequantLt); }, ErrorCode::Unsupported,
               "gemm_tq2: route tq2_dequant_lt cannot run (m: 4, n: 8, k: 128, f32): needs a CUDA context");
  EXPECT_STREQ(tq2_route_name(Tq2Route::DequantLt), "tq2_dequant_lt");
  ArchInfo old = h200;
  old.cc_major = 7;
  expect_error([&] { plan_tq2(1536, 3072, 3072, DType::F32, old); }, ErrorCode::Unsupported, "needs an sm_80 or newer GPU");
  expect_error([&] { plan_tq2(1, 8, 128, DType::F32, old, Tq2Route::StreamV2); }, ErrorCode::Unsupported,
               "needs sm_80 or newer");
  expect_error([&] { plan_tq2(1, 8, 128, DType::F32, old, Tq2Route::DequantLt); }, ErrorCode::Unsupported,
               "needs sm_80 or newer");
  EXPECT_EQ(plan_tq2(16, 3072, 3072, DType::F32, h200, Tq2Route::StreamV2), Tq2Route::StreamV2);
  EXPECT_EQ(plan_tq2(2, 3072, 3072, DType::F32, h200, Tq2Route::Tiled), Tq2Route::Tiled);
  expect_error([&] { plan_tq2(4, 8, 128, DType::F32, cpu, Tq2Route::Tiled); }, ErrorCode::Unsupported,
               "gemm_tq2: route tq2_tiled cannot run (m: 4, n: 8, k: 128, f32): needs a CUDA context");
  expect_error([&] { plan_tq2(4, 8, 128, DType::F32, h200, Tq2Route::Cpu); }, ErrorCode::Unsupported, "CPU contexts only");
  expect_error([&] { plan_tq2(17, 8, 128, DType::F32, h200, Tq2Route::StreamV2); }, ErrorCode::Unsupported,
               "gemm_tq2: route tq2_stream_v2 cannot run (m: 17, n: 8, k: 128, f32): the streaming kernels take m <= 16");
  EXPECT_STREQ(tq2_route_name(Tq2Route::StreamV2), "tq2_stream_v2");
}

TEST(Tq2Cpu, SeedAntiCapOfEightThroughHostApi) {
  Context ctx = Context::cpu(2);
  expect_seed_anti_cap_of_eight(ctx);
}

TEST(Tq2Cpu, ViewApiDtypesAndPadding) {
  Context ctx = Context::cpu(2);
  TernaryWeightCache cache(ctx);
  for (DType in : {DType::F32, DType::F16, DType::BF16})
    for (DType out : {DType::F32, in}) {
      Tq2Case c;
      c.m = 9, c.n = 40, c.k = 384, c.in_dtype = in, c.out_dtype = out, c.pad = 3, c.seed_input = false;
      Tq2Outcome o = run_tq2_case(ctx, cache, c);
      EXPECT_TRUE(o.cmp.ok()) << c.describe() << ": " << o.cmp.summary();
      EXPECT_TRUE(o.any_nonzero);
      EXPECT_TRUE(o.padding_untouched) << c.describe();
    }
}

TEST(Tq2Cpu, Refusals) {
  Context ctx = Context::cpu();
  TernaryWeightCache cache(ctx);
  std::vector<BlockTQ2_128> b = seed_tq2_blocks(8, 128, 3);
  WeightHandle w = cache.get_or_upload(1, b.data(), bytes_of(b), 8, 128);
  std::vector<float> in(4 * 128, 1.0f), out(64, NAN);
  std::vector<std::uint8_t> u8(64);
  auto refused = [&](const std::function<void(Context&)>& call, ErrorCode code, const std::string& part) {
    LaunchRecorder rec;
    ctx.set_launch_recorder(&rec);
    expect_error([&] { call(ctx); }, code, part);
    ctx.set_launch_recorder(nullptr);
    EXPECT_TRUE(rec.launched.empty()) << part;
    for (float x : out) ASSERT_TRUE(std::isnan(x)) << "output written by a refused call: " << part;
  };
  View vin = View::contiguous(in.data(), DType::F32, {4, 128}), vout = View::contiguous(out.data(), DType::F32, {4, 8});
  refused([&](Context& c) { gemm_tq2(c, nullptr, vin, vout); }, ErrorCode::InvalidArgument, "gemm_tq2: null weight handle");
  refused([&](Context& c) { gemm_tq2(c, w, View::contiguous(in.data(), DType::F32, {2, 256}), vout); },
          ErrorCode::InvalidArgument, "gemm_tq2: in is [2, 256] but weight 1 has k = 128");
  refused([&](Context& c) { gemm_tq2(c, w, vin, View::contiguous(out.data(), DType::F32, {4, 9})); },
          ErrorCode::InvalidArgument, "gemm_tq2: out must be [4, 8]");
  refused([&](Context& c) { gemm_tq2(c, w, vin, View::contiguous(u8.data(), DType::U8, {4, 8})); }, ErrorCode::Unsupported,
          "gemm_tq2: output dtype u8 must be f32 or the input's (f32)");
  refused([&](Context& c) { gemm_tq2(c, w, vin, View::contiguous(in.data() + 8, DType::F32, {4, 8})); },
          ErrorCode::InvalidArgument, "gemm_tq2: out overlaps in");
  refused([&](Context& c) { gemm_tq2(c, w, View::strided(in.data(), DType::F32, {4, 128}, {128, 2}), vout); },
          ErrorCode::InvalidArgument, "in innermost stride is 2");
  refused([&](Context& c) {
    Tq2Options o;
    o.force_route = Tq2Route::StreamV2;
    gemm_tq2(c, w, vin, vout, o);
  }, ErrorCode::Unsupported, "route tq2_stream_v2 cannot run");
  refused([&](Context& c) { gemm_tq2(c, w, in.data(), out.data(), 4, 8, 256); }, ErrorCode::InvalidArgument,
          "gemm_tq2: n 8, k 256 differ from weight 1's [8, 128]");
  refused([&](Context& c) {
    LaunchRecorder* r = c.launch_recorder();
    r->before_launch = [](const std::string& k) { fail(ErrorCode::Cuda, "injected: ", k); };
    gemm_tq2(c, w, vin, vout);
  }, ErrorCode::Cuda, "injected: cpu_reference_tq2");
}

// The Hadamard rotation on the CPU reference: against the test's own float64 rotation (a
// Kronecker-built H, the signs +-1), every dtype, padding, any power-of-two block (2 to 1024);
// and the same input unrotated gives another result (the rotation is applied, not ignored).
TEST(Tq2Cpu, HadamardRotationMatchesTheRotatedReference) {
  Context ctx = Context::cpu(2);
  TernaryWeightCache cache(ctx);
  for (int block : {2, 128, 256, 1024})
    for (DType in : {DType::F32, DType::BF16, DType::F16}) {
      Tq2Case c;
      c.m = 3, c.n = 24, c.k = 2048, c.in_dtype = in, c.out_dtype = in, c.pad = 3, c.seed_input = false, c.rot_block = block;
      Tq2Outcome o = run_tq2_case(ctx, cache, c);
      EXPECT_TRUE(o.cmp.ok()) << c.describe() << ": " << o.cmp.summary();
      EXPECT_TRUE(o.padding_untouched) << c.describe();
      c.rot_block = 0;
      EXPECT_NE(run_tq2_case(ctx, cache, c).out_bytes, o.out_bytes) << c.describe();
    }
}

TEST(Tq2Cpu, HadamardRotationRefusals) {
  Context ctx = Context::cpu();
  TernaryWeightCache cache(ctx);
  std::vector<BlockTQ2_128> b = seed_tq2_blocks(8, 256, 3);
  WeightHandle w = cache.get_or_upload(1, b.data(), bytes_of(b), 8, 256);
  std::vector<float> in(2 * 256, 1.0f), out(16, NAN), signs(256, 1.0f);
  View vin = View::contiguous(in.data(), DType::F32, {2, 256}), vout = View::contiguous(out.data(), DType::F32, {2, 8});
  for (auto [block, sgn, part] : {std::tuple{3, signs.data(), "rotation_block 3 must be a power of two >= 2 dividing k = 256"},
                                  std::tuple{512, signs.data(), "rotation_block 512 must be a power of two"},
                                  std::tuple{1, signs.data(), "rotation_block 1 must be"},
                                  std::tuple{0, signs.data(), "rotation_block 0 must be"},
                                  std::tuple{128, static_cast<float*>(nullptr), "rotation_block 128 given with null rotation_signs"}}) {
    Tq2Options o;
    o.rotation_block = block, o.rotation_signs = sgn;
    LaunchRecorder rec;
    ctx.set_launch_recorder(&rec);
    expect_error([&] { gemm_tq2(ctx, w, vin, vout, o); }, ErrorCode::InvalidArgument, part);
    ctx.set_launch_recorder(nullptr);
    EXPECT_TRUE(rec.launched.empty()) << part;
    for (float x : out) ASSERT_TRUE(std::isnan(x)) << "output written by a refused call: " << part;
  }
}

// m == 0 with the strides NumPy 2 gives empty arrays (0, 0): an empty call, not a refusal.
TEST(Tq2Cpu, EmptyInputWithZeroStrides) {
  Context ctx = Context::cpu();
  TernaryWeightCache cache(ctx);
  std::vector<BlockTQ2_128> b = seed_tq2_blocks(8, 128, 3);
  WeightHandle w = cache.get_or_upload(1, b.data(), bytes_of(b), 8, 128);
  float dummy[4] = {0, 0, 0, 0};
  Receipt r = gemm_tq2(ctx, w, View::strided(dummy, DType::F32, {0, 128}, {0, 0}),
                       View::strided(dummy, DType::F32, {0, 8}, {0, 0}));
  EXPECT_EQ(r.kernels_launched, 0);
  expect_error([&] { plan_tq2(-1, 8, 128, DType::F32, ArchInfo{}); }, ErrorCode::InvalidArgument,
               "plan_tq2: needs m >= 0, n >= 1 and k a positive multiple of 128, got m -1");
}
