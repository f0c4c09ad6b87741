// CUDA runtime basics on a real device: arch info, buffers, streams. Skips without a GPU.
#include <vector>

#include <gtest/gtest.h>

#include "llmm/buffer.hpp"
#include "llmm/context.hpp"
#include "llmm/error.hpp"
#include "support/gpu.hpp"

using namespace llmm;

TEST(CudaRuntime, ArchInfoIsRead) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0);
  const ArchInfo& a = ctx.arch();
  EXPECT_EQ(a.kind, DeviceKind::CUDA);
  EXPECT_GT(a.sm_count, 0);
  EXPECT_GT(a.l2_bytes, 0);
  EXPECT_GE(a.smem_per_block_optin, 48 * 1024);
  EXPECT_GE(a.cc_major, 7);
  EXPECT_FALSE(a.name.empty());
  EXPECT_NE(ctx.stream(), nullptr);  // owned non-blocking stream
  EXPECT_NE(ctx.cublaslt_handle(), nullptr);
  EXPECT_EQ(ctx.cublaslt_handle(), ctx.cublaslt_handle());  // created once
  ctx.synchronize();
}

TEST(CudaRuntime, DeviceBufferRoundTrip) {
  LLMM_REQUIRE_CUDA();
  std::vector<int> host(1000), back(1000, -1);
  for (int i = 0; i < 1000; ++i) host[static_cast<std::size_t>(i)] = i * 7 - 3;
  DeviceBuffer d(host.size() * sizeof(int));
  EXPECT_NE(d.data(), nullptr);
  copy_to_device(d.data(), host.data(), host.size() * sizeof(int));
  copy_to_host(back.data(), d.data(), back.size() * sizeof(int));
  EXPECT_EQ(host, back);
  DeviceBuffer moved = std::move(d);
  EXPECT_EQ(d.data(), nullptr);
  EXPECT_NE(moved.data(), nullptr);
  PinnedBuffer p(4096);
  EXPECT_NE(p.data(), nullptr);
}

TEST(CudaRuntime, BorrowedStream) {
  LLMM_REQUIRE_CUDA();
  Context ctx = Context::cuda(0, nullptr);  // legacy default stream, borrowed
  EXPECT_EQ(ctx.stream(), nullptr);
  ctx.synchronize();
  EXPECT_THROW(Context::cuda(99), Error);
  Context owned = Context::cuda(0);
  EXPECT_THROW(owned.set_stream(nullptr), Error);
  ctx.set_stream(owned.stream());  // a borrowed context follows the caller's stream
  EXPECT_EQ(ctx.stream(), owned.stream());
}
