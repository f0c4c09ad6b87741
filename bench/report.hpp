// Benchmark rows: one per case, printed as a table and written as JSON lines.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace llmm::bench {

struct Row {
  std::string suite, name, route, kernel, dtype, precision = "-";
  std::int64_t batch = 1, m = 0, n = 0, k = 0;
  double us = 0, us_min = 0, us_max = 0;  // median and spread over repeats, per call
  double flops = 0;                        // floating-point operations of one call
  double bytes = 0;                        // bytes that must move in one call (the floor)
  std::string baseline = "-";
  double baseline_us = 0;                  // 0: no baseline for this row
  double max_abs_err = -1, max_rel_err = -1;  // -1: not checked
  std::string err_note;                    // how the error was measured ("full", "256 samples")
  std::string device;
  double tflops() const { return us > 0 ? flops / us * 1e-6 : 0; }
  double gbps() const { return us > 0 ? bytes / us * 1e-3 : 0; }
  double speedup() const { return us > 0 && baseline_us > 0 ? baseline_us / us : 0; }
};

class Reporter {
 public:
  explicit Reporter(std::string json_path);
  ~Reporter();
  // Prints `line`; with --json writes `record` (one JSON object) as the first line.
  void system_line(const std::string& line, const std::string& record);
  void add(const Row& r);        // prints the row at once and appends it to the JSON file
  const std::vector<Row>& rows() const { return rows_; }

 private:
  void header();
  std::FILE* json_ = nullptr;
  bool header_done_ = false;
  std::vector<Row> rows_;
};

}  // namespace llmm::bench
