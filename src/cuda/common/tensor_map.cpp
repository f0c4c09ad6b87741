#include "cuda/common/tensor_map.hpp"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <mutex>

#include "llmm/error.hpp"

namespace llmm::cuda_common {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_fn(const char* who) {
  static std::once_flag once;
  static void* fn = nullptr;
  static cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  std::call_once(once, [] {
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &status) != cudaSuccess)
      fn = nullptr;
  });
  if (!fn || status != cudaDriverEntryPointSuccess)
    fail(ErrorCode::Cuda, who, ": the driver has no cuTensorMapEncodeTiled (needs CUDA 12 or newer)");
  return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
}

}  // namespace

CUtensorMap make_tensor_map_u8_2d(const void* base, const std::uint64_t (&dims)[2], std::uint64_t row_stride,
                                  const std::uint32_t (&box)[2], bool swizzle128, const char* who) {
  CUtensorMap map{};
  const cuuint64_t gdim[2] = {dims[0], dims[1]};
  const cuuint64_t gstride[1] = {row_stride};
  const cuuint32_t bdim[2] = {box[0], box[1]};
  const cuuint32_t estride[2] = {1, 1};
  const CUresult r = encode_fn(who)(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), gdim, gstride, bdim,
                                    estride, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                    swizzle128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) fail(ErrorCode::Cuda, who, ": cuTensorMapEncodeTiled failed (CUresult ", static_cast<int>(r), ")");
  return map;
}

CUtensorMap make_tensor_map_3d(const void* base, int elem_bytes, const std::uint64_t (&dims)[3], const std::uint64_t (&strides)[2],
                              const std::uint32_t (&box)[3], bool swizzle128, const char* who) {
  if (elem_bytes != 1 && elem_bytes != 2 && elem_bytes != 4) fail(ErrorCode::Internal, who, ": tensor maps of ", elem_bytes, "-byte elements");
  CUtensorMap map{};
  const cuuint64_t gdim[3] = {dims[0], dims[1], dims[2]};
  const cuuint64_t gstride[2] = {strides[0], strides[1]};
  const cuuint32_t bdim[3] = {box[0], box[1], box[2]};
  const cuuint32_t estride[3] = {1, 1, 1};
  const CUtensorMapDataType type = elem_bytes == 1   ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                   : elem_bytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_UINT16
                                                     : CU_TENSOR_MAP_DATA_TYPE_UINT32;
  const CUresult r = encode_fn(who)(&map, type, 3, const_cast<void*>(base), gdim, gstride, bdim, estride,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    fail(ErrorCode::Cuda, who, ": cuTensorMapEncodeTiled failed (CUresult ", static_cast<int>(r), ", dims ", dims[0],
         " x ", dims[1], " x ", dims[2], ", strides ", strides[0], ", ", strides[1], " bytes, ", elem_bytes, "-byte elements)");
  return map;
}

CUtensorMap make_tensor_map_3d_sw128(const void* base, int elem_bytes, const std::uint64_t (&dims)[3],
                                     const std::uint64_t (&strides)[2], const std::uint32_t (&box)[3], const char* who) {
  if (elem_bytes != 2 && elem_bytes != 4) fail(ErrorCode::Internal, who, ": tensor maps of ", elem_bytes, "-byte elements");
  return make_tensor_map_3d(base, elem_bytes, dims, strides, box, true, who);
}

CUtensorMap make_tensor_map_u8_3d(const void* base, const std::uint64_t (&dims)[3], const std::uint64_t (&strides)[2],
                                  const std::uint32_t (&box)[3], const char* who) {
  return make_tensor_map_3d(base, 1, dims, strides, box, false, who);
}

}  // namespace llmm::cuda_common
