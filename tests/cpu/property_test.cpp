// Property tests on the CPU backend, one per op: random valid calls (shapes with zeros and
// non-multiples, strides and padding, transposes, dtypes, layouts, id dtypes, routes) agree with
// a float64 reference written here, independently of llmm's own (own 16-bit decoding, own
// loops); random invalid calls (one defect each) throw llmm::Error and leave the output and
// every input bitwise unchanged.
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "llmm/llmm.hpp"
#include "support/random.hpp"

using namespace llmm;
using namespace llmm::test;

namespace {

// ---- independent decoding of the element types (not llmm's conversions) ----
double from_half_bits(std::uint16_t h) {
  const int e = (h >> 10) & 31, f = h & 1023;
  const double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 31) return f ? NAN : s * INFINITY;
  return e == 0 ? s * std::ldexp(f, -24) : s * std::ldexp(1024 + f, e - 25);
}
double from_bf16_bits(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
double elem(const std::vector<unsigned char>& buf, DType t, std::int64_t i) {
  const unsigned char* p = buf.data() + static_cast<std::size_t>(i) * dtype_size(t);
  switch (t) {
    case DType::F32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::F16: {
      std::uint16_t h;
      std::memcpy(&h, p, 2);
      return from_half_bits(h);
    }
    case DType::BF16: {
      std::uint16_t h;
      std::memcpy(&h, p, 2);
      return from_bf16_bits(h);
    }
    case DType::I64: {
      std::int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    case DType::I32: {
      std::int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    default: {
      std::uint32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
  }
}

// A buffer of `elems` random values of t (outside every view too: padding is random, never read).
std::vector<unsigned char> random_buffer(DType t, std::int64_t elems, Rng& rng) {
  std::vector<unsigned char> b(static_cast<std::size_t>(std::max<std::int64_t>(elems, 1)) * dtype_size(t));
  View v = View::contiguous(b.data(), t, {std::max<std::int64_t>(elems, 1)});
  fill_random(v, rng.next());
  return b;
}

// |got - want| within the f32-accumulation bound plus the output's rounding (16-bit inputs are
// exact in f32; CPU backend accumulates in float64).
bool close(double got, double want, double abs_sum, DType out) {
  const double u = out == DType::F32 ? 0x1p-24 : out == DType::F16 ? 0x1p-11 : 0x1p-8;
  const double atol = out == DType::F16 ? 0x1p-24 : 1e-300;
  return std::fabs(got - want) <= atol + u * std::fabs(want) + 1e-12 * abs_sum;
}

// Runs `call`, which must throw llmm::Error, and checks that no byte of `bufs` changed.
void expect_refused_untouched(const std::function<void()>& call, std::vector<std::vector<unsigned char>*> bufs,
                              const std::string& what) {
  std::vector<std::vector<unsigned char>> before;
  for (auto* b : bufs) before.push_back(*b);
  try {
    call();
    ADD_FAILURE() << "accepted: " << what;
  } catch (const Error&) {
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": not an llmm::Error: " << e.what();
  }
  for (std::size_t i = 0; i < bufs.size(); ++i) EXPECT_EQ(*bufs[i], before[i]) << what << ": buffer " << i << " changed";
}

DType pick_float(Rng& rng) { return static_cast<DType>(rng.uniform_int(0, 2)); }

}  // namespace

TEST(Property, MatmulRandomValidAndInvalidCalls) {
  Context ctx = Context::cpu(2);
  Rng rng(2026);
  for (int it = 0; it < 300; ++it) {
    const DType t = pick_float(rng);
    const std::int64_t batch = rng.uniform_int(0, 3), m = rng.uniform_int(0, 9), n = rng.uniform_int(0, 9),
                       k = rng.uniform_int(0, 9), pad = rng.uniform_int(0, 3);
    const bool ta = rng.next() & 1, tb = rng.next() & 1, a_b = (rng.next() & 3) == 0, b_b = (rng.next() & 3) == 0;
    const std::int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    const std::int64_t ald = ac + pad, bld = bc + pad, cld = n + pad;
    const std::int64_t abs_ = a_b ? 0 : ar * ald + 2, bbs = b_b ? 0 : br * bld + 1, cbs = m * cld + 3;
    std::vector<unsigned char> A = random_buffer(t, batch * (abs_ + ar * ald) + 8, rng),
                               B = random_buffer(t, batch * (bbs + br * bld) + 8, rng),
                               C = random_buffer(t, batch * cbs + m * cld + 8, rng);
    View av = View::strided(A.data(), t, {batch, ar, ac}, {abs_, ald, 1});
    View bv = View::strided(B.data(), t, {batch, br, bc}, {bbs, bld, 1});
    View cv = View::strided(C.data(), t, {batch, m, n}, {cbs, cld, 1});
    MatmulOptions o;
    o.transpose_a = ta, o.transpose_b = tb;
    const std::vector<unsigned char> C0 = C;
    matmul(ctx, av, bv, cv, o);
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
          double want = 0, abs_sum = 0;
          for (std::int64_t l = 0; l < k; ++l) {
            const double x = elem(A, t, b * abs_ + (ta ? l * ald + i : i * ald + l));
            const double y = elem(B, t, b * bbs + (tb ? j * bld + l : l * bld + j));
            want += x * y, abs_sum += std::fabs(x * y);
          }
          const double got = elem(C, t, b * cbs + i * cld + j);
          ASSERT_TRUE(close(got, want, abs_sum, t)) << "it " << it << ": c[" << b << "," << i << "," << j << "] = " << got
                                                    << ", want " << want;
        }
    // Padding of c (between rows and matrices) is never written.
    for (std::size_t i = 0; i < C.size(); ++i) {
      const std::int64_t e = static_cast<std::int64_t>(i / dtype_size(t));
      const std::int64_t bb = e / cbs, r = e - bb * cbs;  // cbs >= 3
      const bool element = cld > 0 && bb < batch && r / cld < m && r % cld < n;
      if (!element) ASSERT_EQ(C[i], C0[i]) << "it " << it << ": padding byte " << i << " written";
    }
    // One defect each: refused with llmm::Error, nothing written.
    if (batch == 0 || m == 0 || n == 0) continue;
    const int defect = static_cast<int>(rng.uniform_int(0, 6));
    View a2 = av, b2 = bv, c2 = cv;
    MatmulOptions o2 = o;
    switch (defect) {
      case 0: b2.dtype = t == DType::F32 ? DType::F16 : DType::F32; break;  // mixed dtypes
      case 1: c2.shape[2] = n + 1; break;                                   // c's n
      case 2: c2.shape[1] = m + 1; break;                                   // c's m
      case 3: o2.transpose_b = !tb; if (k == n) c2.shape[2] = n + 1; break;  // k disagrees (or c does)
      case 4: c2.strides[2] = 2; c2.shape[2] = n > 1 ? n : 2; break;        // innermost stride
      case 5: c2 = View::strided(A.data(), t, {batch, m, n}, {cbs, cld, 1}); if (k == 0) c2.rank = 4; break;  // overlaps a
      default: a2.rank = 4; break;                                          // rank
    }
    expect_refused_untouched([&] { matmul(ctx, a2, b2, c2, o2); }, {&A, &B, &C}, "matmul defect " + std::to_string(defect));
  }
}

TEST(Property, MatmulIdRandomValidAndInvalidCalls) {
  Context ctx = Context::cpu(2);
  Rng rng(77);
  for (int it = 0; it < 300; ++it) {
    const DType wt = pick_float(rng), it_ = (rng.next() & 1) ? DType::F32 : wt;
    const DType ot = (rng.next() & 1) ? DType::F32 : it_;
    const DType idt = static_cast<DType>(rng.uniform_int(4, 6));  // u32, i32, i64
    const std::int64_t E = rng.uniform_int(1, 5), n = rng.uniform_int(1, 9), k = rng.uniform_int(1, 9),
                       m = rng.uniform_int(0, 6), K = rng.uniform_int(1, 4), epad = rng.uniform_int(0, 5),
                       ipad = rng.uniform_int(0, 3);
    const int layout = static_cast<int>(rng.uniform_int(0, 2));  // shared, slotted [m*K, k], slotted [m, K, k]
    const auto route = (rng.next() & 1) ? MatmulIdRoute::GroupedPrefill : MatmulIdRoute::Direct;
    const std::int64_t es = n * k + epad, ld = k + ipad, ts = layout == 2 ? K * ld + 1 : layout == 1 ? K * ld : ld;
    std::vector<unsigned char> W = random_buffer(wt, E * es + 4, rng), X = random_buffer(it_, m * ts + K * ld + 4, rng),
                               O = random_buffer(ot, m * K * n + 4, rng), I(static_cast<std::size_t>(m * K + 1) * 8);
    std::vector<std::int64_t> idv(static_cast<std::size_t>(m * K));
    for (auto& v : idv) {
      v = rng.uniform_int(-2, E + 1);
      if (idt == DType::I64 && (rng.next() & 7) == 0) v += std::int64_t{1} << 32;  // never truncated to an expert
      if (idt == DType::U32 && v < 0) v = 0xFFFFFFFFll;
    }
    for (std::size_t r = 0; r < idv.size(); ++r) {
      if (idt == DType::I64) std::memcpy(I.data() + r * 8, &idv[r], 8);
      else {
        const std::uint32_t v = static_cast<std::uint32_t>(idv[r]);
        std::memcpy(I.data() + r * 4, &v, 4);
      }
    }
    View wv = View::strided(W.data(), wt, {E, n, k}, {es, k, 1});
    View xv = layout == 0 ? View::strided(X.data(), it_, {m, k}, {ld, 1})
              : layout == 1 ? View::strided(X.data(), it_, {m * K, k}, {ld, 1})
                            : View::strided(X.data(), it_, {m, K, k}, {ts, ld, 1});
    View iv = View::contiguous(I.data(), idt, {m, K});
    View ov = View::contiguous(O.data(), ot, {m, K, n});
    MatmulIdScratch scratch(ctx, static_cast<std::uint32_t>(E), static_cast<std::uint32_t>(std::max<std::int64_t>(m, 1)),
                            static_cast<std::uint32_t>(K));
    const auto lay = layout == 0 ? MatmulIdInputLayout::SharedPerToken : MatmulIdInputLayout::Slotted;
    matmul_id(ctx, wv, xv, iv, ov, &scratch, lay, MatmulIdMultiplicity::MayRepeat, route);
    for (std::int64_t t = 0; t < m; ++t)
      for (std::int64_t s = 0; s < K; ++s) {
        const std::int64_t r = t * K + s, id = static_cast<std::int64_t>(elem(I, idt, r));
        const bool in_range = id >= 0 && id < E;
        const std::int64_t xrow = layout == 0 ? t * ld : layout == 1 ? r * ld : t * ts + s * ld;
        for (std::int64_t j = 0; j < n; ++j) {
          double want = 0, abs_sum = 0;
          for (std::int64_t l = 0; in_range && l < k; ++l) {
            const double p = elem(X, it_, xrow + l) * elem(W, wt, id * es + j * k + l);
            want += p, abs_sum += std::fabs(p);
          }
          const double got = elem(O, ot, r * n + j);
          ASSERT_TRUE(close(got, want, abs_sum, ot))
              << "it " << it << " " << matmul_id_route_name(route) << " ids " << dtype_name(idt) << " id " << id << ": out["
              << r << "," << j << "] = " << got << ", want " << want;
        }
      }
    if (m == 0) continue;
    // One defect each.
    const int defect = static_cast<int>(rng.uniform_int(0, 6));
    View w2 = wv, x2 = xv, i2 = iv, o2 = ov;
    switch (defect) {
      case 0: o2.shape[2] = n + 1; break;                     // out's n
      case 1: o2.shape[1] = K + 1; break;                      // out's top_k
      case 2: w2.shape[2] = k + 1, w2.strides[1] = k + 1; break;  // weights' k against the input's
      case 3: i2.dtype = DType::F32; break;                    // ids dtype
      case 4: w2.strides[1] = k + 1; if (n == 1) w2.rank = 2; break;  // expert rows not [n, k] row-major
      case 5: o2 = View::contiguous(W.data(), ot, {m, K, n}); break;  // output overlaps the weights
      default: x2.strides[x2.rank - 1] = 2; x2.shape[x2.rank - 1] = std::max<std::int64_t>(k, 2); break;  // innermost stride
    }
    expect_refused_untouched(
        [&] { matmul_id(ctx, w2, x2, i2, o2, &scratch, lay, MatmulIdMultiplicity::MayRepeat, route); }, {&W, &X, &I, &O},
        "matmul_id defect " + std::to_string(defect));
  }
}

TEST(Property, GemmTq2RandomValidAndInvalidCalls) {
  Context ctx = Context::cpu(2);
  TernaryWeightCache cache(ctx);
  Rng rng(31);
  for (int it = 0; it < 120; ++it) {
    const std::int64_t n = rng.uniform_int(1, 40), k = 128 * rng.uniform_int(1, 3), m = rng.uniform_int(0, 6),
                       pad = rng.uniform_int(0, 3);
    const DType in = pick_float(rng), out = (rng.next() & 1) ? DType::F32 : in;
    // Random blocks: codes 0..2, scales finite f16 of varied magnitude.
    std::vector<unsigned char> aos(static_cast<std::size_t>(n * (k / 128)) * 34);
    for (std::size_t b = 0; b < aos.size() / 34; ++b) {
      for (int i = 0; i < 32; ++i) {
        unsigned char q = 0;
        for (int j = 0; j < 4; ++j) q = static_cast<unsigned char>(q | (rng.uniform_int(0, 2) << (2 * j)));
        aos[b * 34 + i] = q;
      }
      const std::uint16_t d = static_cast<std::uint16_t>(rng.uniform_int(0x2000, 0x5000));  // ~2^-7 .. 2^5
      std::memcpy(&aos[b * 34 + 32], &d, 2);
    }
    WeightHandle w = cache.get_or_upload(static_cast<std::uint64_t>(it), aos.data(), aos.size(), n, k);
    std::vector<unsigned char> X = random_buffer(in, m * (k + pad) + 4, rng), O = random_buffer(out, m * (n + pad) + 4, rng);
    View xv = View::strided(X.data(), in, {m, k}, {k + pad, 1}), ov = View::strided(O.data(), out, {m, n}, {n + pad, 1});
    gemm_tq2(ctx, w, xv, ov);
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double want = 0, abs_sum = 0;
        for (std::int64_t l = 0; l < k; ++l) {
          const unsigned char* blk = &aos[static_cast<std::size_t>(j * (k / 128) + l / 128) * 34];
          const int code = (blk[(l % 128) / 4] >> (2 * (l % 4))) & 3;
          std::uint16_t d;
          std::memcpy(&d, blk + 32, 2);
          const double p = elem(X, in, i * (k + pad) + l) * (code - 1) * from_half_bits(d);
          want += p, abs_sum += std::fabs(p);
        }
        const double got = elem(O, out, i * (n + pad) + j);
        ASSERT_TRUE(close(got, want, abs_sum, out)) << "it " << it << ": out[" << i << "," << j << "] = " << got << ", want " << want;
      }
    if (m == 0) continue;
    const int defect = static_cast<int>(rng.uniform_int(0, 4));
    View x2 = xv, o2 = ov;
    switch (defect) {
      case 0: x2.shape[1] = k + 128; x2.strides[0] = k + 128 + pad; break;  // k against the weight's
      case 1: o2.shape[1] = n + 1; break;                                  // out's n
      case 2: o2.shape[0] = m + 1; break;                                  // out's m
      case 3: o2.dtype = in == DType::F32 ? DType::F16 : (in == DType::F16 ? DType::BF16 : DType::F16); break;
      default: x2.strides[1] = 2; break;                                   // innermost stride
    }
    expect_refused_untouched([&] { gemm_tq2(ctx, w, x2, o2); }, {&X, &O}, "gemm_tq2 defect " + std::to_string(defect));
  }
}
