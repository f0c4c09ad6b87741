#include "report.hpp"

#include <cmath>
#include <stdexcept>

namespace llmm::bench {
namespace {

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

std::string num(double v) {
  if (!std::isfinite(v)) return "null";
  char b[64];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

// A number for the table: 3 significant digits, so columns keep their width.
std::string short_num(double v) {
  if (!std::isfinite(v)) return "inf/nan";
  char b[64];
  std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}

}  // namespace

Reporter::Reporter(std::string json_path) {
  if (!json_path.empty()) {
    json_ = std::fopen(json_path.c_str(), "w");
    if (!json_) throw std::runtime_error("llmm-bench: cannot open " + json_path);
  }
}

Reporter::~Reporter() {
  if (json_) std::fclose(json_);
}

void Reporter::system_line(const std::string& line, const std::string& record) {
  std::printf("%s\n", line.c_str());
  if (json_) std::fprintf(json_, "%s\n", record.c_str());
}

// The table's text columns are cut to their width ("..." at the end); the JSON keeps them whole.
std::string cell(const std::string& s, std::size_t width) {
  return s.size() <= width ? s : s.substr(0, width - 3) + "...";
}

void Reporter::header() {
  std::printf("\n%-8s %-32s %-5s %-5s %5s %6s %6s %6s %-40s %10s %8s %8s %-20s %10s %7s %9s %9s\n", "suite", "case",
              "dtype", "prec", "batch", "m", "n", "k", "route/kernel", "us", "TFLOP/s", "GB/s", "baseline", "base_us",
              "speedup", "max_err", "rel_err");
  header_done_ = true;
}

void Reporter::add(const Row& r) {
  if (!header_done_) header();
  std::string rk = r.route == r.kernel || r.kernel.empty() ? r.route : r.route + "/" + r.kernel;
  std::printf("%-8s %-32s %-5s %-5s %5lld %6lld %6lld %6lld %-40s %10.2f %8.1f %8.1f %-20s %10s %7s %9s %9s\n",
              r.suite.c_str(), cell(r.name, 32).c_str(), r.dtype.c_str(), r.precision.c_str(),
              static_cast<long long>(r.batch), static_cast<long long>(r.m), static_cast<long long>(r.n),
              static_cast<long long>(r.k), cell(rk, 40).c_str(), r.us, r.tflops(), r.gbps(), cell(r.baseline, 20).c_str(),
              r.baseline_us > 0 ? short_num(r.baseline_us).c_str() : "-",
              r.speedup() > 0 ? short_num(r.speedup()).c_str() : "-",
              r.max_abs_err >= 0 ? short_num(r.max_abs_err).c_str() : "-",
              r.max_rel_err >= 0 ? short_num(r.max_rel_err).c_str() : "-");
  std::fflush(stdout);
  rows_.push_back(r);
  if (!json_) return;
  std::fprintf(json_,
               "{\"suite\": \"%s\", \"case\": \"%s\", \"route\": \"%s\", \"kernel\": \"%s\", \"dtype\": \"%s\", "
               "\"precision\": \"%s\", \"batch\": %lld, \"m\": %lld, \"n\": %lld, \"k\": %lld, \"us\": %s, "
               "\"us_min\": %s, \"us_max\": %s, \"tflops\": %s, \"gbps\": %s, \"baseline\": \"%s\", "
               "\"baseline_us\": %s, \"speedup\": %s, \"max_abs_err\": %s, \"max_rel_err\": %s, \"err_note\": \"%s\", "
               "\"device\": \"%s\"}\n",
               json_escape(r.suite).c_str(), json_escape(r.name).c_str(), json_escape(r.route).c_str(),
               json_escape(r.kernel).c_str(), r.dtype.c_str(), r.precision.c_str(), static_cast<long long>(r.batch),
               static_cast<long long>(r.m), static_cast<long long>(r.n), static_cast<long long>(r.k), num(r.us).c_str(),
               num(r.us_min).c_str(), num(r.us_max).c_str(), num(r.tflops()).c_str(), num(r.gbps()).c_str(),
               json_escape(r.baseline).c_str(), r.baseline_us > 0 ? num(r.baseline_us).c_str() : "null",
               r.speedup() > 0 ? num(r.speedup()).c_str() : "null",
               r.max_abs_err >= 0 ? num(r.max_abs_err).c_str() : "null",
               r.max_rel_err >= 0 ? num(r.max_rel_err).c_str() : "null", json_escape(r.err_note).c_str(),
               json_escape(r.device).c_str());
  std::fflush(json_);
}

}  // namespace llmm::bench
