// Stored contexts cannot hoard the server (issue 23 defect 8): a resident byte budget (the least
// recently used contexts dropped from memory, loaded back from --contexts-dir when used — the same
// answer as before; without a directory they are deleted), a TTL, a disk quota (the least recently
// used deleted to make room; a context larger than the quota refused with 507), and under
// --max-kv-bytes the contexts on disk make room for a request instead of leaving it to wait for a
// 429 — every figure in /metrics.
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "server_test_util.h"

namespace kvs {
namespace {

using json = nlohmann::json;
using test::get;
using test::post;
using test::Reply;

using test::kStory;

double metric(const test::TestServer& s, const std::string& name) { return test::metric(get(s, "/metrics").body, name); }

std::string create(const test::TestServer& s, double keep = 0.5) {
  const Reply c = post(s, "/v1/contexts", json{{"text", kStory}, {"kv_compression", {{"press", "knorm"}, {"keep", keep}}}});
  EXPECT_EQ(c.status, 200) << c.body;
  return c.json.value("id", "");
}

std::string ask(const test::TestServer& s, const std::string& id, int* status = nullptr) {
  const Reply a = post(s, "/v1/completions", json{{"context_id", id}, {"prompt", " Then"}, {"max_tokens", 6}, {"temperature", 0}});
  if (status) *status = a.status;
  return a.status == 200 ? a.json["choices"][0]["text"].get<std::string>() : a.body;
}

// Waits until the scheduler has synced its list (at most every 200 ms).
bool resident(const test::TestServer& s, const std::string& id) {
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const Reply r = get(s, "/v1/contexts/" + id);
  return r.status == 200 && r.json["resident"].get<bool>();
}

TEST(ContextPolicy, ResidentBudgetDropsToDiskAndReloadsTheSameAnswer) {
  auto model = Model::load(test::stories_gguf());
  test::TempDir dir("ctx_resident");
  server::ServeOptions o = test::test_options();
  o.contexts_dir = dir.str();
  test::TestServer probe_size(*model, o);
  const std::string first = create(probe_size);
  const size_t held = get(probe_size, "/v1/contexts/" + first).json["kv_bytes_held"].get<size_t>();
  const std::string answer = ask(probe_size, first);
  ASSERT_GT(held, 0u);
  test::del(probe_size, "/v1/contexts/" + first);

  o.contexts.resident_bytes = held + held / 2;  // room for one context in memory
  test::TestServer s(*model, o);
  const std::string a = create(s), b = create(s), c = create(s);
  EXPECT_FALSE(resident(s, a));
  EXPECT_FALSE(resident(s, b));
  EXPECT_TRUE(resident(s, c));
  EXPECT_EQ(metric(s, "kvshrink_contexts"), 3);
  EXPECT_EQ(metric(s, "kvshrink_contexts_resident"), 1);
  EXPECT_EQ(metric(s, "kvshrink_contexts_resident_bytes"), held);
  EXPECT_EQ(metric(s, "kvshrink_contexts_evicted_total{reason=\"resident_budget\"}"), 2);
  for (const auto& id : {a, b, c}) EXPECT_TRUE(std::filesystem::exists(dir.path / (id + ".kvc")));
  // The oldest is loaded back to answer — the same text as a context that never left memory —
  // and the others go to disk to keep the budget.
  EXPECT_EQ(ask(s, a), answer);
  EXPECT_EQ(metric(s, "kvshrink_contexts_reloaded_total"), 1);
  EXPECT_TRUE(resident(s, a));
  EXPECT_FALSE(resident(s, c));
  EXPECT_EQ(metric(s, "kvshrink_contexts_resident"), 1);
  // The list shows every context, resident or not.
  EXPECT_EQ(get(s, "/v1/contexts").json["data"].size(), 3u);
}

TEST(ContextPolicy, WithoutADirectoryTheBudgetDeletes) {
  auto model = Model::load(test::stories_gguf());
  server::ServeOptions o = test::test_options();
  o.contexts.resident_bytes = 1;  // every context but the newest goes
  test::TestServer s(*model, o);
  const std::string a = create(s), b = create(s);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(get(s, "/v1/contexts/" + a).status, 404);
  EXPECT_EQ(get(s, "/v1/contexts/" + b).status, 200);
  EXPECT_EQ(metric(s, "kvshrink_contexts_deleted_total{reason=\"resident_budget\"}"), 1);
  int status = 0;
  ask(s, a, &status);
  EXPECT_EQ(status, 404);
}

TEST(ContextPolicy, TtlDeletesUnusedContexts) {
  auto model = Model::load(test::stories_gguf());
  test::TempDir dir("ctx_ttl");
  server::ServeOptions o = test::test_options();
  o.contexts_dir = dir.str();
  o.contexts.ttl_s = 1;
  test::TestServer s(*model, o);
  const std::string id = create(s);
  EXPECT_TRUE(std::filesystem::exists(dir.path / (id + ".kvc")));
  int status = 0;
  for (int i = 0; i < 50 && status != 404; ++i) {  // unused for > 1 s: gone within a few seconds
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    status = get(s, "/v1/contexts/" + id).status;
  }
  EXPECT_EQ(status, 404);
  EXPECT_FALSE(std::filesystem::exists(dir.path / (id + ".kvc")));
  EXPECT_EQ(metric(s, "kvshrink_contexts_deleted_total{reason=\"ttl\"}"), 1);
}

TEST(ContextPolicy, DiskQuotaDeletesTheOldestAndRefusesTheTooLarge) {
  auto model = Model::load(test::stories_gguf());
  test::TempDir dir("ctx_disk");
  server::ServeOptions o = test::test_options();
  o.contexts_dir = dir.str();
  size_t file = 0;
  {
    test::TestServer s(*model, o);
    const std::string id = create(s);
    file = std::filesystem::file_size(dir.path / (id + ".kvc"));
    test::del(s, "/v1/contexts/" + id);
  }
  o.contexts.disk_bytes = 2 * file + file / 2;  // two files fit
  test::TestServer s(*model, o);
  const std::string a = create(s), b = create(s), c = create(s);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(get(s, "/v1/contexts/" + a).status, 404);
  EXPECT_FALSE(std::filesystem::exists(dir.path / (a + ".kvc")));
  EXPECT_EQ(get(s, "/v1/contexts/" + b).status, 200);
  EXPECT_EQ(get(s, "/v1/contexts/" + c).status, 200);
  EXPECT_EQ(metric(s, "kvshrink_contexts_deleted_total{reason=\"disk_quota\"}"), 1);
  EXPECT_LE(metric(s, "kvshrink_contexts_disk_bytes"), static_cast<double>(o.contexts.disk_bytes));
  // Uncompressed, the file is about twice as large: more than the whole quota.
  const Reply big = post(s, "/v1/contexts", json{{"text", std::string(kStory) + " " + kStory + " " + kStory}});
  EXPECT_EQ(big.status, 507) << big.body;
  EXPECT_NE(big.body.find("--contexts-disk-mib"), std::string::npos) << big.body;
  EXPECT_EQ(test::get(s, "/v1/contexts").json["data"].size(), 2u);
}

// Under --max-kv-bytes, stored contexts that are on disk make room for a request: without the
// policy it waited for the queue timeout and got 429.
TEST(ContextPolicy, KvPressureDropsContextsToDisk) {
  auto model = Model::load(test::stories_gguf());
  test::TempDir dir("ctx_pressure");
  server::ServeOptions o = test::test_options();
  o.contexts_dir = dir.str();
  o.engine.kv_max_bytes = 6u << 20;
  o.scheduler.queue_timeout_s = 5;
  test::TestServer s(*model, o);
  std::vector<std::string> ids;
  // Contexts fill the cap but for about two contexts' worth: the completion below (twice the
  // story plus 64 new tokens, about three contexts' worth) does not fit beside them.
  double per_context = 0;
  while (metric(s, "kvshrink_kv_bytes_contexts") + 2 * per_context < static_cast<double>(o.engine.kv_max_bytes)) {
    const std::string id = create(s, 1.0);
    ASSERT_FALSE(id.empty());
    ids.push_back(id);
    per_context = metric(s, "kvshrink_kv_bytes_contexts") / static_cast<double>(ids.size());
    ASSERT_LT(ids.size(), 200u);
  }
  const double evicted_before = metric(s, "kvshrink_contexts_evicted_total{reason=\"kv_pressure\"}");
  const Reply r = post(s, "/v1/completions", json{{"prompt", std::string(kStory) + " " + kStory}, {"max_tokens", 64},
                                                   {"temperature", 0}});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_GE(metric(s, "kvshrink_contexts_evicted_total{reason=\"kv_pressure\"}"), evicted_before + 1);
  EXPECT_LT(metric(s, "kvshrink_contexts_resident"), static_cast<double>(ids.size()));
  // Every context still answers (loaded back when asked).
  int status = 0;
  ask(s, ids.front(), &status);
  EXPECT_EQ(status, 200);
}

}  // namespace
}  // namespace kvs
