#include "cli_common.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <thread>

#include "core/atomic_output.h"
#include "core/error.h"
#include "kvcache/kv_rows.h"

namespace kvs::cli {

void EngineOptions::add(CLI::App* cmd, bool model_required) {
  auto* m = cmd->add_option("-m,--model", model, "GGUF file or Hugging Face model directory");
  if (model_required) m->required();
  cmd->add_option("-t,--threads", threads, "threads (0 = all cores)")->check(CLI::Range(0, 1024));
  cmd->add_option("--kv-type", kv_type, "KV cache storage type: f16, f32, q8_0 or q4_0 (GGUF blocks of 32 along head_dim)")->capture_default_str();
  cmd->add_option("--page-tokens", page_tokens, "tokens per KV cache page")->capture_default_str()->check(CLI::Range(1, 4096));
  cmd->add_option("-b,--batch", batch, "prefill batch (tokens per forward step)")->capture_default_str()->check(CLI::Range(1, 1 << 20));
}

EngineParams EngineOptions::params() const {
  EngineParams p;
  p.n_threads = capped_threads("--threads", threads);
  DType t;
  if (!dtype_from_name(kv_type, &t) || !kv_dtype_supported(t))
    fail("--kv-type '{}' is not supported (expected {})", kv_type, kv_dtype_names());
  p.kv_dtype = t;
  p.page_tokens = page_tokens;
  p.n_batch = batch;
  return p;
}

namespace {
// Length of the longest prefix of s that does not end inside a UTF-8 sequence.
size_t complete_prefix(const std::string& s) {
  size_t n = s.size();
  // Look back at most 3 bytes for a lead byte whose sequence is incomplete.
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const unsigned char c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    size_t need = 1;
    if ((c & 0xE0) == 0xC0) need = 2;
    else if ((c & 0xF0) == 0xE0) need = 3;
    else if ((c & 0xF8) == 0xF0) need = 4;
    return back < need ? n - back : n;
  }
  return n;
}
}  // namespace

void Utf8Stream::write(const std::string& bytes) {
  pending_ += bytes;
  const size_t n = complete_prefix(pending_);
  if (n > 0) {
    std::fwrite(pending_.data(), 1, n, stdout);
    std::fflush(stdout);
    pending_.erase(0, n);
  }
}

void Utf8Stream::flush() {
  if (!pending_.empty()) std::fwrite(pending_.data(), 1, pending_.size(), stdout);
  pending_.clear();
  std::fflush(stdout);
}

void require_number(const std::string& opt, double v, double lo, double hi, bool lo_open, bool hi_open) {
  const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  if (!ok) fail("{} must be a finite number in {}{}, {}{}, got {}", opt, lo_open ? "(" : "[", lo, hi, hi_open ? ")" : "]", v);
}

void require_int(const std::string& opt, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) fail("{} must be an integer in {}..{}, got {}", opt, lo, hi, v);
}

int capped_threads(const std::string& opt, int n) {
  if (n < 0) fail("{} must be >= 0 (0 = all cores), got {}", opt, n);
  const int hw = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int cap = kMaxThreadsPerCore * hw;
  if (n > cap) {
    fmt::print(stderr, "warning: {} {} is more than {} x the {} hardware threads; using {}\n", opt, n, kMaxThreadsPerCore,
               hw, cap);
    return cap;
  }
  return n;
}

CLI::Validator non_negative_integer() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
          return "must be a non-negative decimal integer, got '" + s + "'";
        return {};
      },
      "UINT", "non-negative integer");
}

// The checks live in core/atomic_output (shared with the writers and the library); these keep the
// CLI's argument order.
void check_output_file(const std::string& opt, const std::string& path) { kvs::check_output_file(path, opt); }

void check_output_dir(const std::string& opt, const std::string& path) { kvs::check_output_dir(path, opt); }

std::string format_bytes(size_t b) {
  const double d = static_cast<double>(b);
  if (b >= (1ull << 30)) return fmt::format("{:.2f} GiB ({} B)", d / (1ull << 30), b);
  if (b >= (1ull << 20)) return fmt::format("{:.2f} MiB ({} B)", d / (1ull << 20), b);
  if (b >= (1ull << 10)) return fmt::format("{:.1f} KiB ({} B)", d / (1ull << 10), b);
  return fmt::format("{} B", b);
}

// Token ids from text such as "[1, 15043, 3186]", "1 15043 3186" or "1,15043": integers separated
// by commas, whitespace and brackets. Throws naming `what` and the offending text.
std::vector<int32_t> parse_token_ids(const std::string& s, int32_t n_vocab, const std::string& what) {
  std::vector<int32_t> out;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == ',' || c == '[' || c == ']' || std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < s.size() && s[j] != ',' && s[j] != '[' && s[j] != ']' && !std::isspace(static_cast<unsigned char>(s[j]))) ++j;
    const std::string w = s.substr(i, j - i);
    if (w.size() > 10 || w.find_first_not_of("0123456789") != std::string::npos)
      fail("{}: '{}' is not a token id (expected integers 0..{} separated by commas or spaces)", what, w, n_vocab - 1);
    const long long v = std::stoll(w);
    if (v >= n_vocab) fail("{}: token id {} is out of range for this vocabulary (0..{})", what, v, n_vocab - 1);
    out.push_back(static_cast<int32_t>(v));
    i = j;
  }
  return out;
}

}  // namespace kvs::cli
