// matmul_id's plan on a CUDA device: the kernels a call launches, in order, and why. A pure
// function of the validated arguments (pointer values included: the engine needs 16-byte
// alignment) and the device's arch, no CUDA headers: src/cuda/moe/dispatch.cpp launches exactly
// what it says and CPU tests check it.
//   Direct          moe_direct
//   GroupedPrefill  on sm_90 with 16-bit weights and input of one dtype (and the rest of
//                   tiled_sm90_moe_refusal) at m <= 16 (tiled_sm90_moe_fused_preferred): the
//                   Hopper engine alone, sorting the rows in each CTA (TiledSm90Fused);
//                   else moe_map (moe_map_count + moe_map_sort when the rows span sorting
//                   blocks), then the engine, after moe_stage_rows when the scratch can stage
//                   every routed row; else moe_grouped (mma.sync, any dtypes). With
//                   MoeArgs::out_sorted: moe_map, moe_stage_rows, the engine (never fused);
//                   with MoeArgs::presorted: the staged engine alone.
#pragma once
#include <string>
#include <vector>

#include "core/engine/tiled_sm90_plan.hpp"
#include "core/moe/moe_args.hpp"
#include "llmm/context.hpp"
#include "llmm/moe.hpp"

namespace llmm::cuda_moe {

struct MoePlan {
  MatmulIdRoute route = MatmulIdRoute::Direct;
  bool engine = false;  // grouped: the Hopper tiled engine (else moe_grouped)
  bool staged = false;  // engine: moe_stage_rows copies the routed rows into expert order first
  bool fused = false;   // engine: it sorts the routed rows itself (no moe_map, no staging): one kernel
  engine::TiledSm90Launch launch;    // engine only
  std::vector<std::string> kernels;  // launch order
  std::string reason;                // why this grouped kernel (empty for Direct)
};

// Throws Unsupported for dtypes no kernel takes and for a forced TiledSm90 the engine cannot take
// (naming why), InvalidArgument for more experts than the map kernel sorts. sm_count sizes the
// engine's persistent grid (0: 132).
MoePlan plan_matmul_id_cuda(const MoeArgs& g, MatmulIdRoute route, const ArchInfo& arch, MatmulIdGroupedKernel kernel);

}  // namespace llmm::cuda_moe
