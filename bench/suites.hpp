// Suite registry: each family adds `run_<family>(BenchEnv&)` here and in suites.cpp.
#pragma once
#include <string>

#include "llmm/context.hpp"
#include "report.hpp"

namespace llmm::bench {

struct BenchEnv {
  Context& ctx;     // CUDA context on a GPU machine, else the CPU backend
  Reporter& out;
  bool quick = false;
  std::string device_label;  // "cuda:0 NVIDIA H200" or "cpu"
  // --decode: the ternary suite runs only its decode rows (m <= 16) and the MoE suite only m <= 32,
  // for short GPU sessions.
  bool decode_only = false;
  // --prefill: the dense suite runs only its large GEMMs and the MoE suite only M >= 16 (the
  // tiled engine's rows), for short GPU sessions.
  bool prefill_only = false;
  // --filter TEXT: the dense, MoE and ternary suites run only the cases whose name contains TEXT
  // (profiling), or one of its '|'-separated parts ("_m16|_m64").
  std::string filter;
  bool skip(const std::string& name) const {
    if (filter.empty()) return false;
    for (std::size_t at = 0;;) {
      const std::size_t bar = filter.find('|', at);
      const std::string part = filter.substr(at, bar == std::string::npos ? std::string::npos : bar - at);
      if (!part.empty() && name.find(part) != std::string::npos) return false;
      if (bar == std::string::npos) return true;
      at = bar + 1;
    }
  }
};

void run_smoke(BenchEnv& env);
void run_dense(BenchEnv& env);
void run_ternary(BenchEnv& env);
void run_moe(BenchEnv& env);
// Part of the ternary suite (suite_ternary_experts.cpp): matmul_id_tq2 against f16 experts.
void run_tq2_experts(BenchEnv& env);
// suite_host.cpp: the host time of one C++ call against cuBLASLt's own (a GPU is needed).
void run_host(BenchEnv& env);

struct SuiteEntry {
  const char* name;
  void (*run)(BenchEnv&);
  const char* what;
};
inline constexpr SuiteEntry kSuites[] = {
    {"smoke", run_smoke, "CPU reference matmuls; on a GPU: copy bandwidth and cuBLASLt GEMM ceilings"},
    {"dense", run_dense, "llmm::matmul vs cuBLASLt: skinny decode weights x M 1..16, large prefill GEMMs"},
    {"moe", run_moe, "matmul_id (direct, grouped incl. map) vs a per-expert cuBLASLt loop on pre-permuted rows"},
    {"ternary", run_ternary, "gemm_tq2 vs cuBLAS on the dequantized weight (SGEMM, TF32, bf16): decode and DiT prefill"},
    {"host", run_host, "host microseconds of one C++ call (matmul, gemm_tq2) vs a resolved cuBLASLt call's"},
};

}  // namespace llmm::bench
