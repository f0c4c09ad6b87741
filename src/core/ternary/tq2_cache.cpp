// TernaryWeightCache (AoS -> SoA, upload once per key) and BufferPool (grow-only scratch).
#include <atomic>
#include <cstring>
#include <limits>

#include "core/host_alloc.hpp"
#include "core/ternary/tq2_kernels.hpp"
#include "core/runtime.hpp"
#include "core/ternary/tq2_block.hpp"
#include "llmm/checked.hpp"
#include "llmm/error.hpp"
#include "llmm/ternary.hpp"

namespace llmm {
namespace {

std::atomic<std::uint64_t> g_pool_allocs{0};
std::atomic<std::uint64_t> g_upload_ids{0};

// Codes padded to a 256-byte boundary so the scales start aligned.
std::size_t round_up(std::size_t x, std::size_t a) { return (x + a - 1) / a * a; }

}  // namespace

TernaryWeightCache::TernaryWeightCache(const Context& ctx)
    : device_(ctx.kind()), device_index_(ctx.arch().device_index) {}

WeightHandle TernaryWeightCache::get_or_upload(std::uint64_t key, const void* aos, std::size_t bytes, std::int64_t n,
                                               std::int64_t k) {
  return upload(key, aos, bytes, 1, n, k);
}

WeightHandle TernaryWeightCache::get_or_upload_experts(std::uint64_t key, const void* aos, std::size_t bytes,
                                                       std::int64_t n_experts, std::int64_t n, std::int64_t k) {
  if (n_experts < 1)
    fail(ErrorCode::InvalidArgument, "TernaryWeightCache: key ", key, ": n_experts ", n_experts, " must be >= 1");
  return upload(key, aos, bytes, n_experts, n, k);
}

WeightHandle TernaryWeightCache::upload(std::uint64_t key, const void* aos, std::size_t bytes, std::int64_t experts,
                                        std::int64_t n, std::int64_t k) {
  auto shape = [](std::int64_t e, std::int64_t rows, std::int64_t cols) {
    return (e > 1 ? std::to_string(e) + " experts of " : std::string()) + "[" + std::to_string(rows) + ", " +
           std::to_string(cols) + "]";
  };
  (void)tq2_aos_bytes(n, k);  // n, k themselves (the message names them)
  if (experts > std::numeric_limits<std::int64_t>::max() / n)
    fail(ErrorCode::InvalidArgument, "TernaryWeightCache: key ", key, ": ", experts, " x ", n, " rows overflow");
  const std::int64_t rows = experts * n;
  const std::size_t want = tq2_aos_bytes(rows, k);
  if (bytes != want)
    fail(ErrorCode::InvalidArgument, "TernaryWeightCache: key ", key, ": ", bytes, " bytes given, ", experts > 1 ? "" : "an ",
         shape(experts, n, k), " TQ2_0_g128 ", experts > 1 ? "is " : "weight is ", want,
         experts > 1 ? " (n_experts * n * k/128 * 34)" : " (n * k/128 * 34)");
  if (aos == nullptr) fail(ErrorCode::InvalidArgument, "TernaryWeightCache: key ", key, ": null data");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it != map_.end()) {
    const TernaryWeight& w = *it->second;
    if (w.n() != n || w.k() != k || w.experts() != experts)
      fail(ErrorCode::InvalidArgument, "TernaryWeightCache: key ", key, " holds ", w.experts() > 1 ? "" : "an ",
           shape(w.experts(), w.n(), w.k()), w.experts() > 1 ? "" : " weight", ", asked for ", shape(experts, n, k));
    return it->second;
  }
  // AoS -> SoA on the host, rejecting code 3 and non-finite scales.
  const std::string who = "TernaryWeightCache: key " + std::to_string(key);
  const std::int64_t bpr = k / kTq2BlockWeights;
  const std::size_t codes_bytes = static_cast<std::size_t>(rows * (k / 4));
  const std::size_t scales_bytes = static_cast<std::size_t>(rows * bpr) * 2;
  const std::size_t scales_off = round_up(codes_bytes, 256);
  // Zero tail after the scales: tq2_stream_v4 copies scales in whole 16-byte units.
  const std::size_t scales_t_off = round_up(scales_off + scales_bytes + cuda_ternary::kTq2ScalesTailBytes, 256);
  // Each expert's columns padded to 8 (16 bytes), so that a TMA box of its scales starts on a
  // 16-byte boundary (a misaligned box start faulted as an illegal instruction on the H200).
  const std::int64_t n8 = (n + 7) / 8 * 8, ld_t = experts * n8;
  const std::size_t total = scales_t_off + static_cast<std::size_t>(bpr * ld_t) * 2;
  std::vector<unsigned char> soa = detail::host_vector<unsigned char>(total, who.c_str());
  const auto* p = static_cast<const unsigned char*>(aos);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t b = 0; b < bpr; ++b) {
      const unsigned char* blk = p + static_cast<std::size_t>(r * bpr + b) * kTq2BlockBytes;
      detail::check_tq2_block(blk, who.c_str(), r, b);
      std::memcpy(soa.data() + static_cast<std::size_t>(r * (k / 4) + b * 32), blk, 32);
      std::memcpy(soa.data() + scales_off + static_cast<std::size_t>(r * bpr + b) * 2, blk + 32, 2);
      std::memcpy(soa.data() + scales_t_off + static_cast<std::size_t>(b * ld_t + (r / n) * n8 + r % n) * 2, blk + 32, 2);
    }
  auto w = std::make_shared<TernaryWeight>();
  w->key_ = key, w->n_ = n, w->k_ = k, w->experts_ = experts, w->device_ = device_, w->device_index_ = device_index_;
  w->upload_id_ = g_upload_ids.fetch_add(1, std::memory_order_relaxed) + 1;
  w->codes_bytes_ = codes_bytes, w->scales_bytes_ = scales_bytes, w->held_bytes_ = total;
  w->scales_t_ld_ = ld_t;
  if (device_ == DeviceKind::CUDA) {
    w->device_mem_ = DeviceBuffer(soa.size(), device_index_);
    copy_to_device(w->device_mem_.data(), soa.data(), soa.size());
    auto* base = static_cast<unsigned char*>(w->device_mem_.data());
    w->codes_ = base;
    w->scales_ = reinterpret_cast<const std::uint16_t*>(base + scales_off);
    w->scales_t_ = reinterpret_cast<const std::uint16_t*>(base + scales_t_off);
  } else {
    w->host_mem_ = std::move(soa);
    w->codes_ = w->host_mem_.data();
    w->scales_ = reinterpret_cast<const std::uint16_t*>(w->host_mem_.data() + scales_off);
    w->scales_t_ = reinterpret_cast<const std::uint16_t*>(w->host_mem_.data() + scales_t_off);
  }
  ++uploads_;
  WeightHandle h = std::move(w);
  map_.emplace(key, h);
  return h;
}

bool TernaryWeightCache::evict(std::uint64_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.erase(key) > 0;
}

bool TernaryWeightCache::evict(const WeightHandle& w) {
  if (!w) return false;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(w->key());
  if (it == map_.end() || it->second.get() != w.get()) return false;
  map_.erase(it);
  return true;
}

std::size_t TernaryWeightCache::bytes_held() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::size_t s = 0;
  for (const auto& [key, w] : map_) s += w->bytes();
  return s;
}

std::size_t TernaryWeightCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.size();
}

std::uint64_t TernaryWeightCache::upload_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return uploads_;
}

BufferPool::BufferPool(DeviceKind device, int device_index) : device_(device), device_index_(device_index) {}

void* BufferPool::get(const std::string& slot, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  Slot& s = slots_[slot];
  if (bytes > s.capacity) {
    // Grow-only: the old buffer goes, the new one keeps the larger size for every later call.
    if (device_ == DeviceKind::CUDA) {
      s.device = DeviceBuffer();
      s.device = DeviceBuffer(bytes, device_index_);
    } else {
      s.host.assign(bytes, 0);
    }
    s.capacity = bytes;
    g_pool_allocs.fetch_add(1, std::memory_order_relaxed);
  }
  return device_ == DeviceKind::CUDA ? s.device.data() : static_cast<void*>(s.host.data());
}

std::size_t BufferPool::capacity(const std::string& slot) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slots_.find(slot);
  return it == slots_.end() ? 0 : it->second.capacity;
}

std::uint64_t BufferPool::alloc_count() { return g_pool_allocs.load(std::memory_order_relaxed); }

}  // namespace llmm
