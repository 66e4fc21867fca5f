// `kvshrink bench --press NAME --keep R` (issue 14: decode speed on a compressed long context):
// each decode context is compressed after its prefill, as `kvshrink compress` does, before the
// timed steps; the table's `kv held` shrinks and the header names the press and keep ratio. Bad
// --keep values and unknown presses are refused before the model is loaded. Also the KV type
// default (f16) as the CLI reports it, and a .kvc written with --kv-type f32 answering under the
// default. On the in-repo testbed model.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>

#include "cli_process.h"
#include "runtime/test_util.h"

namespace kvs {
namespace {

namespace fs = std::filesystem;

std::string testbed_model() { return std::string(KVS_SOURCE_DIR) + "/testbed/models/v7s1/model-f16.gguf"; }

class BenchCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(test::kvshrink_binary())) GTEST_FAIL() << test::kvshrink_binary() << " is missing: build kvshrink first";
  }
};

// The cells of the table row whose test cell starts with `test` ({} when there is none).
std::vector<std::string> row(const std::string& out, const std::string& test) {
  std::istringstream ss(out);
  std::string line;
  while (std::getline(ss, line)) {
    if (line.rfind("| ", 0) != 0) continue;
    std::vector<std::string> cells;
    std::string cell;
    std::istringstream ls(line.substr(1));
    while (std::getline(ls, cell, '|')) {
      const size_t a = cell.find_first_not_of(' '), b = cell.find_last_not_of(' ');
      cells.push_back(a == std::string::npos ? "" : cell.substr(a, b - a + 1));
    }
    if (cells.size() > 1 && cells[1].rfind(test, 0) == 0) return cells;
  }
  return {};
}

// "12.0 KiB (12288 B)" -> 12288.
long long bytes_of(const std::string& cell) {
  std::smatch m;
  if (std::regex_search(cell, m, std::regex(R"(\((\d+) B\))")) || std::regex_search(cell, m, std::regex(R"(^(\d+) B$)")))
    return std::stoll(m[1]);
  ADD_FAILURE() << "no byte count in '" << cell << "'";
  return -1;
}

// The header JSON of a .kvc file: "KVSC", u32 version, u64 header length, header (cache_file.h).
nlohmann::json header_of(const std::string& path) {
  const std::string data = test::read_all(path);
  uint64_t n = 0;
  if (data.size() < 16 || data.compare(0, 4, "KVSC") != 0) return {};
  std::memcpy(&n, data.data() + 8, 8);
  return nlohmann::json::parse(data.substr(16, n));
}

test::ProcResult bench(const std::vector<std::string>& extra, const std::string& dir, const std::string& tag) {
  std::vector<std::string> a = {"bench", "-m", testbed_model(), "-t", "2", "-p", "16", "-d", "0,512", "-n", "4"};
  a.insert(a.end(), extra.begin(), extra.end());
  return test::run_kvshrink(a, dir, tag, 120);
}

TEST_F(BenchCli, PressAndKeepShrinkTheDecodeContext) {
  test::TempDir d("bench_cli_press");
  auto full = bench({}, d.str(), "full");
  ASSERT_EQ(full.exit_code, 0) << full.err;
  EXPECT_NE(full.out.find("kv type f16"), std::string::npos) << full.out;  // the default KV type
  EXPECT_EQ(full.out.find("compressed after prefill"), std::string::npos) << full.out;
  const auto full_row = row(full.out, "decode tg4 @ ctx 512");
  ASSERT_EQ(full_row.size(), 5u) << full.out;
  const long long full_held = bytes_of(full_row[4]);

  // Query-agnostic presses that need nothing but the prefill.
  for (const std::string press : {"snapkv", "knorm", "streaming_llm", "keydiff"}) {
    SCOPED_TRACE(press);
    auto r = bench({"--press", press, "--keep", "0.1"}, d.str(), press);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("press " + press + ", keep 0.1"), std::string::npos) << r.out;
    const auto cells = row(r.out, "decode tg4 @ ctx 512");
    ASSERT_EQ(cells.size(), 6u) << r.out;  // + the "kv kept" column
    const long long held = bytes_of(cells[4]);
    EXPECT_GT(held, 0);
    EXPECT_LT(held, full_held / 3) << "kv held with " << press << " keep 0.1: " << cells[4] << ", full: " << full_row[4];
    // Exactly round(0.1 x 512) = 51 of the 512 context slots per head (uniform allocators).
    EXPECT_EQ(cells[5], "0.100") << r.out;  // 51 / 512 = 0.0996
    // ctx 0: nothing to compress, the row runs on an empty cache as before.
    const auto zero = row(r.out, "decode tg4 @ ctx 0");
    ASSERT_EQ(zero.size(), 6u) << r.out;
    EXPECT_EQ(zero[5], "1.000");
  }
  // --opt and --window reach the press (the same options as `kvshrink compress`).
  auto w = bench({"--press", "snapkv", "--keep", "0.25", "--window", "8", "--opt", "allocator=pyramid"}, d.str(), "opts");
  ASSERT_EQ(w.exit_code, 0) << w.err;
  EXPECT_NE(w.out.find("press snapkv, keep 0.25"), std::string::npos) << w.out;
  EXPECT_NE(w.out.find("press built: allocator pyramid, sinks 0, window 8, options: allocator=pyramid"), std::string::npos)
      << w.out;
  // The pyramid allocator shapes the layers' budgets but keeps the total: 0.25 of the slots.
  EXPECT_EQ(row(w.out, "decode tg4 @ ctx 512").at(5), "0.250") << w.out;
  // --kv-type f32 doubles the full cache's bytes.
  auto f32 = bench({"--kv-type", "f32"}, d.str(), "f32");
  ASSERT_EQ(f32.exit_code, 0) << f32.err;
  EXPECT_NE(f32.out.find("kv type f32"), std::string::npos);
  EXPECT_EQ(bytes_of(row(f32.out, "decode tg4 @ ctx 512").at(4)), 2 * full_held);
}

TEST_F(BenchCli, BadKeepAndUnknownPressAreRefused) {
  test::TempDir d("bench_cli_errors");
  auto expect_error = [&](const std::vector<std::string>& extra, const std::string& want, const std::string& tag) {
    auto r = bench(extra, d.str(), tag);
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_NE(r.err.find("kvshrink: error: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("| threads |"), std::string::npos) << "nothing measured before the error: " << r.out;
  };
  expect_error({"--press", "snapkv", "--keep", "0"}, "--keep must be a ratio in (0, 1]", "keep0");
  expect_error({"--press", "snapkv", "--keep", "1.5"}, "--keep must be a ratio in (0, 1]", "keep15");
  expect_error({"--press", "snapkv", "--keep", "nan"}, "--keep must be a ratio in (0, 1]", "keepnan");
  expect_error({"--press", "no_such_press", "--keep", "0.1"}, "no_such_press", "unknown");
  expect_error({"--press", "snapkv"}, "snapkv", "nokeep");  // a fixed-budget press needs a keep ratio
  expect_error({"--keep", "0.1"}, "give --press too", "nopress");  // no silent full-cache run
}

// A .kvc written with --kv-type f32 records it and answers under the default (f16) KV type.
TEST_F(BenchCli, F32ContextFileAnswersUnderTheDefaultKvType) {
  test::TempDir d("kv_type_cli");
  const std::string ctx = std::string(KVS_SOURCE_DIR) + "/eval/examples/needle_context.txt";
  const std::string q = "What is the special magic number for quiet-harbor mentioned in the provided text? The special "
                        "magic number for quiet-harbor mentioned in the provided text is";
  for (const std::string type : {"f32", ""}) {
    SCOPED_TRACE(type);
    const std::string file = d / ("c" + type + ".kvc");
    std::vector<std::string> args = {"compress", "-m", testbed_model(), "-t", "2", "--press", "keydiff", "--keep", "0.4",
                                     "--context", ctx, "--question-template", "\n{question}", "-o", file};
    if (!type.empty()) args.insert(args.end(), {"--kv-type", type});
    auto r = test::run_kvshrink(args, d.str(), "compress" + type, 120);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(header_of(file).at("dtype"), type.empty() ? "f16" : type) << "the file records its KV type";
    r = test::run_kvshrink({"ask", file, "-t", "2", "-n", "8", q}, d.str(), "ask" + type, 120);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("4071589"), std::string::npos) << r.out;  // the testbed model retrieves the needle
  }
}

}  // namespace
}  // namespace kvs
