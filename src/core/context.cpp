// Context: device, stream, arch info, lazily-created handles, launch recorder.
#include "llmm/context.hpp"

#include <map>
#include <thread>

#include "llmm/error.hpp"
#include "runtime.hpp"

namespace llmm {

struct Context::Impl {
  ArchInfo arch;
  StreamHandle stream = nullptr;
  bool owns_stream = false;
  void* cublaslt = nullptr;
  void* cublaslt_ws = nullptr;
  LaunchRecorder* recorder = nullptr;
  std::map<std::string, std::shared_ptr<void>> caches;

  ~Impl() {
    caches.clear();  // cached plans may refer to the handle
    if (cublaslt_ws) detail::cuda_free(cublaslt_ws, arch.device_index);
    if (cublaslt) detail::cublaslt_destroy(cublaslt);
    if (owns_stream) detail::cuda_destroy_stream(arch.device_index, stream);
  }
};

bool built_with_cuda() noexcept { return detail::cuda_built(); }
bool cuda_available() noexcept { return detail::cuda_device_present(); }

Context::Context(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Context::Context(Context&&) noexcept = default;
Context& Context::operator=(Context&&) noexcept = default;
Context::~Context() = default;

Context Context::cpu(int threads) {
  auto impl = std::make_unique<Impl>();
  unsigned hw = std::thread::hardware_concurrency();
  impl->arch.cpu_threads = threads > 0 ? threads : (hw ? static_cast<int>(hw) : 1);
  return Context(std::move(impl));
}

Context Context::cuda(int device) {
  auto impl = std::make_unique<Impl>();
  detail::cuda_fill_arch(device, impl->arch);
  impl->stream = detail::cuda_create_stream(device);
  impl->owns_stream = true;
  return Context(std::move(impl));
}

Context Context::cuda(int device, StreamHandle stream) {
  auto impl = std::make_unique<Impl>();
  detail::cuda_fill_arch(device, impl->arch);
  impl->stream = stream;
  return Context(std::move(impl));
}

DeviceKind Context::kind() const { return impl_->arch.kind; }
const ArchInfo& Context::arch() const { return impl_->arch; }
StreamHandle Context::stream() const { return impl_->stream; }

void Context::set_stream(StreamHandle stream) {
  if (impl_->owns_stream) fail(ErrorCode::InvalidArgument, "Context::set_stream: this context owns its stream");
  if (!is_cuda()) fail(ErrorCode::InvalidArgument, "Context::set_stream: not a CUDA context");
  impl_->stream = stream;
}

void Context::synchronize() const {
  if (is_cuda()) detail::cuda_sync(impl_->arch.device_index, impl_->stream);
}

void* Context::cublaslt_handle() {
  if (!is_cuda()) fail(ErrorCode::Unsupported, "Context::cublaslt_handle: not a CUDA context");
  if (!impl_->cublaslt) impl_->cublaslt = detail::cublaslt_create(impl_->arch.device_index);
  return impl_->cublaslt;
}

void* Context::cublaslt_workspace() {
  if (!is_cuda()) fail(ErrorCode::Unsupported, "Context::cublaslt_workspace: not a CUDA context");
  if (!impl_->cublaslt_ws) impl_->cublaslt_ws = detail::cuda_alloc(kCublasLtWorkspaceBytes, impl_->arch.device_index);
  return impl_->cublaslt_ws;
}

std::shared_ptr<void>& Context::cache_slot(const std::string& key) { return impl_->caches[key]; }

void Context::set_launch_recorder(LaunchRecorder* r) { impl_->recorder = r; }
LaunchRecorder* Context::launch_recorder() const { return impl_->recorder; }

void Context::check_launchable(const std::string& kernel) const {
  if (impl_->recorder && impl_->recorder->before_launch) impl_->recorder->before_launch(kernel);
}

void Context::record_launch(LaunchRecorder& r, const std::string& kernel, LaunchRanges ranges) {
  r.launched.push_back(kernel);
  r.records.push_back(LaunchRecord{kernel, std::move(ranges)});
}

ByteRange byte_range(const View& v) {
  return v.empty() ? ByteRange{v.data, 0} : ByteRange{v.data, static_cast<std::size_t>(v.byte_extent())};
}

}  // namespace llmm
