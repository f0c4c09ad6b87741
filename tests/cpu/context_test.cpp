// CPU contexts, the launch recorder, and clear refusals where CUDA is absent.
#include <gtest/gtest.h>

#include "llmm/buffer.hpp"
#include "llmm/context.hpp"
#include "llmm/error.hpp"

using namespace llmm;

TEST(Context, CpuContext) {
  Context ctx = Context::cpu(3);
  EXPECT_EQ(ctx.kind(), DeviceKind::CPU);
  EXPECT_FALSE(ctx.is_cuda());
  EXPECT_EQ(ctx.arch().cpu_threads, 3);
  EXPECT_EQ(ctx.stream(), nullptr);
  ctx.synchronize();  // no-op on the CPU
  EXPECT_GE(Context::cpu().arch().cpu_threads, 1);
  EXPECT_THROW(ctx.cublaslt_handle(), Error);
  EXPECT_THROW(ctx.set_stream(nullptr), Error);  // only borrowed-stream CUDA contexts rebind
}

TEST(Context, LaunchRecorderRecordsAndCanRefuse) {
  Context ctx = Context::cpu();
  LaunchRecorder rec;
  int asked = 0;
  float buf[4] = {0, 0, 0, 0};
  auto ranges = [&] {
    ++asked;
    return LaunchRanges{{ByteRange{buf, 8}}, {ByteRange{buf + 2, 8}}};
  };
  ctx.note_launch("not recorded", ranges);  // no recorder installed: nothing happens, no ranges made
  EXPECT_EQ(asked, 0);
  ctx.set_launch_recorder(&rec);
  EXPECT_EQ(ctx.launch_recorder(), &rec);
  ctx.check_launchable("k1");  // no hook: accepted
  ctx.note_launch("k1", ranges);
  ctx.note_launch("k2", ranges);
  EXPECT_EQ(asked, 2);
  EXPECT_EQ(rec.launched, (std::vector<std::string>{"k1", "k2"}));
  ASSERT_EQ(rec.records.size(), 2u);
  EXPECT_EQ(rec.records[1].kernel, "k2");
  EXPECT_EQ(rec.records[1].ranges.reads, (std::vector<ByteRange>{{buf, 8}}));
  EXPECT_EQ(rec.records[1].ranges.writes, (std::vector<ByteRange>{{buf + 2, 8}}));
  EXPECT_EQ(byte_range(View::strided(buf, DType::F32, {2, 2}, {3, 1})), (ByteRange{buf, 20}));
  EXPECT_EQ(byte_range(View::strided(buf, DType::F32, {0, 2}, {0, 0})).bytes, 0u);
  rec.before_launch = [](const std::string& k) {
    if (k == "map") fail(ErrorCode::Cuda, "injected: cannot launch ", k);
  };
  EXPECT_NO_THROW(ctx.check_launchable("gemm"));
  try {
    ctx.check_launchable("map");
    ADD_FAILURE() << "injected failure not raised";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Cuda);
    EXPECT_STREQ(e.what(), "injected: cannot launch map");
  }
  ctx.set_launch_recorder(nullptr);
  EXPECT_NO_THROW(ctx.check_launchable("map"));
}

TEST(Context, CudaRefusedClearlyWithoutDevice) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is present: this test covers machines without one";
  try {
    Context::cuda(0);
    ADD_FAILURE() << "Context::cuda succeeded without a device";
  } catch (const Error& e) {
    EXPECT_TRUE(e.code() == ErrorCode::Cuda || e.code() == ErrorCode::Unsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("Context::cuda"), std::string::npos) << e.what();
  }
  EXPECT_THROW(DeviceBuffer(16), Error);
}

TEST(Error, CodeNamesAndMessages) {
  EXPECT_EQ(error_code_name(ErrorCode::OutOfMemory), "OutOfMemory");
  try {
    fail(ErrorCode::Unsupported, "op: value ", 12, " is smaller than ", 28);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    EXPECT_STREQ(e.what(), "op: value 12 is smaller than 28");
  }
}
