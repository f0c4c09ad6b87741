// The context's grow-only device workspace of one op on the context's current stream: what an op
// needs between its kernels (no user scratch). Growing it during CUDA-graph capture is refused
// (memory cannot be allocated there), naming the op and the size to run once before capturing.
#pragma once
#include <cstddef>

#include "llmm/context.hpp"

namespace llmm::detail {

// `bytes` (256-byte aligned) of op's workspace on ctx's stream; nullptr for 0 bytes. The memory
// stays valid until the next call of the same op on the same stream asks for more.
char* stream_workspace(Context& ctx, const char* op, std::size_t bytes);

}  // namespace llmm::detail
