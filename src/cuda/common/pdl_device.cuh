// Programmatic dependent launch (PDL), device side; the host side is launch_pdl.cuh. One
// definition for every kernel that chains: the sm_90a engines (through bulk_copy_sm90.cuh) and
// the portable MoE kernels, for which these compile to nothing below sm_90.
#pragma once

namespace llmm::ptx {

// Blocks until the grids this one depends on (launched before it on the stream) have completed
// and their memory is visible. A no-op when the kernel was launched without the PDL attribute.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
// Lets the next grid on the stream (if launched with PDL) start its prologue now; its own
// grid_dependency_wait still waits for this grid to complete.
__device__ __forceinline__ void grid_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

}  // namespace llmm::ptx
