// Bad input to the `kvshrink` binary, one test per class (issue 17): each must end in exactly one
// line "kvshrink: error: ..." on stderr and exit code 1 — no crash, abort, uncaught exception or
// hang. The binary is the one built beside these tests (KVS_BINARY_DIR/tools/kvshrink).
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_process.h"
#include "kvcache/cache_file.h"
#include "test_util.h"

namespace kvs {
namespace {

namespace fs = std::filesystem;

std::string kvshrink() { return test::kvshrink_binary(); }
std::string slurp(const std::string& path) { return test::read_all(path); }

using CliRun = test::ProcResult;

// Runs kvshrink with `args` (stdin from /dev/null), killing it after `timeout_s` (cli_process.h).
CliRun run_cli(const std::vector<std::string>& args, const test::TempDir& dir, int timeout_s = 60) {
  return test::run_kvshrink(args, dir.str(), "cli", timeout_s);
}

std::string describe(const std::vector<std::string>& args, const CliRun& r) {
  std::string s = "kvshrink";
  for (const auto& a : args) s += " " + a;
  return s + "\n  exit " + std::to_string(r.exit_code) + ", signal " + std::to_string(r.signal) +
         (r.timed_out ? ", TIMED OUT" : "") + "\n  stderr: " + r.err;
}

// Exit code 1, and stderr is one line "kvshrink: error: ..." that contains `needle`.
void expect_clean_error(const std::vector<std::string>& args, const std::string& needle, const test::TempDir& dir,
                        int timeout_s = 60) {
  const CliRun r = run_cli(args, dir, timeout_s);
  const std::string what = describe(args, r);
  EXPECT_FALSE(r.timed_out) << what;
  EXPECT_EQ(r.signal, 0) << what;
  EXPECT_EQ(r.exit_code, 1) << what;
  EXPECT_EQ(r.err.rfind("kvshrink: error: ", 0), 0u) << what;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "not one line: " << what;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "expected '" << needle << "' in: " << what;
}

class CliHardening : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kvshrink())) FAIL() << kvshrink() << " is missing: build the kvshrink target first";
  }
  test::TempDir dir{"cli_hardening"};
  const std::string model = test::stories_gguf();
};

// Rewrites a .kvc header (the JSON between the fixed prefix and the body) with `edit` and
// recomputes the checksum, so that the schema — not the checksum — must reject the file.
template <class Edit>
void rewrite_kvc_header(const std::string& src, const std::string& dst, Edit&& edit) {
  const std::string b = slurp(src);
  ASSERT_GT(b.size(), 24u);
  uint64_t hlen;
  std::memcpy(&hlen, b.data() + 8, 8);
  nlohmann::json h = nlohmann::json::parse(b.substr(16, hlen));
  edit(h);
  const std::string hs = h.dump();
  std::string out = b.substr(0, 8);
  const uint64_t nlen = hs.size();
  out.append(reinterpret_cast<const char*>(&nlen), 8);
  out += hs;
  out += b.substr(16 + hlen, b.size() - 16 - hlen - 8);  // body, without the old checksum
  const uint64_t sum = cache_file_checksum(out.data(), out.size());
  out.append(reinterpret_cast<const char*>(&sum), 8);
  std::ofstream(dst, std::ios::binary) << out;
}

TEST_F(CliHardening, WrongTypedOrOutOfRangeKvcHeaderFields) {
  std::ofstream(dir / "ctx.txt") << "Once upon a time, there was a little girl named Lily. She loved to play outside.";
  const std::string kvc = dir / "ctx.kvc";
  const CliRun made = run_cli({"compress", "-m", model, "--press", "snapkv", "--keep", "0.5", "--context", dir / "ctx.txt",
                            "-o", kvc},
                           dir);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  // The untouched file (re-serialised header) still loads: the rewrite itself is sound.
  rewrite_kvc_header(kvc, dir / "same.kvc", [](nlohmann::json&) {});
  const CliRun ok = run_cli({"ask", dir / "same.kvc", "Who?", "-n", "2"}, dir);
  ASSERT_EQ(ok.exit_code, 0) << ok.err;

  struct Case {
    const char* key;
    nlohmann::json value;
    const char* needle;
  };
  const std::vector<Case> cases = {
      {"n_past", "x", "header field 'n_past' must be an integer, got string"},
      {"n_past", INT_MAX, "header field 'n_past' must be an integer in 0..1073741824, got 2147483647"},
      {"n_layer", "5", "header field 'n_layer' must be an integer, got string"},
      {"head_dim", -8, "header field 'head_dim' must be an integer in 1..4096"},
      {"dtype", 16, "header field 'dtype' must be a string, got integer"},
      {"model_fingerprint", 5, "header field 'model_fingerprint' must be a string, got integer"},
      {"model_path", nlohmann::json::array(), "header field 'model_path' must be a string, got array"},
      {"full_bytes", "1", "header field 'full_bytes' must be an integer, got string"},
      {"keep", 2.5, "header field 'keep' must be a finite number"},
      {"press_options", {1, 2}, "header field 'press_options' must be an array of strings"},
      {"seed", -1, "header field 'seed' must be an integer in 0.."},
      {"chat", "yes", "header field 'chat' must be a boolean, got string"},
      {"slots", 1, "slots"},
      {"context_ids", "1 2 3", "header field 'context_ids' must be an array of token ids or null"},
      {"context_ids", {1, 2, 3}, "header field 'context_ids' holds 3 ids, but 'context_tokens' is"},
      // A wrapped integer stored in the header goes through the same parser as --trigger.
      {"trigger", "every:4294967296", "trigger 'every:4294967296'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key);
    const std::string bad = dir / "bad.kvc";
    rewrite_kvc_header(kvc, bad, [&](nlohmann::json& h) { h[c.key] = c.value; });
    // Without -m the model path comes from the header; with -m the header is still checked.
    expect_clean_error({"ask", bad, "Who?", "-n", "2"}, c.needle, dir);
    expect_clean_error({"ask", "-m", model, bad, "Who?", "-n", "2"}, c.needle, dir);
  }
}

TEST_F(CliHardening, WrappedIntegersAreRefused) {
  expect_clean_error({"generate", "-m", model, "-p", "Once upon a time", "-n", "4", "--press", "snapkv", "--trigger",
                      "every:4294967296"},
                     "trigger 'every:4294967296'", dir);
  expect_clean_error({"generate", "-m", model, "-p", "Once upon a time", "-n", "4", "--press", "h2o", "--opt",
                      "decode_every=4294967296"},
                     "option decode_every must be an integer in 0..1000000, got '4294967296'", dir);
  expect_clean_error({"generate", "-m", model, "-p", "Once upon a time", "-n", "4", "--press", "snapkv", "--trigger",
                      "memory:1e999"},
                     "trigger 'memory:1e999'", dir);
}

TEST_F(CliHardening, NanOptionsAreRefused) {
  const std::vector<std::string> gen = {"generate", "-m", model, "-p", "Once upon a time", "-n", "4"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = gen;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  expect_clean_error(with({"--temp", "nan"}), "--temp must be a finite number", dir);
  expect_clean_error(with({"--min-p", "nan"}), "--min-p must be a finite number", dir);
  expect_clean_error(with({"--top-p", "inf"}), "--top-p must be a finite number", dir);
  expect_clean_error(with({"--press", "h2o", "--opt", "recent_fraction=nan"}),
                     "press 'h2o': option recent_fraction must be a finite number in [0, 1], got 'nan'", dir);
  expect_clean_error(with({"--press", "adakv", "--opt", "alpha=nan"}), "option alpha must be a finite number", dir);
  expect_clean_error(with({"--press", "pyramidkv", "--opt", "beta=nan"}), "option beta must be a finite number", dir);
  expect_clean_error({"bench-press", "-m", model, "--keep", "nan"}, "--keep must be a finite number", dir);
}

TEST_F(CliHardening, NonRegularModelPathsAreRefusedWithoutHanging) {
  const std::string fifo = dir / "model.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0) << std::strerror(errno);
  expect_clean_error({"info", fifo}, "but it is a FIFO", dir, 20);
  expect_clean_error({"generate", "-m", fifo, "-p", "hi"}, "but it is a FIFO", dir, 20);
  expect_clean_error({"ask", fifo, "Who?"}, "but it is a FIFO", dir, 20);  // a .kvc that is a FIFO
  expect_clean_error({"info", "/dev/zero"}, "character device", dir, 20);
  // A HF directory whose tokenizer.json is a FIFO.
  const CliRun conv = run_cli({"convert", "-m", model, "-o", dir / "hf", "--type", "f32"}, dir);
  ASSERT_EQ(conv.exit_code, 0) << conv.err;
  fs::remove(dir / "hf/tokenizer.json");
  ASSERT_EQ(::mkfifo((dir / "hf/tokenizer.json").c_str(), 0644), 0);
  expect_clean_error({"info", dir / "hf"}, "tokenizer.json: a model file must be a regular file, but it is a FIFO", dir, 20);
}

TEST_F(CliHardening, AbsurdHfConfigValuesNameTheField) {
  const CliRun conv = run_cli({"convert", "-m", model, "-o", dir / "hf", "--type", "f32"}, dir);
  ASSERT_EQ(conv.exit_code, 0) << conv.err;
  const std::string cfg_path = dir / "hf/config.json";
  const nlohmann::json cfg = nlohmann::json::parse(slurp(cfg_path));
  for (const auto& [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"max_position_embeddings", -1}, {"num_hidden_layers", 4294967301LL}, {"hidden_size", 0}, {"rms_norm_eps", -1}}) {
    SCOPED_TRACE(key);
    nlohmann::json c = cfg;
    c[key] = value;
    std::ofstream(cfg_path) << c.dump();
    expect_clean_error({"info", dir / "hf"}, "config.json: '" + key + "' must be", dir);
  }
}

TEST_F(CliHardening, OutputPathsAndLengthsCheckedBeforeWork) {
  std::ofstream(dir / "file.txt") << "not a folder";
  expect_clean_error({"eval", "-m", model, "-o", dir / "file.txt", "--samples", "1"},
                     "is a regular file; expected a directory", dir);
  expect_clean_error({"eval", "-m", model, "-o", dir / "file.txt/sub", "--samples", "1"}, "is a regular file", dir);
  // compress checks -o before it loads the model: a missing model is not reached.
  fs::create_directories(dir / "adir");
  expect_clean_error({"compress", "-m", dir / "no-such-model.gguf", "--context", dir / "file.txt", "-o", dir / "adir"},
                     "is a directory; expected a regular file", dir);
  expect_clean_error({"compress", "-m", dir / "no-such-model.gguf", "--context", dir / "file.txt", "-o",
                      dir / "missing-dir/out.kvc"},
                     "its directory", dir);
  expect_clean_error({"bench", "-m", model, "-p", "-5"}, "--prompt-lens must be an integer in 1..1048576, got -5", dir);
  expect_clean_error({"bench", "-m", model, "-p", "200000000"}, "--prompt-lens must be an integer in 1..1048576", dir);
  expect_clean_error({"bench", "-m", model, "-p", "8", "-d", "-1"}, "--ctx-lens", dir);
}

// bench-memory (the roofline's bandwidth): one JSON line with the passes it was asked for, and
// bad sizes refused before anything is allocated.
TEST_F(CliHardening, BenchMemoryReportsItsPassesAndRefusesBadSizes) {
  const std::vector<std::string> args = {"bench-memory", "-t", "2", "--mib", "8", "--reps", "3", "--json"};
  const CliRun r = run_cli(args, dir);
  ASSERT_EQ(r.exit_code, 0) << describe(args, r);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["threads"], 2);
  EXPECT_EQ(j["bytes"], 8 << 20);
  ASSERT_EQ(j["read_gbps"].size(), 3u);
  for (const auto& g : j["read_gbps"]) EXPECT_GT(g.get<double>(), 0.0);
  EXPECT_LE(j["read_gbps_median"].get<double>(), j["read_gbps_best"].get<double>());
  expect_clean_error({"bench-memory", "--mib", "0"}, "--mib must be an integer in 1..65536, got 0", dir);
  expect_clean_error({"bench-memory", "--mib", "70000"}, "--mib must be an integer in 1..65536", dir);
  expect_clean_error({"bench-memory", "--reps", "0"}, "--reps must be an integer in 1..1000", dir);
  expect_clean_error({"bench-memory", "-t", "-1"}, "-t must be >= 0", dir);
}

// bench-kernels (every weight type's decode mat-vec on every table the CPU runs): one JSON line per
// type asked for, each table's GB/s positive and its share of the bound consistent; bad options
// refused with their names.
TEST_F(CliHardening, BenchKernelsReportsEveryTableAndRefusesBadOptions) {
  const std::vector<std::string> args = {"bench-kernels", "-t", "1", "--mib", "1", "--reps", "2", "--types", "q4_k,Q6_K", "--json"};
  const CliRun r = run_cli(args, dir);
  ASSERT_EQ(r.exit_code, 0) << describe(args, r);
  std::vector<nlohmann::json> lines;
  size_t p = 0;
  while (p < r.out.size()) {
    const size_t q = std::min(r.out.find('\n', p), r.out.size());
    if (q > p) lines.push_back(nlohmann::json::parse(r.out.substr(p, q - p)));
    p = q + 1;
  }
  ASSERT_EQ(lines.size(), 2u) << r.out;
  EXPECT_EQ(lines[0]["type"], "q4_k");
  EXPECT_EQ(lines[1]["type"], "q6_k");
  for (const auto& j : lines) {
    const double bound = j["read_gbps_median"].get<double>();
    EXPECT_GT(bound, 0.0);
    ASSERT_FALSE(j["tables"].empty());
    for (const auto& [name, t] : j["tables"].items()) {
      ASSERT_EQ(t["gbps"].size(), 2u) << name;
      EXPECT_GT(t["gbps_median"].get<double>(), 0.0) << name;
      EXPECT_NEAR(t["share_of_bound"].get<double>(), t["gbps_median"].get<double>() / bound, 1e-9) << name;
    }
    EXPECT_TRUE(j["tables"].contains(j["fastest"].get<std::string>()));
  }
  expect_clean_error({"bench-kernels", "--types", "Q9_K"}, "--types: unknown weight type 'Q9_K'", dir);
  expect_clean_error({"bench-kernels", "--cols", "300"}, "--cols must be a multiple of 256", dir);
  expect_clean_error({"bench-kernels", "--mib", "0"}, "--mib must be an integer in 1..65536, got 0", dir);
  expect_clean_error({"bench-kernels", "--reps", "0"}, "--reps must be an integer in 1..1000", dir);
}

}  // namespace
}  // namespace kvs
