// Dense instance of the Hopper tiled engine: c[b] = x[b] . w[b]^T, both operands by TMA (3D
// maps [batch][rows][k]; a broadcast operand is one entry read for every batch). f16/bf16 on
// 16-bit wgmmas; f32 (Precision::Exact) as 3xTF32 through Tf32x3Weights.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <iterator>
#include <utility>

#include "cuda/engine/launch.hpp"
#include "cuda/engine/tiled/launch_tiled_sm90.cuh"
#include "cuda/engine/tiled/tiled_sm90a.cuh"

namespace llmm::engine {
namespace {

using cuda_dense::DenseArgs;

template <int BN, int BM>
DenseRowsParams rows_params(const DenseArgs& g, const TiledSm90Launch& l, std::size_t out_bytes) {
  DenseRowsParams p;
  p.m = static_cast<int>(g.m), p.n = static_cast<int>(g.n), p.k = static_cast<int>(g.k);
  p.batch = static_cast<int>(g.batch);
  p.tiles_tok = static_cast<int>((g.m + BN - 1) / BN);
  p.tiles_feat = static_cast<int>((g.n + BM - 1) / BM);
  p.total_tiles = static_cast<int>(l.tiles);
  p.w_batched = g.b_batch != 0 && g.batch > 1;
  p.x_batched = g.a_batch != 0 && g.batch > 1;
  p.out = g.c;
  p.out_ld = g.c_ld, p.out_batch = g.c_batch;
  p.vec_ok = reinterpret_cast<std::uintptr_t>(g.c) % (4 * out_bytes) == 0 && g.c_ld % 4 == 0 && g.c_batch % 4 == 0;
  p.vec8_ok = reinterpret_cast<std::uintptr_t>(g.c) % 16 == 0 && g.c_ld * out_bytes % 16 == 0 && g.c_batch * out_bytes % 16 == 0;
  return p;
}

template <int BN, class T, int BM = kTiledBM>
void launch_bn(const DenseArgs& g, const TiledSm90Launch& l, StreamHandle stream, const std::string& name) {
  constexpr int es = static_cast<int>(sizeof(T));
  const CUtensorMap tm_w = tiled_sm90_operand_map(g.b, g.n, g.k, g.b_ld, g.b_batch, g.batch, BM, es, name.c_str());
  const CUtensorMap tm_x = tiled_sm90_operand_map(g.a, g.m, g.k, g.a_ld, g.a_batch, g.batch, BN, es, name.c_str());
  DenseRowsParams p = rows_params<BN, BM>(g, l, sizeof(T));
  if constexpr (std::is_same_v<T, float>) {
    static_assert(BM == kTiledBM, "tall tiles are 16-bit only");
    Tf32x3Params wp;
    wp.x = static_cast<const float*>(g.a), wp.w = static_cast<const float*>(g.b);
    wp.x_ld = g.a_ld, wp.x_batch = g.a_batch, wp.w_ld = g.b_ld, wp.w_batch = g.b_batch;
    wp.k = static_cast<int>(g.k);
    launch_tiled_sm90(&tiled_sm90_kernel<BN, false, float, DenseRows, Tf32x3Weights>, tm_w, tm_x, tm_x, p, wp, l, stream,
                      name);
  } else {
    constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
    if constexpr (BM == kTiledTallBM)
      launch_tiled_sm90(&tiled_sm90_kernel<BN, bf16, T, DenseRowsTall>, tm_w, tm_x, tm_x, p, TmaWeightsParams{}, l, stream, name);
    else
      launch_tiled_sm90(&tiled_sm90_kernel<BN, bf16, T, DenseRows>, tm_w, tm_x, tm_x, p, TmaWeightsParams{}, l, stream, name);
  }
}

// The instance of l.bn among kWidths at BM rows (false: none has it).
template <class T, const auto& kWidths, int BM, std::size_t... I>
bool launch_width(const DenseArgs& g, const TiledSm90Launch& l, StreamHandle stream, const std::string& name,
                  std::index_sequence<I...>) {
  return ((l.bn == kWidths[I] && (launch_bn<kWidths[I], T, BM>(g, l, stream, name), true)) || ...);
}

// 16-bit: every width of kTiledDenseWidths, and at 256 rows of kTiledTallWidths; f32 (3xTF32):
// kTiledF32Widths.
template <class T>
void launch_t(const DenseArgs& g, const TiledSm90Launch& l, StreamHandle stream, const std::string& name) {
  bool launched = false;
  if constexpr (std::is_same_v<T, float>) {
    if (l.bm == kTiledBM)
      launched = launch_width<T, kTiledF32Widths, kTiledBM>(g, l, stream, name,
                                                            std::make_index_sequence<std::size(kTiledF32Widths)>{});
  } else if (l.bm == kTiledTallBM) {
    launched = launch_width<T, kTiledTallWidths, kTiledTallBM>(g, l, stream, name,
                                                               std::make_index_sequence<std::size(kTiledTallWidths)>{});
  } else if (l.bm == kTiledBM) {
    launched = launch_width<T, kTiledDenseWidths, kTiledBM>(g, l, stream, name,
                                                            std::make_index_sequence<std::size(kTiledDenseWidths)>{});
  }
  if (!launched) fail(ErrorCode::Internal, name, ": no instance with bn ", l.bn, " and bm ", l.bm);
}

}  // namespace

void launch_tiled_sm90_dense(const DenseArgs& g, const TiledSm90Launch& l, StreamHandle stream) {
  const std::string name = tiled_sm90_dense_kernel_name(g.dtype, l.bn, l.bm);
  if (g.a_trans || !g.b_trans || g.k < 1 || g.k > 0x7fffffff || l.tiles < 1 || l.tiles > 0x7fffffff ||
      (g.dtype == DType::F32 && !g.exact))
    fail(ErrorCode::Internal, name, ": arguments outside the instance's contract");
  if (g.dtype == DType::BF16) launch_t<__nv_bfloat16>(g, l, stream, name);
  else if (g.dtype == DType::F16) launch_t<__half>(g, l, stream, name);
  else if (g.dtype == DType::F32) launch_t<float>(g, l, stream, name);
  else fail(ErrorCode::Internal, name, ": unsupported dtype ", dtype_name(g.dtype));
}

}  // namespace llmm::engine
