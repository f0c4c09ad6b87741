// Seeded test data: random values of varied magnitude (never zero) and NaN poisoning.
#pragma once
#include <cstdint>

#include "llmm/view.hpp"

namespace llmm::test {

// Fills every element of the view's index space (padding untouched) with
// sign * (0.25 + U[0,1)) * 2^e, e uniform in [-3, 3], then scaled by `scale`; rounded to the
// dtype. Deterministic in `seed`. U8/U32 get uniform integers in [1, 255].
void fill_random(const View& v, std::uint64_t seed, double scale = 1.0);

// Puts Inf/NaN into some rows of a view (its index space without the last dimension: the
// "rows"): row r with r % every == every / 2 gets one value at a random column, cycling NaN,
// +Inf, -Inf; every fourth such row also gets the opposite infinity elsewhere (an Inf - Inf
// sum). Deterministic in `seed`; no-op for every <= 0 or an empty view.
void inject_nonfinite(const View& v, std::uint64_t seed, int every);

// Every byte of the buffer region [data, data + bytes) set to a NaN pattern (0xFF bytes: NaN
// in f32, f16 and bf16), so an unwritten output element fails any comparison.
void poison(void* data, std::size_t bytes);
// The whole byte extent of a (host) view.
void poison(const View& v);

// A small counter-based generator (splitmix64), reproducible across platforms.
struct Rng {
  std::uint64_t state;
  explicit Rng(std::uint64_t seed) : state(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
  std::uint64_t next();
  double uniform();  // [0, 1)
  std::int64_t uniform_int(std::int64_t lo, std::int64_t hi);  // [lo, hi]
};

}  // namespace llmm::test
