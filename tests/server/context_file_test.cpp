// A server context's .kvc file records the context's token ids (context_ids), as the CLI's do, so
// `kvshrink inspect` can show its text; they survive a restart and a re-save, and a file whose ids
// lie outside the model's vocabulary is refused at load, naming the field.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/hash.h"
#include "kvcache/cache_file.h"
#include "server_test_util.h"

namespace kvs {
namespace {

using nlohmann::json;

TEST(ServerContextFile, RecordsTheContextTokenIds) {
  auto model = Model::load(test::stories_gguf());
  test::TempDir dir("server_context_ids");
  server::ServeOptions o = test::test_options();
  o.contexts_dir = dir.str();
  test::TestServer s(*model, o);
  const test::Reply c =
      test::post(s, "/v1/contexts", json{{"text", test::kStory}, {"kv_compression", {{"press", "knorm"}, {"keep", 0.5}}}});
  ASSERT_EQ(c.status, 200) << c.body;
  const std::string id = c.json["id"];
  const json h = read_cache_header((dir.path / (id + ".kvc")).string());
  ASSERT_TRUE(h.contains("context_ids")) << h.dump();
  ASSERT_TRUE(h["context_ids"].is_array()) << h["context_ids"].dump();
  const auto ids = h["context_ids"].get<std::vector<int32_t>>();
  EXPECT_EQ(static_cast<int64_t>(ids.size()), h["context_tokens"].get<int64_t>());
  // The text the ids decode to is the context's (the server adds BOS, which decodes to nothing here).
  EXPECT_EQ(model->tokenizer->encode(test::kStory, true), ids);
}

TEST(ServerContextFile, IdsOutsideTheVocabularyAreRefused) {
  auto model = Model::load(test::stories_gguf());
  test::TempDir dir("server_context_ids_bad");
  server::ServeOptions o = test::test_options();
  o.contexts_dir = dir.str();
  std::string id;
  {
    test::TestServer s(*model, o);
    const test::Reply c = test::post(s, "/v1/contexts", json{{"text", test::kStory}});
    ASSERT_EQ(c.status, 200) << c.body;
    id = c.json["id"];
  }
  // The file with one id past the vocabulary: "KVSC" | u32 version | u64 header bytes | header |
  // body | u64 FNV-1a of every preceding byte (kvcache/cache_file.h), rewritten here by hand.
  const std::string path = (dir.path / (id + ".kvc")).string();
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  uint64_t hn = 0;
  std::memcpy(&hn, bytes.data() + 8, 8);
  json h = json::parse(bytes.substr(16, hn));
  ASSERT_TRUE(h["context_ids"].is_array());
  h["context_ids"][1] = model->hp.n_vocab + 7;
  const std::string hs = h.dump();
  std::string out = bytes.substr(0, 8);
  const uint64_t n2 = hs.size();
  out.append(reinterpret_cast<const char*>(&n2), 8);
  out += hs;
  out += bytes.substr(16 + hn, bytes.size() - 16 - hn - 8);
  const uint64_t sum = fnv1a(kFnv1aInit, out.data(), out.size());
  out.append(reinterpret_cast<const char*>(&sum), 8);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << out;

  test::TestServer s(*model, o);
  ASSERT_EQ(s.srv->restore_problems().size(), 1u);
  EXPECT_NE(s.srv->restore_problems()[0].find("outside the model's vocabulary"), std::string::npos)
      << s.srv->restore_problems()[0];
}

}  // namespace
}  // namespace kvs
