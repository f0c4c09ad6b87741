#include "random.hpp"

#include <cmath>
#include <cstring>

namespace llmm::test {

std::uint64_t Rng::next() {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

std::int64_t Rng::uniform_int(std::int64_t lo, std::int64_t hi) {
  return lo + static_cast<std::int64_t>(next() % static_cast<std::uint64_t>(hi - lo + 1));
}

void fill_random(const View& v, std::uint64_t seed, double scale) {
  Rng rng(seed);
  std::int64_t idx[View::kMaxRank] = {0, 0, 0, 0};
  if (v.empty()) return;
  std::uint64_t n = v.numel();
  for (std::uint64_t e = 0; e < n; ++e) {
    std::int64_t off = 0;
    for (int d = 0; d < v.rank; ++d) off += idx[d] * v.stride(d);
    if (is_float(v.dtype)) {
      double mag = (0.25 + rng.uniform()) * std::ldexp(1.0, static_cast<int>(rng.uniform_int(-3, 3)));
      double x = (rng.next() & 1 ? -mag : mag) * scale;
      store_from_double(v.data, v.dtype, off, x);
    } else {
      store_from_double(v.data, v.dtype, off, static_cast<double>(rng.uniform_int(1, 255)));
    }
    for (int d = v.rank - 1; d >= 0; --d) {  // odometer over the index space
      if (++idx[d] < v.dim(d)) break;
      idx[d] = 0;
    }
  }
}

void inject_nonfinite(const View& v, std::uint64_t seed, int every) {
  if (every <= 0 || v.empty() || v.rank < 1) return;
  Rng rng(seed * 7919 + 13);
  const std::int64_t cols = v.dim(v.rank - 1);
  const std::uint64_t rows = v.numel() / static_cast<std::uint64_t>(cols);
  std::int64_t idx[View::kMaxRank] = {0, 0, 0, 0};
  int picked = 0;
  for (std::uint64_t row = 0; row < rows; ++row) {
    if (static_cast<int>(row % static_cast<std::uint64_t>(every)) == every / 2) {
      std::int64_t off = 0;
      for (int d = 0; d + 1 < v.rank; ++d) off += idx[d] * v.stride(d);
      const double kinds[3] = {NAN, INFINITY, -INFINITY};
      const double x = kinds[picked % 3];
      const std::int64_t c0 = rng.uniform_int(0, cols - 1);
      store_from_double(v.data, v.dtype, off + c0 * v.stride(v.rank - 1), x);
      if (picked % 4 == 3 && cols > 1) {  // the opposite infinity in the same row
        const std::int64_t c1 = (c0 + 1 + rng.uniform_int(0, cols - 2)) % cols;
        store_from_double(v.data, v.dtype, off + c1 * v.stride(v.rank - 1), std::isnan(x) ? INFINITY : -x);
      }
      ++picked;
    }
    for (int d = v.rank - 2; d >= 0; --d) {  // odometer over the rows
      if (++idx[d] < v.dim(d)) break;
      idx[d] = 0;
    }
  }
}

void poison(void* data, std::size_t bytes) { std::memset(data, 0xFF, bytes); }

void poison(const View& v) {
  if (!v.empty()) poison(v.data, static_cast<std::size_t>(v.byte_extent()));
}

}  // namespace llmm::test
