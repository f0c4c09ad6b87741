// Uses the installed headers and library: the seed's b=2, m=2, n=4, k=3 ramp product.
#include <cstdio>
#include <vector>

#include <llmm/llmm.hpp>

int main() {
  std::vector<float> a(12), b(24), c(16);
  for (int i = 0; i < 12; ++i) a[i] = static_cast<float>(i);
  for (int i = 0; i < 24; ++i) b[i] = static_cast<float>(i);
  llmm::cpu::matmul({llmm::View::contiguous(a.data(), llmm::DType::F32, {2, 2, 3}),
                     llmm::View::contiguous(b.data(), llmm::DType::F32, {2, 3, 4})},
                    llmm::View::contiguous(c.data(), llmm::DType::F32, {2, 2, 4}));
  const float want[16] = {20, 23, 26, 29, 56, 68, 80, 92, 344, 365, 386, 407, 488, 518, 548, 578};
  for (int i = 0; i < 16; ++i)
    if (c[i] != want[i]) {
      std::printf("llmm_consumer: c[%d] = %g, want %g\n", i, c[i], want[i]);
      return 1;
    }
  static_assert(LLMM_VERSION == LLMM_VERSION_MAJOR * 10000 + LLMM_VERSION_MINOR * 100 + LLMM_VERSION_PATCH);
  std::printf("llmm_consumer: ok (llmm %s, built %s CUDA)\n", LLMM_VERSION_STRING, llmm::built_with_cuda() ? "with" : "without");
  return 0;
}
