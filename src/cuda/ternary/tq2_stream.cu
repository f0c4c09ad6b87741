// tq2_stream: decode-shaped ternary GEMM (m = 1..16), memory-bound.
//
// Roles: the weight is the mma A operand (16 rows x 16 k), the activations are B (16 k x 8
// columns), so one m16n8k16 consumes 256 codes and M <= 8 rows cost a single n8 tile.
// A block owns 16 weight rows (one A tile); its warps split K in steps of 256 codes (two scale
// blocks, 64 bytes a row). In a step, lane (g, t4) loads 16 bytes of row g and 16 of row g + 8
// (the quad's four lanes cover the row's 64 bytes), the next step's bytes already in flight.
//
// One mma must not mix two scale blocks, so the quad pairs (t4, t4 ^ 2) swap 8-byte halves:
// afterwards every lane holds 8 bytes (32 codes) of block 0 and 8 of block 1 for each row, and
// for one block the quad holds its 32 bytes. The K order inside an mma is free (the same
// bijection for A and B), so the 32-bit register j of a 16-code word holds codes (j, j + 8),
// decoded with two instructions (decode_word_paired), and the B register of that slot packs
// the activations of the same two k. Each block's 8 mmas go to a zeroed partial accumulator,
// then acc += partial * scale(row) in f32: the decoded weights are exactly -1/0/+1 in f16 or
// bf16, and the f16 scale meets only f32 arithmetic.
//
// Activations (read through L1, converted per use): f16/bf16 as they are; f32 Fast as one bf16
// rounding; f32 Exact as three bf16 parts hi + mid + lo (an exact split of every normal f32),
// each part its own B column: column c = m * splits + part. Products with -1/0/+1 are exact, so
// Exact matches f32 FMA accuracy; the parts are summed (lo first) in the epilogue.
//
// Warp partial sums meet in shared memory and are added in warp order (deterministic).
#include "cuda/ternary/launch.hpp"
#include "cuda/ternary/tq2_common.cuh"

namespace llmm::cuda_ternary {
namespace {

constexpr int kRows = kTq2StreamRows;
constexpr int kMaxWarps = kTq2StreamMaxWarps;

// Codes and scales of one step for this lane: rows g and g + 8.
struct StepData {
  uint4 c[2];           // 16 code bytes of each row (zero where the block is past k)
  std::uint32_t s[2];   // f16 scales of the step's two blocks (low half: first) of each row
};

__device__ __forceinline__ StepData load_step(const std::uint8_t* const (&crow)[2],
                                              const std::uint16_t* const (&srow)[2],
                                              std::int64_t step, std::int64_t steps,
                                              std::int64_t nblk, int t4, bool codes_vec) {
  StepData d;
  const bool in_k = step < steps;
  const std::int64_t b0 = 2 * step;
  const bool mine = in_k && b0 + (t4 >> 1) < nblk;   // this lane's 16 bytes exist
  const bool second = in_k && b0 + 1 < nblk;          // the step has a second block
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const std::uint8_t* p = crow[h] + 64 * step;
    d.c[h] = !mine ? make_uint4(0, 0, 0, 0) : codes_vec ? dev::ldg16(p) : dev::load16_bytes(p);
    const std::uint32_t s0 = in_k ? __ldg(srow[h] + b0) : 0u;
    const std::uint32_t s1 = second ? __ldg(srow[h] + b0 + 1) : 0u;
    d.s[h] = s0 | (s1 << 16);
  }
  return d;
}

// B registers of one 16-code word for one activation column: out[j] = (x[k0 + j], x[k0 + j + 8])
// as TM (f32 input: part `part` of its SPLIT-way bf16 split).
template <class TIn, class TM, int SPLIT>
__device__ __forceinline__ void load_b_word(std::uint32_t (&out)[8], const TIn* x, bool vec, int part) {
  if constexpr (sizeof(TIn) == 2) {
    std::uint32_t u[8];  // u[i] = x[2i] | x[2i + 1] << 16
    if (vec) {
      const uint4 v0 = dev::ldg16(x), v1 = dev::ldg16(x + 8);
      u[0] = v0.x; u[1] = v0.y; u[2] = v0.z; u[3] = v0.w;
      u[4] = v1.x; u[5] = v1.y; u[6] = v1.z; u[7] = v1.w;
    } else {
      const auto* h = reinterpret_cast<const std::uint16_t*>(x);
#pragma unroll
      for (int i = 0; i < 8; ++i)
        u[i] = static_cast<std::uint32_t>(__ldg(h + 2 * i)) | (static_cast<std::uint32_t>(__ldg(h + 2 * i + 1)) << 16);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) out[j] = __byte_perm(u[j / 2], u[4 + j / 2], (j & 1) ? 0x7632 : 0x5410);
  } else {
    float f[16];
    if (vec) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint4 v = dev::ldg16(x + 4 * i);
        f[4 * i] = __uint_as_float(v.x);
        f[4 * i + 1] = __uint_as_float(v.y);
        f[4 * i + 2] = __uint_as_float(v.z);
        f[4 * i + 3] = __uint_as_float(v.w);
      }
    } else {
#pragma unroll
      for (int i = 0; i < 16; ++i) f[i] = __ldg(x + i);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) out[j] = dev::bf16_part<SPLIT>(f[j], f[j + 8], part);
  }
}

template <class TIn, class TOut, class TM, int SPLIT, int NT>
__global__ void __launch_bounds__(kMaxWarps * 32, NT <= 2 ? 2 : 1) tq2_stream_kernel(Tq2Args a, bool in_vec, bool codes_vec) {
  __shared__ float red[kMaxWarps][kRows][8 * NT];
  const int warps = static_cast<int>(blockDim.x >> 5);
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int g = lane >> 2, t4 = lane & 3;
  const bool upper = t4 >= 2;  // this lane's 16 bytes lie in the step's second block
  const std::int64_t nblk = a.k / 128, steps = (nblk + 1) / 2, row_bytes = a.k / 4;
  const std::int64_t tiles = (a.n + kRows - 1) / kRows;
  const int ncols = static_cast<int>(a.m) * SPLIT;
  // Code offset, inside a scale block, of the 8 bytes this lane holds after the swap.
  const int lane_k = 64 * (t4 & 1) + 32 * (t4 >> 1);
  const TIn* const in = static_cast<const TIn*>(a.in);

  // Activation column of each n8 tile for this lane.
  const TIn* xcol[NT];
  int part[NT];
  bool active[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int col = 8 * nt + g;
    active[nt] = col < ncols;
    const int m = active[nt] ? col / SPLIT : 0;
    part[nt] = col % SPLIT;
    xcol[nt] = in + m * a.in_ld + lane_k;
  }

  for (std::int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const std::int64_t n0 = tile * kRows;
    const std::uint8_t* crow[2];
    const std::uint16_t* srow[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // rows past n re-read row n - 1 (results dropped)
      const std::int64_t r = n0 + g + 8 * h < a.n ? n0 + g + 8 * h : a.n - 1;
      crow[h] = a.codes + r * row_bytes + 16 * t4;
      srow[h] = a.scales + r * nblk;
    }
    float acc[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;

    StepData cur = load_step(crow, srow, warp, steps, nblk, t4, codes_vec);
    for (std::int64_t step = warp; step < steps; step += warps) {
      const StepData nxt = load_step(crow, srow, step + warps, steps, nblk, t4, codes_vec);
      // Swap 8-byte halves with lane t4 ^ 2: word[h][b][w] = words w of block b of row h.
      std::uint32_t word[2][2][2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint4 v = cur.c[h];
        const std::uint32_t r0 = __shfl_xor_sync(0xffffffffu, upper ? v.x : v.z, 2);
        const std::uint32_t r1 = __shfl_xor_sync(0xffffffffu, upper ? v.y : v.w, 2);
        word[h][0][0] = upper ? r0 : v.x;
        word[h][0][1] = upper ? r1 : v.y;
        word[h][1][0] = upper ? v.z : r0;
        word[h][1][1] = upper ? v.w : r1;
      }
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        const std::int64_t blk = 2 * step + b;
        if (blk >= nblk) break;  // warp-uniform: k % 256 == 128, last step
        float partial[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) partial[nt][e] = 0.0f;
#pragma unroll
        for (int w = 0; w < 2; ++w) {
          const std::int64_t k0 = blk * 128 + 16 * w;  // + lane_k (in xcol)
          std::uint32_t bfr[NT][8];
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            if (active[nt]) {
              load_b_word<TIn, TM, SPLIT>(bfr[nt], xcol[nt] + k0, in_vec, part[nt]);
            } else {
#pragma unroll
              for (int j = 0; j < 8; ++j) bfr[nt][j] = 0u;
            }
          }
          std::uint32_t a0[8], a1[8];
          dev::decode_word_paired<TM>(word[0][b][w], a0);
          dev::decode_word_paired<TM>(word[1][b][w], a1);
#pragma unroll
          for (int q = 0; q < 4; ++q)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
              dev::mma16816<TM>(partial[nt], a0[2 * q], a1[2 * q], a0[2 * q + 1], a1[2 * q + 1],
                                bfr[nt][2 * q], bfr[nt][2 * q + 1]);
        }
        const float s0 = dev::f16_bits_to_f32(static_cast<std::uint16_t>(cur.s[0] >> (16 * b)));
        const float s1 = dev::f16_bits_to_f32(static_cast<std::uint16_t>(cur.s[1] >> (16 * b)));
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          acc[nt][0] = fmaf(partial[nt][0], s0, acc[nt][0]);
          acc[nt][1] = fmaf(partial[nt][1], s0, acc[nt][1]);
          acc[nt][2] = fmaf(partial[nt][2], s1, acc[nt][2]);
          acc[nt][3] = fmaf(partial[nt][3], s1, acc[nt][3]);
        }
      }
      cur = nxt;
    }

    // C fragment: c0, c1 at (row g, columns 2t4, 2t4 + 1), c2, c3 at row g + 8.
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      red[warp][g][8 * nt + 2 * t4] = acc[nt][0];
      red[warp][g][8 * nt + 2 * t4 + 1] = acc[nt][1];
      red[warp][g + 8][8 * nt + 2 * t4] = acc[nt][2];
      red[warp][g + 8][8 * nt + 2 * t4 + 1] = acc[nt][3];
    }
    __syncthreads();
    TOut* const out = static_cast<TOut*>(a.out);
    for (int i = static_cast<int>(threadIdx.x); i < kRows * static_cast<int>(a.m); i += static_cast<int>(blockDim.x)) {
      const int r = i % kRows, m = i / kRows;  // rows fastest: coalesced stores
      if (n0 + r >= a.n) continue;
      float total = 0.0f;
#pragma unroll
      for (int p = SPLIT - 1; p >= 0; --p) {  // smallest part first
        float s = 0.0f;
        for (int wq = 0; wq < warps; ++wq) s += red[wq][r][m * SPLIT + p];  // fixed order
        total += s;
      }
      if (total != total) total = dev::ieee_dot<TIn>(a, m, n0 + r);  // Inf in a bf16 split: NaN parts
      out[m * a.out_ld + n0 + r] = dev::from_f32<TOut>(total);
    }
    __syncthreads();  // red is reused by the next tile
  }
}

template <class TIn, class TOut, class TM, int SPLIT, int NT>
void launch_one(const Tq2Args& a, const Tq2StreamConfig& c, StreamHandle stream) {
  const std::int64_t tiles = (a.n + kRows - 1) / kRows;
  const unsigned grid = static_cast<unsigned>(tiles < 0x7fffffff ? tiles : 0x7fffffff);
  tq2_stream_kernel<TIn, TOut, TM, SPLIT, NT>
      <<<grid, static_cast<unsigned>(c.warps * 32), 0, stream>>>(a, tq2_input_vec16(a), tq2_codes_vec16(a));
}

template <class TIn, class TOut, class TM, int SPLIT>
void launch_nt(const Tq2Args& a, const Tq2StreamConfig& c, StreamHandle stream) {
  if constexpr (SPLIT == 3) {
    if (c.n_tiles == 1) launch_one<TIn, TOut, TM, SPLIT, 1>(a, c, stream);
    else if (c.n_tiles == 2) launch_one<TIn, TOut, TM, SPLIT, 2>(a, c, stream);
    else launch_one<TIn, TOut, TM, SPLIT, 6>(a, c, stream);
  } else {
    if (c.n_tiles == 1) launch_one<TIn, TOut, TM, SPLIT, 1>(a, c, stream);
    else launch_one<TIn, TOut, TM, SPLIT, 2>(a, c, stream);
  }
}

}  // namespace

void launch_tq2_stream(const Tq2Args& a, StreamHandle stream) {
  // Default SM count (132) on purpose: callers name the kernel with tq2_stream_kernel_name(args),
  // and the configuration launched must be the one that name describes.
  const auto c = tq2_stream_config(a);
  if (!c) fail(ErrorCode::Internal, "tq2_stream: arguments outside the kernel's contract (m ", a.m, ")");
  const std::string name = tq2_stream_kernel_name(a);
  const bool same_out = a.out_dtype == a.in_dtype;
  switch (a.in_dtype) {
    case DType::F32:
      if (c->splits == 3) launch_nt<float, float, __nv_bfloat16, 3>(a, *c, stream);
      else launch_nt<float, float, __nv_bfloat16, 1>(a, *c, stream);
      break;
    case DType::F16:
      if (same_out) launch_nt<__half, __half, __half, 1>(a, *c, stream);
      else launch_nt<__half, float, __half, 1>(a, *c, stream);
      break;
    default:
      if (same_out) launch_nt<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, 1>(a, *c, stream);
      else launch_nt<__nv_bfloat16, float, __nv_bfloat16, 1>(a, *c, stream);
      break;
  }
  cuda_dense::host::check_launch(name);
}

}  // namespace llmm::cuda_ternary
