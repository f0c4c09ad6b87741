// llmm-bench: runs benchmark suites and prints one row per case (JSON lines with --json).
//   llmm-bench --suite NAME|all [--json FILE] [--device auto|cpu|cuda] [--quick] [--decode] [--prefill] [--filter TEXT] [--list]
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "llmm/context.hpp"
#include "llmm/error.hpp"
#include "suites.hpp"
#include "system_info.hpp"

using namespace llmm;
using namespace llmm::bench;

namespace {

int usage(const char* argv0, bool help = false) {
  std::fprintf(help ? stdout : stderr,
               "usage: %s --suite NAME|all [--json FILE] [--device auto|cpu|cuda] [--quick] [--decode] [--prefill] "
               "[--filter TEXT] [--list] [--help]\n",
               argv0);
  if (!help) return 2;
  std::printf(
      "Benchmarks llmm's ops against a baseline measured in the same run (cuBLASLt, cuBLAS loops), one row\n"
      "per case; on a machine without a GPU the suites run the float64 CPU reference instead.\n"
      "  --suite NAME   smoke (default), dense, moe, ternary, or all (--list names them)\n"
      "  --json FILE    also write every row to FILE as JSON Lines (one JSON object per line, the first\n"
      "                 the system record); scripts/bench-summary reads it\n"
      "  --device D     auto (default: cuda where there is a GPU), cpu or cuda\n"
      "  --quick        fewer shapes per suite\n"
      "  --decode       the ternary suite's decode rows only (m <= 16), the moe suite's m <= 32\n"
      "  --prefill      the dense suite's large GEMMs, the MoE suite's m >= 16, the ternary suite's m > 16 only\n"
      "  --filter TEXT  dense, MoE and ternary: only the cases whose name contains TEXT, or one of its\n"
      "                 '|'-separated parts (e.g. \"_m16|_m64\")\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string suite = "smoke", json, device = "auto", filter;
  bool quick = false, decode_only = false, prefill_only = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error("missing value after " + a);
      return argv[++i];
    };
    try {
      if (a == "--suite") suite = value();
      else if (a == "--json") json = value();
      else if (a == "--device") device = value();
      else if (a == "--quick") quick = true;
      else if (a == "--decode") decode_only = true;
      else if (a == "--prefill") prefill_only = true;
      else if (a == "--filter") filter = value();
      else if (a == "--help" || a == "-h") return usage(argv[0], true);
      else if (a == "--list") {
        for (const auto& s : kSuites) std::printf("%-10s %s\n", s.name, s.what);
        return 0;
      } else return usage(argv[0]);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "llmm-bench: %s\n", e.what());
      return usage(argv[0]);
    }
  }
  if (device != "auto" && device != "cpu" && device != "cuda") return usage(argv[0]);
  bool use_cuda = device == "cuda" || (device == "auto" && cuda_available());
  try {
    Context ctx = use_cuda ? Context::cuda(0) : Context::cpu();
    Reporter out(json);
    out.system_line(system_line(ctx), system_json(ctx));
    BenchEnv env{ctx, out, quick, device_label(ctx), decode_only, prefill_only, filter};
    bool ran = false;
    for (const auto& s : kSuites) {
      if (suite == "all" || suite == s.name) {
        s.run(env);
        ran = true;
      }
    }
    if (!ran) {
      std::fprintf(stderr, "llmm-bench: unknown suite '%s' (try --list)\n", suite.c_str());
      return 2;
    }
    std::printf("\n%zu rows\n", out.rows().size());
  } catch (const Error& e) {
    std::fprintf(stderr, "llmm-bench: %s error: %s\n", std::string(error_code_name(e.code())).c_str(), e.what());
    return 1;
  }
  return 0;
}
