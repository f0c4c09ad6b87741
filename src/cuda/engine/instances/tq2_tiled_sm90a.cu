// Ternary instance of the Hopper tiled engine (gemm_tq2's tiled_sm90 route): the dense row map,
// the f16 activation by TMA, TQ2_0_g128 codes and transposed scales by TMA decoded by the
// consumers into register fragments (Tq2Weights), each activation row's power-of-two scale undone
// in the epilogue.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/engine/launch.hpp"
#include "cuda/engine/tiled/launch_tiled_sm90.cuh"
#include "cuda/engine/tiled/tiled_sm90a.cuh"

namespace llmm::engine {
namespace {

using cuda_ternary::Tq2Args;

struct Split {
  float* slots;
  std::uint32_t* counters;
};

template <int BN, class OutT>
void launch_bn(const Tq2Args& g, const float* alpha, const TiledSm90Launch& l, const Split& sk, StreamHandle stream,
               const std::string& name) {
  const CUtensorMap tm_x = tiled_sm90_operand_map(g.in, g.m, g.k, g.in_ld, 0, 1, BN, 2, name.c_str());
  DenseRowsParams p;
  p.m = static_cast<int>(g.m), p.n = static_cast<int>(g.n), p.k = static_cast<int>(g.k);
  p.batch = 1;
  p.tiles_tok = static_cast<int>((g.m + BN - 1) / BN);
  p.tiles_feat = static_cast<int>((g.n + kTiledBM - 1) / kTiledBM);
  p.total_tiles = static_cast<int>(l.tiles);
  p.out = g.out;
  p.out_ld = g.out_ld, p.out_batch = 0;
  p.vec_ok = reinterpret_cast<std::uintptr_t>(g.out) % (4 * sizeof(OutT)) == 0 && g.out_ld % 4 == 0;
  p.vec8_ok = reinterpret_cast<std::uintptr_t>(g.out) % 16 == 0 && g.out_ld * sizeof(OutT) % 16 == 0;
  if (l.parts > 1) {
    p.parts = l.parts, p.kb_per_part = l.kb_per_part;
    p.partials = sk.slots, p.counters = sk.counters;
  }
  Tq2WeightsParams w;
  {
    const std::uint64_t dims[2] = {static_cast<std::uint64_t>(g.k / 4), static_cast<std::uint64_t>(g.n)};
    const std::uint32_t box[2] = {kTiledBK / 4, kTiledBM};
    w.codes = cuda_common::make_tensor_map_u8_2d(g.codes, dims, static_cast<std::uint64_t>(g.k / 4), box, false,
                                                 name.c_str());
  }
  {
    const std::uint64_t row = static_cast<std::uint64_t>(g.scales_t_ld) * 2;
    const std::uint64_t dims[2] = {row, static_cast<std::uint64_t>(g.k / 128)};
    const std::uint32_t box[2] = {kTiledBM * 2, 1};
    w.scales = cuda_common::make_tensor_map_u8_2d(g.scales_t, dims, row, box, false, name.c_str());
  }
  w.group_rows = g.n, w.group_cols = (g.n + 7) / 8 * 8, w.n = static_cast<int>(g.n);
  w.alpha = alpha, w.alpha_per_row = true;  // tq2_rowscale's 2^e of each row
  if (l.parts > 1) {  // the tensor maps are made: the first stream operation
    const cudaError_t e = cudaMemsetAsync(sk.counters, 0, tiled_sm90_tq2_split_counter_bytes(l), stream);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      fail(ErrorCode::Cuda, name, ": cannot zero the split counters: ", cudaGetErrorString(e));
    }
  }
  launch_tiled_sm90(&tiled_sm90_kernel<BN, false, OutT, DenseRows, Tq2Weights>, tm_x, tm_x, tm_x, p, w, l, stream, name);
}

template <class OutT>
void launch_t(const Tq2Args& g, const float* alpha, const TiledSm90Launch& l, const Split& sk, StreamHandle stream,
              const std::string& name) {
  switch (l.bn) {
    case 256: launch_bn<256, OutT>(g, alpha, l, sk, stream, name); break;
    case 128: launch_bn<128, OutT>(g, alpha, l, sk, stream, name); break;
    case 64: launch_bn<64, OutT>(g, alpha, l, sk, stream, name); break;
    default: fail(ErrorCode::Internal, name, ": no instance with bn ", l.bn);
  }
}

}  // namespace

void launch_tiled_sm90_tq2(const Tq2Args& g, const float* alpha, const TiledSm90Launch& l, StreamHandle stream,
                           float* slots, std::uint32_t* counters) {
  const std::string name = tiled_sm90_tq2_kernel_name(g.out_dtype, l.bn, l.parts);
  const std::int64_t kblocks = g.k / kTiledBK;
  if (l.parts > 1 && (slots == nullptr || counters == nullptr || l.kb_per_part < 1 || l.tiles * l.parts > 0x7fffffff ||
                      static_cast<std::int64_t>(l.parts - 1) * l.kb_per_part >= kblocks ||
                      static_cast<std::int64_t>(l.parts) * l.kb_per_part < kblocks))
    fail(ErrorCode::Internal, name, ": K parts outside the instance's contract (parts ", l.parts, ", ", l.kb_per_part,
         " k-blocks each, ", kblocks, " in all)");
  if (g.in_dtype != DType::F16 || g.k % 128 != 0 || g.m < 1 || g.n < 1 || g.n > (1 << 30) - 128 || l.tiles < 1 ||
      l.tiles > 0x7fffffff || reinterpret_cast<std::uintptr_t>(g.in) % 16 != 0 || g.in_ld % 8 != 0 ||
      g.scales_t == nullptr || g.scales_t_ld < g.n || g.scales_t_ld % 8 != 0 ||
      reinterpret_cast<std::uintptr_t>(g.codes) % 16 != 0 || reinterpret_cast<std::uintptr_t>(g.scales_t) % 16 != 0)
    fail(ErrorCode::Internal, name, ": arguments outside the instance's contract");
  switch (g.out_dtype) {
    case DType::F32: launch_t<float>(g, alpha, l, {slots, counters}, stream, name); break;
    case DType::F16: launch_t<__half>(g, alpha, l, {slots, counters}, stream, name); break;
    case DType::BF16: launch_t<__nv_bfloat16>(g, alpha, l, {slots, counters}, stream, name); break;
    default: fail(ErrorCode::Internal, name, ": unsupported output dtype ", dtype_name(g.out_dtype));
  }
}

}  // namespace llmm::engine
