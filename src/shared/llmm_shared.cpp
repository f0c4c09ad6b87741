// The translation unit of libllmm.so (llmm::llmm_shared, src/CMakeLists.txt): the library's code
// comes whole from the static libllmm.a it links; this file only gives the target a source.
#include "llmm/llmm.hpp"
