#include "test_data.h"
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/gguf/gguf.h"

namespace kvs {

static std::string stories_file() { return kvs::test::test_data("models/stories260K/stories260K.gguf"); }

TEST(GgufReader, ReadsStories260K) {
  auto g = GgufFile::open(stories_file());
  EXPECT_EQ(g->version(), 3u);
  EXPECT_EQ(g->get_str("general.architecture"), "llama");
  EXPECT_EQ(g->get_int("llama.block_count"), 5);
  EXPECT_EQ(g->get_str_array("tokenizer.ggml.tokens").size(), 512u);
  EXPECT_EQ(g->tensors().size(), 48u);
  const TensorView* t = g->tensor("blk.0.attn_k.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->ne[0], 64);
  EXPECT_EQ(t->ne[1], 32);
  EXPECT_EQ(t->type, DType::F32);
}

TEST(GgufReader, ErrorsNameTheProblem) {
  auto g = GgufFile::open(stories_file());
  try {
    g->get_str("llama.block_count");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("llama.block_count"), std::string::npos);
  }
  EXPECT_THROW(GgufFile::open("/nonexistent.gguf"), Error);
}

}  // namespace kvs
