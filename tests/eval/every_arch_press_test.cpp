// Every press compresses and answers on every architecture the engine runs (issue 26): a random
// model of each family's tiny shape — llama; qwen2 (Q/K/V biases); qwen3 (per-head Q/K RMSNorm,
// head_dim 32 != width 64 / 4 heads); phi3 (fused Q/K/V and gate/up, a 1,000-token window); gemma2 (post-norms,
// GeGLU, soft-caps, a 48-token window on layers 0 and 2, so the local layers drop pages); gemma3 (Q/K norms, five
// local layers with their own RoPE table, one global) — 300 context tokens, keep 0.5 (presses that choose their own
// budget choose it), then a 4-token answer. UNComp gets its real calibration (head and layer
// groups from wikitext-2 in tests/data) first, as a user runs `kvshrink calibrate --press uncomp`.
#include <gtest/gtest.h>

#include <cstdlib>

#include "eval/calibrators.h"
#include "eval_test_util.h"
#include "model/presets.h"
#include "model/random_model.h"
#include "press/registry.h"
#include "runtime/calibration_store.h"
#include "runtime/compression_spec.h"
#include "runtime/session.h"

namespace kvs::eval {
namespace {

CompressionSpec spec_for(const std::string& press, double keep) {
  SpecArgs a;
  a.press = press;
  if (!make_press(press, a.options).adaptive()) a.keep = keep;
  return make_compression_spec(a);
}

TEST(EveryArchitecture, EveryPressCompressesAndAnswers) {
  test::TempDir dir("every_arch");
  ::setenv("KVSHRINK_CALIB_DIR", dir.str().c_str(), 1);
  DataStore data(test::data_dir());
  for (const char* shape : {"tiny", "tiny-qwen2", "tiny-qwen3", "tiny-phi3", "tiny-gemma2", "tiny-gemma3"}) {
    const auto& p = shape_preset(shape);
    const std::string path = dir / (std::string(shape) + ".gguf");
    write_random_gguf(p.hp, synthetic_spm_vocab(p.hp.n_vocab), DType::F32, 7, shape, path);
    auto model = Model::load(path);
    EngineParams ep;
    ep.n_threads = 2;
    Engine e(*model, ep);
    CalibrateArgs ca{*model, e, data, 4, 128, {}, 0, false};
    save_calibration(*model, "uncomp", calibrator("uncomp").run(ca));
    std::vector<int32_t> ids{1};
    for (int i = 1; i < 300; ++i) ids.push_back(3 + (i * 37) % (p.hp.n_vocab - 3));
    const std::vector<int32_t> q{5, 9, 11};
    for (const auto& info : press_registry()) {
      SCOPED_TRACE(std::string(shape) + " " + info.name);
      CompressedContext c(e, spec_for(info.name, 0.5));
      ASSERT_NO_THROW(c.prefill(ids));
      EXPECT_LE(c.cache().total_slots(), c.full_slots());
      if (info.name != "full" && !make_press(info.name, {}).adaptive()) {
        EXPECT_LT(c.cache().total_slots(), c.full_slots());
      }
      AnswerOptions ao;
      ao.max_new_tokens = 4;
      ao.stop_at_eog = false;
      EXPECT_EQ(c.ask(q, ao).tokens.size(), 4u);
    }
  }
  ::unsetenv("KVSHRINK_CALIB_DIR");
}

}  // namespace
}  // namespace kvs::eval
