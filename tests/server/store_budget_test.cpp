// Stored contexts under the KV cap and the stores' default budgets: a persisted context stays
// answerable however full the cap is (resident ones go to disk to make room for loading it, and
// after a restart every file is listed and answers); every store has a resident, disk and count
// budget by default, stated in /metrics; contexts with no file never starve a live request (they
// are deleted for it); the list never shows a context the disk quota deleted; a .kvc of another KV
// type reports its full size in this server's type.
#include <gtest/gtest.h>

#include <filesystem>
#include <future>
#include <thread>

#include "server_test_util.h"

namespace kvs {
namespace {

using json = nlohmann::json;
using test::get;
using test::post;
using test::Reply;
using test::kStory;

class StoreBudget : public test::StoriesModelSuite {};

double metric(const test::TestServer& s, const std::string& name) { return test::metric(get(s, "/metrics").body, name); }

std::string create(const test::TestServer& s, double keep = 1.0, const std::string& text = kStory) {
  const Reply c = post(s, "/v1/contexts", json{{"text", text}, {"kv_compression", {{"press", "knorm"}, {"keep", keep}}}});
  EXPECT_EQ(c.status, 200) << c.body;
  return c.json.value("id", "");
}

Reply ask(const test::TestServer& s, const std::string& id) {
  return post(s, "/v1/completions", json{{"context_id", id}, {"prompt", " Then"}, {"max_tokens", 6}, {"temperature", 0}});
}

std::vector<std::string> listed(const test::TestServer& s) {
  std::vector<std::string> ids;
  const Reply l = get(s, "/v1/contexts?order=asc&limit=100");
  EXPECT_EQ(l.status, 200) << l.body;
  for (const auto& c : l.json["data"]) ids.push_back(c["id"].get<std::string>());
  return ids;
}

// The bytes one context of `text` holds, measured on a server without a cap.
size_t context_bytes(const Model& m, const std::string& text = kStory) {
  test::TestServer s(m, test::test_options());
  const Reply c = post(s, "/v1/contexts", json{{"text", text}, {"kv_compression", {{"press", "knorm"}, {"keep", 1.0}}}});
  return c.json["kv_bytes_held"].get<size_t>();
}

// The data-loss case: a capped server with a directory filled past its cap with persisted
// contexts; every one answers (loaded back, the others pushed to disk), and again after a restart.
TEST_F(StoreBudget, EveryPersistedContextAnswersUnderTheCapAndAfterARestart) {
  // Two stories: a context holds more pages than a question on it reserves, so loading one back
  // does not fit in what the last question left free.
  const std::string text = std::string(kStory) + " " + kStory;
  const size_t held = context_bytes(*model_, text);
  test::TempDir dir("store_cap_restart");
  server::ServeOptions o = test::test_options();
  o.contexts_dir = dir.str();
  Engine probe(*model_, o.engine);
  const size_t page_all_heads = probe.kv_layout().page_bytes() * static_cast<size_t>(probe.kv_layout().n_heads_total());
  // Four contexts and the three pages a head a question on one reserves: after a question, the
  // free room is less than a context, so loading the next one needs others pushed to disk.
  o.engine.kv_max_bytes = 4 * held + 3 * page_all_heads;
  ASSERT_GT(held, 3 * page_all_heads);
  o.scheduler.queue_timeout_s = 20;
  std::vector<std::string> ids;
  std::map<std::string, std::string> answers;
  {
    test::TestServer s(*model_, o);
    for (int i = 0; i < 10; ++i) ids.push_back(create(s, 1.0, text));
    for (const std::string& id : ids) {
      const Reply a = ask(s, id);
      ASSERT_EQ(a.status, 200) << id << ": " << a.body;
      answers[id] = a.json["choices"][0]["text"].get<std::string>();
    }
    // Asked in another order, in parallel: they wait for room rather than fail.
    std::vector<std::future<Reply>> rs;
    for (auto it = ids.rbegin(); it != ids.rbegin() + 6; ++it)  // within --parallel + --max-queue
      rs.push_back(std::async(std::launch::async, [&s, id = *it] { return ask(s, id); }));
    for (auto& r : rs) {
      const Reply a = r.get();
      EXPECT_EQ(a.status, 200) << a.body;
    }
    EXPECT_GT(metric(s, "kvshrink_contexts_evicted_total{reason=\"kv_pressure\"}"), 0);
    EXPECT_LE(s.srv->engine().page_pool().high_water_bytes(), o.engine.kv_max_bytes);
  }
  test::TestServer s(*model_, o);
  EXPECT_TRUE(s.srv->restore_problems().empty());
  std::vector<std::string> after = listed(s), want = ids;
  std::sort(after.begin(), after.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(after, want);
  EXPECT_EQ(metric(s, "kvshrink_contexts"), static_cast<double>(ids.size()));
  EXPECT_LT(metric(s, "kvshrink_contexts_resident"), static_cast<double>(ids.size()));
  for (const std::string& id : ids) {
    const Reply a = ask(s, id);
    ASSERT_EQ(a.status, 200) << id << ": " << a.body;
    EXPECT_EQ(a.json["choices"][0]["text"].get<std::string>(), answers[id]) << id;
    EXPECT_TRUE(get(s, "/v1/contexts/" + id).json["persisted"].get<bool>());
  }
}

// A context larger than the whole cap (made by a server with a larger one) is refused with 400
// naming the cap, not a 500.
TEST_F(StoreBudget, AContextLargerThanTheCapIsA400) {
  const size_t held = context_bytes(*model_);
  test::TempDir dir("store_too_large");
  server::ServeOptions o = test::test_options();
  o.contexts_dir = dir.str();
  std::string id;
  {
    test::TestServer s(*model_, o);
    id = create(s);
  }
  o.engine.kv_max_bytes = held / 2;
  test::TestServer s(*model_, o);
  const Reply a = ask(s, id);
  EXPECT_EQ(a.status, 400) << a.body;
  EXPECT_EQ(a.json["error"]["code"], "kv_memory_exceeded") << a.body;
  EXPECT_NE(a.body.find("--max-kv-bytes"), std::string::npos) << a.body;
}

// Every store has budgets by default, in /metrics: the resident budget is the KV cap (a quarter of
// the machine's memory without one), a directory's disk budget is positive, the count 10000.
TEST_F(StoreBudget, DefaultBudgetsAreStatedInMetrics) {
  server::ServeOptions o = test::test_options();
  {
    test::TestServer s(*model_, o);
    EXPECT_GT(metric(s, "kvshrink_contexts_budget_resident_bytes"), 0);
    EXPECT_EQ(metric(s, "kvshrink_contexts_budget_disk_bytes"), 0);  // no directory
    EXPECT_EQ(metric(s, "kvshrink_contexts_budget_count"), 10000);
    EXPECT_EQ(metric(s, "kvshrink_contexts_budget_ttl_seconds"), 0);
  }
  o.engine.kv_max_bytes = 8u << 20;
  test::TempDir dir("store_defaults");
  o.contexts_dir = dir.str();
  test::TestServer s(*model_, o);
  EXPECT_EQ(metric(s, "kvshrink_contexts_budget_resident_bytes"), static_cast<double>(8u << 20));
  EXPECT_GT(metric(s, "kvshrink_contexts_budget_disk_bytes"), 0);
  EXPECT_EQ(metric(s, "kvshrink_contexts_budget_count"), 10000);
}

TEST_F(StoreBudget, CountBudgetDeletesTheLeastRecentlyUsed) {
  server::ServeOptions o = test::test_options();
  o.contexts.max_contexts = 2;
  test::TestServer s(*model_, o);
  const std::string a = create(s), b = create(s);
  EXPECT_EQ(ask(s, a).status, 200);  // a is now used more recently than b
  const std::string c = create(s);
  EXPECT_EQ(listed(s), (std::vector<std::string>{a, c}));  // at once, no wait for a sync
  EXPECT_EQ(get(s, "/v1/contexts/" + b).status, 404);
  EXPECT_EQ(metric(s, "kvshrink_contexts_deleted_total{reason=\"count\"}"), 1);
  EXPECT_EQ(metric(s, "kvshrink_contexts_budget_count"), 2);
}

// Without a directory, stored contexts holding most of the cap used to make every larger request
// wait the whole queue timeout and get 429; now the least recently used are deleted to admit it.
TEST_F(StoreBudget, ContextsWithoutFilesNeverStarveALiveRequest) {
  const size_t held = context_bytes(*model_);
  server::ServeOptions o = test::test_options();
  o.engine.kv_max_bytes = 6 * held;
  o.scheduler.queue_timeout_s = 3;
  test::TestServer s(*model_, o);
  const std::string a = create(s), b = create(s), c = create(s), d = create(s);
  ASSERT_EQ(listed(s).size(), 4u);
  // A prompt of three stories and 64 new tokens (about four contexts' worth): it fits an empty
  // cap, not beside four contexts.
  const std::string big = std::string(kStory) + " " + kStory + " " + kStory;
  const auto t0 = std::chrono::steady_clock::now();
  const Reply r = post(s, "/v1/completions", json{{"prompt", big}, {"max_tokens", 64}, {"temperature", 0}});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.5);
  EXPECT_GE(metric(s, "kvshrink_contexts_deleted_total{reason=\"kv_pressure\"}"), 1);
  EXPECT_EQ(get(s, "/v1/contexts/" + a).status, 404);  // the least recently used went first
  EXPECT_EQ(get(s, "/v1/contexts/" + d).status, 200);
  (void)b, (void)c;
}

// A context running a question is never deleted for another request: that one waits.
TEST_F(StoreBudget, AContextInUseIsNotDeletedForPressure) {
  const size_t held = context_bytes(*model_);
  server::ServeOptions o = test::test_options();
  o.engine.kv_max_bytes = 3 * held;
  o.scheduler.step_delay_ms = 5;
  test::TestServer s(*model_, o);
  const std::string a = create(s);
  auto q = std::async(std::launch::async, [&] {
    return post(s, "/v1/completions",
                json{{"context_id", a}, {"prompt", " Then"}, {"max_tokens", 40}, {"ignore_eos", true}, {"temperature", 0}});
  });
  const Reply r = post(s, "/v1/completions", json{{"prompt", kStory}, {"max_tokens", 40}, {"temperature", 0}});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(q.get().status, 200);
  EXPECT_EQ(get(s, "/v1/contexts/" + a).status, 200);
}

// The disk quota's deletions are out of the list before the client hears of the new context.
TEST_F(StoreBudget, ListNeverShowsAContextTheQuotaDeleted) {
  test::TempDir dir("store_quota_list");
  server::ServeOptions o = test::test_options();
  o.contexts_dir = dir.str();
  size_t file = 0;
  {
    test::TestServer s(*model_, o);
    const std::string id = create(s, 0.5);
    file = std::filesystem::file_size(dir.path / (id + ".kvc"));
    test::del(s, "/v1/contexts/" + id);
  }
  o.contexts.disk_bytes = 2 * file + file / 2;  // two files fit
  test::TestServer s(*model_, o);
  std::vector<std::string> ids;
  for (int i = 0; i < 6; ++i) {
    ids.push_back(create(s, 0.5));
    const std::vector<std::string> l = listed(s);  // no sleep
    EXPECT_LE(l.size(), 2u);
    for (const std::string& id : l) EXPECT_TRUE(std::filesystem::exists(dir.path / (id + ".kvc"))) << id;
  }
}

// A file of another KV type (a q4_0 one in an f16 server; here f16 in an f32 server, as
// stories260K's head_dim of 8 has no q4_0 blocks): the rows are converted, and the full size is
// the server's own (never below what it holds).
TEST_F(StoreBudget, ConvertedFileReportsItsFullSizeInTheServersType) {
  test::TempDir dir("store_dtype");
  server::ServeOptions o = test::test_options();
  o.contexts_dir = dir.str();
  o.engine.kv_dtype = DType::F16;
  std::string id;
  {
    test::TestServer s(*model_, o);
    id = create(s);
  }
  o.engine.kv_dtype = DType::F32;
  test::TestServer s(*model_, o);
  const Reply i = get(s, "/v1/contexts/" + id);
  ASSERT_EQ(i.status, 200) << i.body;
  const Reply fresh = post(s, "/v1/contexts", json{{"text", kStory}});
  EXPECT_GE(i.json["kv_bytes_full"].get<size_t>(), i.json["kv_bytes_held"].get<size_t>()) << i.body;
  EXPECT_EQ(i.json["kv_bytes_full"], fresh.json["kv_bytes_full"]);
}

}  // namespace
}  // namespace kvs
