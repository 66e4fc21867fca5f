// Shared pieces of the kvshrink command-line tool: subcommand registration, common options,
// UTF-8 streaming output.
#pragma once
#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "runtime/engine.h"

namespace kvs::cli {

// Each subcommand file defines one of these and registers it in main.cpp.
void register_generate(CLI::App& app);
void register_tokenize(CLI::App& app);  // also `detokenize`
void register_info(CLI::App& app);
void register_bench(CLI::App& app);
void register_make_model(CLI::App& app);
void register_convert(CLI::App& app);
void register_run(CLI::App& app);
void register_compress(CLI::App& app);  // also `ask`
void register_presses(CLI::App& app);
void register_bench_press(CLI::App& app);
void register_eval(CLI::App& app);  // cmd_eval.cpp
void register_calibrate(CLI::App& app);
void register_serve(CLI::App& app);  // cmd_serve.cpp
void register_inspect(CLI::App& app);  // cmd_inspect.cpp
void register_logits(CLI::App& app);   // cmd_logits.cpp
void register_bench_memory(CLI::App& app);  // cmd_bench_memory.cpp
void register_bench_kernels(CLI::App& app);  // cmd_bench_kernels.cpp
void register_devices(CLI::App& app);       // cmd_devices.cpp

// Options every model-running command takes.
struct EngineOptions {
  std::string model;
  int threads = 0;
  std::string kv_type = "f16";  // KV cache storage (--kv-type): f16 (default) or f32
  int page_tokens = 32;
  int batch = 512;
  void add(CLI::App* cmd, bool model_required = true);
  EngineParams params() const;  // validates kv_type etc.; throws kvs::Error
};

// Token ids from text such as "[1, 15043, 3186]", "1 15043 3186" or "1,15043": integers separated
// by commas, whitespace and brackets, each below n_vocab. Throws naming `what` and the offending text.
std::vector<int32_t> parse_token_ids(const std::string& s, int32_t n_vocab, const std::string& what);

// Writes bytes to stdout, holding back an incomplete trailing UTF-8 sequence until it completes.
class Utf8Stream {
 public:
  void write(const std::string& bytes);
  void flush();  // emits whatever is pending (invalid or not)

 private:
  std::string pending_;
};

std::string format_bytes(size_t b);  // "12.3 MiB (12897484 B)"

// ---- option checks --------------------------------------------------------------------------
// Run at the start of a command, before any model is loaded: a bad value is a kvs::Error
// ("--temp must be a finite number in [0, 100], got nan") and exit code 1. CLI11 itself accepts
// nan/inf for doubles and wraps negative text into unsigned options, hence these.

// Largest token count a length option takes (prompt / context lengths of bench, bench-press,
// eval): 2^20 tokens.
inline constexpr int kMaxTokensOption = 1 << 20;
// Thread counts above this multiple of the hardware threads are capped (with a warning).
inline constexpr int kMaxThreadsPerCore = 4;

void require_number(const std::string& opt, double v, double lo, double hi, bool lo_open = false, bool hi_open = false);
void require_int(const std::string& opt, int64_t v, int64_t lo, int64_t hi);
template <typename T>
void require_numbers(const std::string& opt, const std::vector<T>& vs, double lo, double hi, bool lo_open = false) {
  for (const T& v : vs) require_number(opt, static_cast<double>(v), lo, hi, lo_open);
}
template <typename T>
void require_ints(const std::string& opt, const std::vector<T>& vs, int64_t lo, int64_t hi) {
  for (const T& v : vs) require_int(opt, v, lo, hi);
}
// n (0 = all cores) capped at kMaxThreadsPerCore x the hardware threads, with a warning naming
// `opt`; negative n refused.
int capped_threads(const std::string& opt, int n);
// CLI11 check for unsigned options: refuses a leading '-' (CLI11 would wrap "-1" to 2^64-1).
CLI::Validator non_negative_integer();

// Output paths, checked before long work starts. A file output: the target, if it exists, must
// be a regular file (it is replaced) and its folder must exist. A folder output: the target, if
// it exists, must be a folder, and no existing ancestor may be anything but a folder.
void check_output_file(const std::string& opt, const std::string& path);
void check_output_dir(const std::string& opt, const std::string& path);

}  // namespace kvs::cli
