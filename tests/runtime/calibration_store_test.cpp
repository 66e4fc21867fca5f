// Calibration files: saved next to the model, read back through the probe, refused when made
// with another model or for another press, absent -> null.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "core/error.h"
#include "model/presets.h"
#include "model/random_model.h"
#include "runtime/calibration_store.h"
#include "runtime/engine_probe.h"
#include "test_util.h"

namespace kvs {
namespace {

TEST(CalibrationStore, SavedNextToTheModelAndCheckedAgainstIt) {
  test::TempDir dir("calib");
  const auto& p = shape_preset("tiny");
  write_random_gguf(p.hp, synthetic_spm_vocab(p.hp.n_vocab), DType::F32, 3, "a", dir / "a.gguf");
  write_random_gguf(p.hp, synthetic_spm_vocab(p.hp.n_vocab), DType::F32, 4, "b", dir / "b.gguf");
  auto a = Model::load(dir / "a.gguf");
  auto b = Model::load(dir / "b.gguf");
  EXPECT_EQ(calibration_path(*a, "kvzip"), dir / "a.gguf.kvshrink-calib/kvzip.json");
  EXPECT_FALSE(load_calibration(*a, "kvzip").has_value());
  const nlohmann::json data = {{"head_scores", {1.5, 2.5}}};
  save_calibration(*a, "kvzip", data);
  EXPECT_EQ(*load_calibration(*a, "kvzip"), data);
  // Through the probe a press sees it (and null for a press without one).
  Engine e(*a, {});
  EngineProbe probe(e);
  ASSERT_NE(probe.calibration("kvzip"), nullptr);
  EXPECT_EQ((*probe.calibration("kvzip"))["head_scores"][1], 2.5);
  EXPECT_EQ(probe.calibration("uncomp"), nullptr);
  // Another model's file, another press's file, a corrupt file: refused with the reason.
  auto expect_error = [](auto fn, const std::string& needle) {
    try {
      fn();
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find(needle), std::string::npos) << err.what();
    }
  };
  expect_error([&] { load_calibration(*b, "kvzip", calibration_path(*a, "kvzip")); }, "made with model");
  expect_error([&] { load_calibration(*a, "uncomp", calibration_path(*a, "kvzip")); }, "for press 'kvzip'");
  std::ofstream(dir / "bad.json") << "{not json";
  expect_error([&] { load_calibration(*a, "kvzip", dir / "bad.json"); }, "corrupt");
}

}  // namespace
}  // namespace kvs
