// The UNComp calibrator end to end on stories260K (a few short WikiText-2 windows): what it stores
// has the model's shape, the groups are a balanced assignment per layer, the layer groups follow
// Eq. 8 on the stored layer values, the two halves are reported, the press reads it back and
// compresses, and unknown options are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "eval/calibrators.h"
#include "eval_test_util.h"
#include "press/math/uncomp_groups.h"
#include "press/registry.h"
#include "runtime/calibration_store.h"
#include "runtime/session.h"

namespace kvs::eval {
namespace {

TEST(CalibrateUncomp, GroupsFromWikitextThenCompression) {
  test::TempDir dir("calib_uncomp");
  ::setenv("KVSHRINK_CALIB_DIR", dir.str().c_str(), 1);
  const Model& m = test::stories();
  EngineParams ep;
  ep.n_threads = 2;
  Engine e(m, ep);
  DataStore data(test::data_dir());
  CalibrateArgs a{m, e, data, 6, 96, {{"groups", "4"}}, 0, false};
  const nlohmann::json j = calibrator("uncomp").run(a);
  const int L = m.hp.n_layer, Hkv = m.hp.n_head_kv, H = m.hp.n_head;
  ASSERT_EQ(j.at("kv_head_groups").size(), static_cast<size_t>(L));
  ASSERT_EQ(j.at("head_erank").size(), static_cast<size_t>(L));
  std::vector<double> layer;
  for (int l = 0; l < L; ++l) {
    auto g = j["kv_head_groups"][l].get<std::vector<int>>();
    std::sort(g.begin(), g.end());
    EXPECT_EQ(g, (std::vector<int>{0, 1, 2, 3})) << "layer " << l;  // 4 KV heads in 4 groups: one each
    ASSERT_EQ(j["head_erank"][l].size(), static_cast<size_t>(H));
    double sum = 0;
    for (const auto& x : j["head_erank"][l]) {
      EXPECT_GE(x.get<double>(), 1.0 - 1e-9);
      EXPECT_LE(x.get<double>(), 32.0 + 1e-9);  // erank_k <= k (top-k normalisation)
      sum += x.get<double>();
    }
    EXPECT_NEAR(j["layer_erank"][l].get<double>(), sum, 1e-4);
    layer.push_back(j["layer_erank"][l].get<double>());
  }
  EXPECT_EQ(j["layer_groups"].get<std::vector<int>>(), math::uncomp_layer_groups(layer, 1.0));
  EXPECT_EQ(j["samples"], 6);
  EXPECT_EQ(j["tokens"], 96);
  EXPECT_EQ(j["stability"]["halves"], nlohmann::json({3, 3}));
  EXPECT_GE(j["stability"]["agreement"].get<double>(), 0.0);
  // Saved next to the model, the press compresses with it.
  save_calibration(m, "uncomp", j);
  CompressionSpec spec;
  spec.press = make_press("uncomp");
  spec.trigger = spec.press.trigger;
  spec.request.keep = 0.5;
  CompressedContext ctx(e, spec);
  const auto ids = m.tokenizer->encode("Once upon a time, there was a little girl named Lily. She loved to play outside.", true, false);
  ctx.prefill(ids);
  EXPECT_EQ(ctx.cache().total_slots(), static_cast<size_t>(std::lround(0.5 * ids.size() * L * Hkv)));
  ::unsetenv("KVSHRINK_CALIB_DIR");
  CalibrateArgs bad{m, e, data, 2, 64, {{"gruops", "4"}}, 0, false};
  try {
    calibrator("uncomp").run(bad);
    ADD_FAILURE() << "unknown option accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("unknown option 'gruops'"), std::string::npos) << err.what();
  }
}

}  // namespace
}  // namespace kvs::eval
