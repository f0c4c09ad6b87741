// Dense FP8 instance of the Hopper tiled engine (matmul_fp8's tiled_sm90 route, W8A8): the dense
// row map over x's e4m3 codes (quantized per token and 128 channels into the workspace, or the
// caller's) by TMA, FP8 weights [n, k] by TMA, both in 128-k boxes with the 128-byte swizzle,
// the tokens' scales beside them (Fp8MmaWeights: e4m3 wgmmas, f32 promotion every 128 k).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common/tensor_map.hpp"
#include "cuda/engine/launch.hpp"
#include "cuda/engine/tiled/launch_tiled_sm90.cuh"
#include "cuda/engine/tiled/tiled_sm90a.cuh"

namespace llmm::engine {
namespace {

constexpr int kBN = 128;

template <class OutT>
void launch_t(const detail::Fp8LaunchArgs& a, const Fp8ActTiles& x, const TiledSm90Launch& l, StreamHandle stream,
              const std::string& name) {
  const std::uint64_t k = static_cast<std::uint64_t>(a.k), rows = static_cast<std::uint64_t>(x.rows);
  Fp8MmaWeightsParams w;
  {
    const std::uint64_t dims[3] = {k, static_cast<std::uint64_t>(a.n), 1};
    const std::uint64_t ld = static_cast<std::uint64_t>(a.w_ld);
    const std::uint64_t strides[2] = {ld, ld * static_cast<std::uint64_t>(a.n)};
    const std::uint32_t box[3] = {kTiledW8a8BK, kTiledBM, 1};
    w.codes = cuda_common::make_tensor_map_3d(a.codes, 1, dims, strides, box, true, name.c_str());
  }
  {
    const std::uint64_t kblocks = (k + 127) / 128, ld = static_cast<std::uint64_t>(x.scales_ld);
    const std::uint64_t dims[3] = {rows, kblocks, 1};
    const std::uint64_t strides[2] = {ld * 4, ld * 4 * kblocks};
    const std::uint32_t box[3] = {kBN + Fp8MmaWeights::kScaleBoxExtra, 1, 1};
    w.x_scales = cuda_common::make_tensor_map_3d(x.scales, 4, dims, strides, box, false, name.c_str());
  }
  w.scales = a.scales, w.scale_group_stride = 0, w.kind = static_cast<int>(a.kind);
  w.scale_cols = static_cast<int>((a.k + 127) / 128), w.n = static_cast<int>(a.n);
  CUtensorMap tm_x;
  {
    const std::uint64_t ld = static_cast<std::uint64_t>(x.codes_ld);
    const std::uint64_t dims[3] = {k, rows, 1};
    const std::uint64_t strides[2] = {ld, ld * rows};
    const std::uint32_t box[3] = {kTiledW8a8BK, kBN, 1};
    tm_x = cuda_common::make_tensor_map_3d(x.codes, 1, dims, strides, box, true, name.c_str());
  }
  DenseRowsParams p;
  p.m = static_cast<int>(a.m), p.n = static_cast<int>(a.n), p.k = static_cast<int>(a.k), p.batch = 1;
  p.tiles_tok = static_cast<int>((a.m + kBN - 1) / kBN);
  p.tiles_feat = static_cast<int>((a.n + kTiledBM - 1) / kTiledBM);
  p.total_tiles = static_cast<int>(l.tiles);
  p.out = a.y, p.out_ld = a.y_ld, p.out_batch = 0;
  p.vec_ok = reinterpret_cast<std::uintptr_t>(a.y) % (4 * sizeof(OutT)) == 0 && a.y_ld % 4 == 0;
  p.vec8_ok = reinterpret_cast<std::uintptr_t>(a.y) % 16 == 0 && a.y_ld * sizeof(OutT) % 16 == 0;
  launch_tiled_sm90(&tiled_sm90_kernel<kBN, true, OutT, DenseRows, Fp8MmaWeights>, tm_x, tm_x, tm_x, p, w, l, stream, name);
}

}  // namespace

void launch_tiled_sm90_dense_w8a8(const detail::Fp8LaunchArgs& a, const Fp8ActTiles& x, const TiledSm90Launch& l,
                                  StreamHandle stream) {
  const std::string name = tiled_sm90_dense_w8a8_kernel_name(a.dtype);
  if (a.m == 0 || a.n == 0) return;
  if (a.k < 16 || a.k % 16 != 0 || a.w_ld % 16 != 0 || reinterpret_cast<std::uintptr_t>(a.codes) % 16 != 0 || !a.scales ||
      x.rows < a.m || x.scales_ld < x.rows || x.scales_ld % 4 != 0 || x.codes_ld < a.k || x.codes_ld % 16 != 0 ||
      reinterpret_cast<std::uintptr_t>(x.codes) % 16 != 0 || reinterpret_cast<std::uintptr_t>(x.scales) % 16 != 0 || !l.w8a8 || l.bn != kBN || l.tiles != ((a.m + kBN - 1) / kBN) * ((a.n + 127) / 128) ||
      a.m > 0x7ffffeff || a.n > 0x7ffffeff || a.k > 0x7ffffeff)
    fail(ErrorCode::Internal, name, ": arguments outside the instance's contract");
  if (a.dtype == DType::F32) launch_t<float>(a, x, l, stream, name);
  else if (a.dtype == DType::BF16) launch_t<__nv_bfloat16>(a, x, l, stream, name);
  else if (a.dtype == DType::F16) launch_t<__half>(a, x, l, stream, name);
  else fail(ErrorCode::Internal, name, ": unsupported dtype ", dtype_name(a.dtype));
}

}  // namespace llmm::engine
