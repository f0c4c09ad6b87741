// Context: where ops run (the CPU reference backend or one CUDA device + stream), what the
// device is (ArchInfo), lazily-created library handles, and a launch recorder for tests.
#pragma once
#include <cstdint>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "llmm/view.hpp"

struct CUstream_st;  // cudaStream_t without the CUDA headers

namespace llmm {

using StreamHandle = CUstream_st*;

struct ArchInfo {
  DeviceKind kind = DeviceKind::CPU;
  int device_index = 0;
  std::string name = "cpu";
  int cc_major = 0, cc_minor = 0;  // 9, 0 on H100/H200
  int sm_count = 0;
  std::int64_t l2_bytes = 0;
  std::int64_t smem_per_block_optin = 0;  // max dynamic shared memory a block may ask for
  std::int64_t global_mem_bytes = 0;
  int sm_clock_khz = 0, mem_clock_khz = 0, mem_bus_width_bits = 0;
  int cpu_threads = 1;  // threads the CPU backend uses

  int cc() const { return cc_major * 10 + cc_minor; }
  bool is_hopper() const { return kind == DeviceKind::CUDA && cc_major == 9; }
};

// A byte range [begin, begin + bytes) of device memory (host memory on the CPU backend).
struct ByteRange {
  const void* begin = nullptr;
  std::size_t bytes = 0;
  friend bool operator==(const ByteRange& a, const ByteRange& b) { return a.begin == b.begin && a.bytes == b.bytes; }
};
// The bytes one launch reads and writes: the seed's capture ranges, for a graph or dependency
// builder that orders work by them. Conservative hulls (a strided view's range includes its
// padding); every byte the kernel touches lies inside them, and writes lie inside the op's
// outputs, scratch and workspace.
struct LaunchRanges {
  std::vector<ByteRange> reads, writes;
};
struct LaunchRecord {
  std::string kernel;
  LaunchRanges ranges;
};
// The hull of a view: [data, data + byte_extent) (empty views give an empty range).
ByteRange byte_range(const View& v);

// Records every kernel an op launches, in order (capture mode): `launched` has the names,
// `records` the same launches with their byte ranges; a refused call records nothing. Tests
// install one to assert routes and that refused calls launch nothing. `before_launch` may throw
// to inject a launch failure; ops must call `Context::check_launchable` for every kernel of a
// route before launching any.
struct LaunchRecorder {
  std::vector<std::string> launched;
  std::vector<LaunchRecord> records;
  std::function<void(const std::string& kernel)> before_launch;
};

// True when the library was built with CUDA and a CUDA device is visible.
bool cuda_available() noexcept;
// True when the library was built with CUDA support at all.
bool built_with_cuda() noexcept;

// A Context is used by one thread at a time (ops append to its caches and stream); give each
// thread its own, or serialise. Contexts on one device may share a stream.
class Context {
 public:
  static Context cpu(int threads = 0);  // 0: std::thread::hardware_concurrency()
  // CUDA device with a stream this context creates and owns (non-blocking).
  static Context cuda(int device = 0);
  // CUDA device with the caller's stream (borrowed; nullptr is the legacy default stream).
  static Context cuda(int device, StreamHandle stream);

  Context(Context&&) noexcept;
  Context& operator=(Context&&) noexcept;
  ~Context();

  DeviceKind kind() const;
  bool is_cuda() const { return kind() == DeviceKind::CUDA; }
  const ArchInfo& arch() const;
  StreamHandle stream() const;
  // Rebinds a borrowed-stream CUDA context to another of the caller's streams (e.g. the current
  // framework stream of each call). Refused for contexts that own their stream.
  void set_stream(StreamHandle stream);
  void synchronize() const;  // waits for the stream (no-op on CPU)

  // cuBLASLt handle (cublasLtHandle_t as void*) and its workspace, created on first use (so the
  // first call that routes to cuBLASLt should happen outside CUDA-graph capture). CUDA only.
  void* cublaslt_handle();
  void* cublaslt_workspace();
  static constexpr std::size_t kCublasLtWorkspaceBytes = 32u << 20;

  // A per-context slot for an op's cached state (e.g. resolved cuBLASLt plans), keyed by name.
  std::shared_ptr<void>& cache_slot(const std::string& key);

  void set_launch_recorder(LaunchRecorder* r);
  LaunchRecorder* launch_recorder() const;
  // Called by ops for each kernel of a route, before the first launch: lets an installed
  // recorder refuse (inject a failure) while nothing has been enqueued yet.
  void check_launchable(const std::string& kernel) const;
  // Called by ops right after each kernel launch, with a function giving its byte ranges
  // (LaunchRanges), called only while a recorder is installed: free when capture is off.
  template <class RangesFn>
  void note_launch(const std::string& kernel, RangesFn&& ranges) const {
    if (LaunchRecorder* r = launch_recorder()) record_launch(*r, kernel, ranges());
  }

  struct Impl;

 private:
  static void record_launch(LaunchRecorder& r, const std::string& kernel, LaunchRanges ranges);
  explicit Context(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmm
