// The `kvshrink` binary with KVzip and Compactor on stories260K: `presses` lists them with their
// options; compress (.kvc) + ask; calibrate --press kvzip then the head level; --quality with and
// without a calibration. The binary is the one built beside these tests (KVS_BINARY_DIR).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "kernels/ops.h"
#include "kvcache/cache_file.h"
#include "model/model.h"
#include "press/budget/calibrated.h"
#include "runtime/calibration_store.h"
#include "runtime/kvc_meta.h"
#include "test_util.h"

namespace kvs {
namespace {

namespace fs = std::filesystem;

struct CliRun {
  int code = -1;
  std::string out;
};

// Runs kvshrink with `args` (already shell-quoted), stdout and stderr together.
CliRun kvshrink(const std::string& args, const test::TempDir& dir, const std::string& env = "") {
  const std::string bin = (fs::path(KVS_BINARY_DIR) / "tools" / "kvshrink").string();
  if (!fs::exists(bin)) {
    ADD_FAILURE() << bin << " is missing: build the kvshrink target first";
    return {};
  }
  const std::string log = dir / "out.txt";
  const std::string cmd = env + " '" + bin + "' " + args + " > '" + log + "' 2>&1 < /dev/null";
  const int rc = std::system(cmd.c_str());
  std::ifstream f(log);
  std::stringstream ss;
  ss << f.rdbuf();
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, ss.str()};
}

const std::string kContext =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw "
    "a big red ball under a tree. She ran to the ball and kicked it high into the sky.";

TEST(KvzipCompactorCli, PressesListsBothWithTheirOptions) {
  test::TempDir dir("cli_presses");
  const CliRun r = kvshrink("presses", dir);
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* s : {"kvzip", "compactor", "level=pair", "chunk=2048", "softmax=chunk", "lambda=0.3",
                        "sketch_dim=48", "allocator=global_layer", "global", "quality"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
}

TEST(KvzipCompactorCli, CompressAskCalibrateAndQuality) {
  test::TempDir dir("cli_kvzip_compactor");
  { std::ofstream(dir / "ctx.txt") << kContext; }
  const std::string m = "-m '" + test::stories_gguf() + "' -t 2";
  const std::string env = "KVSHRINK_CALIB_DIR='" + (dir / "calib") + "'";
  // KVzip: compress to a .kvc, answer from it.
  CliRun r = kvshrink("compress " + m + " --press kvzip --keep 0.3 --context '" + (dir / "ctx.txt") + "' -o '" + (dir / "c.kvc") + "'", dir, env);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("kvzip"), std::string::npos) << r.out;
  // The repeat pass's precision as resolved on this machine (precision=auto: bf16 only with
  // AVX512_BF16) is in the header; a value other than f32 / bf16 is refused when loading.
  {
    nlohmann::json hdr = read_cache_header(dir / "c.kvc");
    ASSERT_TRUE(hdr.contains("score_precision")) << hdr.dump();
    EXPECT_EQ(hdr["score_precision"].get<std::string>(), kernels::native_bf16() ? "bf16" : "f32");
    EXPECT_NO_THROW(check_cache_meta(hdr, "c.kvc"));
    hdr["score_precision"] = "f64";
    EXPECT_THROW(check_cache_meta(hdr, "c.kvc"), Error);
  }
  r = kvshrink("ask " + m + " '" + (dir / "c.kvc") + "' -n 4 ' Lily'", dir, env);
  EXPECT_EQ(r.code, 0) << r.out;
  // Head level: refused before calibration, then runs.
  r = kvshrink("run " + m + " --press kvzip --opt level=head --keep 0.5 --context '" + (dir / "ctx.txt") + "' --question ' Lily' -n 4", dir, env);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("kvshrink calibrate --press kvzip"), std::string::npos) << r.out;
  r = kvshrink("calibrate " + m + " --data " + test::test_data("eval") + " --press kvzip --samples 1 --tokens 64 --opt text=pg19 --no-progress", dir, env);
  ASSERT_EQ(r.code, 0) << r.out;
  r = kvshrink("run " + m + " --press kvzip --opt level=head --keep 0.5 --context '" + (dir / "ctx.txt") + "' --question ' Lily' -n 4", dir, env);
  EXPECT_EQ(r.code, 0) << r.out;
  // Compactor with a quality target: refused without a fit, then picks its own keep ratio.
  r = kvshrink("run " + m + " --press compactor --quality 0.9 --context '" + (dir / "ctx.txt") + "' --question ' Lily' -n 4", dir, env);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("--press quality --opt press=compactor"), std::string::npos) << r.out;
  ::setenv("KVSHRINK_CALIB_DIR", (dir / "calib").c_str(), 1);
  save_calibration(*Model::load(test::stories_gguf()), kQualityCalibration,
                   {{"fits", {{"compactor", {{"alpha", 0.3}, {"beta", -4.0}}}}}});
  ::unsetenv("KVSHRINK_CALIB_DIR");
  r = kvshrink("compress " + m + " --press compactor --quality 0.9 --context '" + (dir / "ctx.txt") + "' -o '" + (dir / "q.kvc") + "'", dir, env);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("chose"), std::string::npos) << r.out;
  EXPECT_FALSE(read_cache_header(dir / "q.kvc").contains("score_precision"));  // Compactor has no such choice
  r = kvshrink("ask " + m + " '" + (dir / "q.kvc") + "' -n 4 ' Lily'", dir, env);
  EXPECT_EQ(r.code, 0) << r.out;
  r = kvshrink("run " + m + " --press compactor --quality 0.9 --keep 0.5 --context '" + (dir / "ctx.txt") + "' --question ' Lily'", dir, env);
  EXPECT_EQ(r.code, 1) << r.out;  // a quality target replaces the keep ratio
}

}  // namespace
}  // namespace kvs
