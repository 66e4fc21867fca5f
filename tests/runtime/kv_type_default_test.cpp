// F16 is the default KV storage (issue 14; BENCHMARKS.md "F16 KV cache: quality"), F32 an option.
// A .kvc file records its KV type: one written by an F32 engine must still load into a default
// (F16) engine — its rows rounded to F16, nothing else changed — and an F16 file into an F32
// engine exactly. On the in-repo testbed model (no ../shared needed).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/fp16.h"
#include "kvcache/cache_file.h"
#include "runtime/compression_spec.h"
#include "runtime/session.h"
#include "test_util.h"

namespace kvs {
namespace {

std::string testbed_model() { return std::string(KVS_SOURCE_DIR) + "/testbed/models/v7s1/model-f16.gguf"; }

CompressionSpec snapkv(double keep) {
  SpecArgs a;
  a.press = "snapkv";
  a.keep = keep;
  return make_compression_spec(a);
}

std::vector<int32_t> some_tokens(const Model& m) {
  return m.tokenizer->encode(
      "The harbor was quiet in the morning. Boats came in one by one, and the fishermen sorted their catch while "
      "the gulls waited on the posts. The special magic number for quiet-harbor is 4071589. Later the wind rose "
      "and the boats stayed tied up until the evening, when the lights of the town came on one after another.",
      true, false);
}

TEST(KvTypeDefault, EngineDefaultsToF16) {
  EXPECT_EQ(EngineParams{}.kv_dtype, DType::F16);
  auto model = Model::load(testbed_model());
  Engine e(*model, {});
  EXPECT_EQ(e.kv_layout().dtype, DType::F16);
  EXPECT_EQ(e.kv_layout().row_bytes(), static_cast<size_t>(model->hp.head_dim) * 2);
}

// Saves a compressed context made by an engine storing `from`, loads it into one storing `to`;
// every loaded row must equal the saved row converted to `to` (F32 -> F16 rounds, F16 -> F32 is
// exact), positions and lengths unchanged, and the loaded context must answer.
void check_load_across_types(DType from, DType to) {
  auto model = Model::load(testbed_model());
  test::TempDir dir("kv_type_kvc");
  EngineParams pf;
  pf.kv_dtype = from;
  pf.n_threads = 2;
  Engine ef(*model, pf);
  CompressedContext c(ef, snapkv(0.5));
  c.prefill(some_tokens(*model));
  save_cache(dir / "c.kvc", c.cache(), {{"note", "kv type test"}});

  EngineParams pt;
  pt.kv_dtype = to;
  pt.n_threads = 2;
  Engine et(*model, pt);
  LoadedCache lc = load_cache(dir / "c.kvc", et.page_pool(), et.kv_layout());
  EXPECT_EQ(lc.meta.at("dtype"), from == DType::F16 ? "f16" : "f32");  // the file records its type
  ASSERT_EQ(lc.cache->layout().dtype, to);
  EXPECT_EQ(lc.cache->n_past(), c.cache().n_past());
  ASSERT_EQ(lc.cache->total_slots(), c.cache().total_slots());
  const KvLayout& l = et.kv_layout();
  std::vector<float> a(l.head_dim), b(l.head_dim);
  for (int layer = 0; layer < l.n_layer; ++layer)
    for (int h = 0; h < l.n_head_kv; ++h) {
      ASSERT_EQ(lc.cache->head(layer, h).pos, c.cache().head(layer, h).pos);
      for (int32_t s = 0; s < lc.cache->len(layer, h); ++s)
        for (bool v : {false, true}) {
          if (v) c.cache().read_v(layer, h, s, a.data()), lc.cache->read_v(layer, h, s, b.data());
          else c.cache().read_k(layer, h, s, a.data()), lc.cache->read_k(layer, h, s, b.data());
          for (int d = 0; d < l.head_dim; ++d) {
            const float want = to == DType::F16 ? fp16_to_fp32(fp32_to_fp16(a[d])) : a[d];
            ASSERT_EQ(b[d], want) << "layer " << layer << " head " << h << " slot " << s << (v ? " V" : " K");
          }
        }
    }
  CompressedContext loaded(et, snapkv(0.5));
  loaded.adopt(std::move(lc.cache), c.full_bytes(), c.full_slots());
  AnswerOptions ao;
  ao.max_new_tokens = 4;
  ao.stop_at_eog = false;
  EXPECT_EQ(loaded.ask(model->tokenizer->encode("\nThe special magic number is", false, false), ao).tokens.size(), 4u);
}

TEST(KvTypeDefault, F32FileLoadsIntoDefaultF16Engine) { check_load_across_types(DType::F32, EngineParams{}.kv_dtype); }

TEST(KvTypeDefault, F16FileLoadsIntoF32EngineExactly) { check_load_across_types(DType::F16, DType::F32); }

}  // namespace
}  // namespace kvs
