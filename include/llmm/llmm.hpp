// Umbrella header: the whole public API of llmm.
#pragma once
#include "llmm/buffer.hpp"
#include "llmm/checked.hpp"
#include "llmm/context.hpp"
#include "llmm/dtype.hpp"
#include "llmm/error.hpp"
#include "llmm/matmul.hpp"
#include "llmm/moe.hpp"
#include "llmm/reference.hpp"
#include "llmm/ternary.hpp"
#include "llmm/ternary_formats.hpp"
#include "llmm/version.hpp"
#include "llmm/view.hpp"
