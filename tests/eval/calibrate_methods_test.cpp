// The KVzip and quality calibrators on stories260K (it cannot retrieve; the point is that the
// calibrations run end to end and that what they store drives the presses): KVzip's head scores
// then compress whole heads with no scoring pass; the quality fit then picks r* for --quality.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "core/error.h"
#include "eval/calibrators.h"
#include "eval/runner.h"
#include "eval_test_util.h"
#include "press/budget/calibrated.h"
#include "press/math/calibration_curve.h"
#include "runtime/calibration_store.h"
#include "runtime/session.h"

namespace kvs::eval {
namespace {

struct CalibDir {
  test::TempDir dir;
  explicit CalibDir(const std::string& name) : dir(name) { ::setenv("KVSHRINK_CALIB_DIR", dir.str().c_str(), 1); }
  ~CalibDir() { ::unsetenv("KVSHRINK_CALIB_DIR"); }
};

EngineParams two_threads() {
  EngineParams ep;
  ep.n_threads = 2;
  return ep;
}

TEST(CalibrateKvzip, HeadScoresThenHeadLevelCompression) {
  CalibDir cd("calib_kvzip");
  const Model& m = test::stories();
  Engine e(m, two_threads());
  DataStore data(test::data_dir());
  CalibrateArgs a{m, e, data, 2, 96, {{"text", "pg19"}, {"chunk", "40"}}, 0, false};
  const nlohmann::json j = calibrator("kvzip").run(a);
  const auto& hs = j.at("head_scores");
  ASSERT_EQ(hs.size(), static_cast<size_t>(m.hp.n_layer));
  double mx = 0;
  for (const auto& row : hs) {
    ASSERT_EQ(row.size(), static_cast<size_t>(m.hp.n_head_kv));
    for (const auto& x : row) {
      EXPECT_GE(x.get<double>(), 0.0);
      EXPECT_LE(x.get<double>(), 1.0 + 1e-6);  // attention probabilities
      mx = std::max(mx, x.get<double>());
    }
  }
  EXPECT_GT(mx, 0.0);
  save_calibration(m, "kvzip", j);

  SpecArgs sa;
  sa.press = "kvzip";
  sa.options = {{"level", "head"}};
  sa.keep = 0.5;
  sa.window = 8;
  CompressedContext c(e, make_compression_spec(sa));
  const auto ctx = m.tokenizer->encode(
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her dog.", true,
      false);
  c.prefill(ctx);
  // Every head keeps everything or only its 4 sinks + 8 recent tokens, but the one on the boundary.
  const KvLayout& l = c.cache().layout();
  const int32_t n = static_cast<int32_t>(ctx.size());
  int partial = 0;
  for (int i = 0; i < l.n_heads_total(); ++i) {
    const int32_t len = c.cache().len(i / l.n_head_kv, i % l.n_head_kv);
    if (len != n && len != 12) ++partial;
  }
  EXPECT_LE(partial, 1);
  EXPECT_NEAR(c.keep_measured(), 0.5, 0.01);
}

TEST(CalibrateQuality, FitsAndDrivesTheKeepRatio) {
  CalibDir cd("calib_quality");
  const Model& m = test::stories();
  Engine e(m, two_threads());
  DataStore data(test::data_dir());
  CalibrateArgs a{m, e, data, 1, 256,
                  {{"press", "snapkv"}, {"window_size", "16"}, {"tasks", "niah"}, {"ratios", "0.25,0.6"}, {"depths", "0.2,0.8"}},
                  0, false};
  const nlohmann::json j = calibrator("quality").run(a);
  const auto& f = j.at("fits").at("snapkv:window_size=16");
  EXPECT_TRUE(std::isfinite(f.at("alpha").get<double>()));
  EXPECT_TRUE(std::isfinite(f.at("beta").get<double>()));
  EXPECT_EQ(f.at("n_triples").get<int>(), 4);  // 2 samples x 1 question x 2 ratios
  EXPECT_EQ(f.at("triples").size(), 4u);
  // The file holds what the fit used: a re-fit from fit_triples gives the stored (alpha, beta), and
  // their y is the floored ratio (NLL_full + 0.02) / (NLL_compressed + 0.02) of the raw rows (one
  // question per sample: the geometric mean is that ratio), at the keep measured.
  const auto& ft = f.at("fit_triples");
  ASSERT_EQ(ft.size(), 4u);
  std::vector<math::CalibTriple> refit;
  for (size_t i = 0; i < ft.size(); ++i) {
    const auto& raw = f.at("triples")[i];
    const double y = (raw.at("nll_full").get<double>() + 0.02) / (raw.at("nll_compressed").get<double>() + 0.02);
    EXPECT_NEAR(ft[i].at("y").get<double>(), y, 1e-12 * std::max(1.0, y)) << i;
    EXPECT_NEAR(ft[i].at("r").get<double>(), raw.at("keep_measured").get<double>(), 1e-6) << i;
    refit.push_back({ft[i].at("r").get<double>(), ft[i].at("nll_context").get<double>(), ft[i].at("y").get<double>()});
  }
  const math::CalibFit rf = math::fit_calibration(refit);
  EXPECT_DOUBLE_EQ(rf.alpha, f.at("alpha").get<double>());
  EXPECT_DOUBLE_EQ(rf.beta, f.at("beta").get<double>());
  save_calibration(m, kQualityCalibration, j);
  // A second press merges into the same file.
  CalibrateArgs b = a;
  b.options = {{"press", "keydiff"}, {"tasks", "niah"}, {"ratios", "0.5,0.9"}, {"depths", "0.5"}};
  const nlohmann::json j2 = calibrator("quality").run(b);
  EXPECT_TRUE(j2.at("fits").contains("snapkv:window_size=16"));
  EXPECT_TRUE(j2.at("fits").contains("keydiff"));
  save_calibration(m, kQualityCalibration, j2);

  SpecArgs sa;
  sa.press = "snapkv";
  sa.options = {{"window_size", "16"}};
  sa.quality = 0.8;
  CompressedContext c(e, make_compression_spec(sa));
  const auto ctx = m.tokenizer->encode("Once upon a time, there was a little girl named Lily. She loved to play.", true, false);
  c.prefill(ctx);
  double nll = 0;
  for (float x : c.context_nll()) nll += x;
  nll /= static_cast<double>(c.context_nll().size());
  const double r = quality_keep({f.at("alpha").get<double>(), f.at("beta").get<double>()}, nll, 0.8);
  ASSERT_TRUE(c.keep_chosen().has_value());
  EXPECT_NEAR(*c.keep_chosen(), r, 1e-9);
  EXPECT_THROW(calibrator("quality").run(CalibrateArgs{m, e, data, 1, 256, {{"tasks", "niah"}}, 0, false}), Error);
}

// The eval grid runs both presses, KVzip's head level and a calibrated Compactor (adaptive: one
// unit per sample, placed at the keep it chose).
TEST(EvalMethods, KvzipAndCompactorRunInTheGrid) {
  CalibDir cd("eval_methods");
  const Model& m = test::stories();
  save_calibration(m, kQualityCalibration, {{"fits", {{"compactor", {{"alpha", 0.2}, {"beta", -3.0}}}}}});
  std::vector<std::vector<double>> hs(static_cast<size_t>(m.hp.n_layer), std::vector<double>(static_cast<size_t>(m.hp.n_head_kv), 0.1));
  hs[0][0] = 0.9;
  save_calibration(m, "kvzip", {{"head_scores", hs}});
  test::TempDir out("eval_methods_out");
  EvalOptions o;
  o.tasks = {"niah", "squad_multi"};
  for (const char* p : {"kvzip", "kvzip:level=head", "kvzip:allocator=uniform", "compactor", "compactor:allocator=quality:tau=0.9"})
    o.presses.push_back(parse_press_entry(p));
  EXPECT_TRUE(o.presses.back().adaptive);
  o.keeps = {0.5};
  o.task.lengths = {512};
  o.task.depths = {0.5};
  o.task.samples = 1;
  o.task.max_new = 4;
  o.data_dir = test::data_dir();
  o.out_dir = out.str();
  o.progress = false;
  const EvalSummary s = run_eval(o, m, two_threads());
  EXPECT_EQ(s.failed, 0u);
  EXPECT_EQ(s.ran, 10u);
}

}  // namespace
}  // namespace kvs::eval
