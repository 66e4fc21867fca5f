// Replicas sharing compressed contexts through a real redis-server (issue 24): a context created
// through one replica is answered by another with the same tokens, deleted through one it is gone
// on all, a replica lost takes nothing with it, Redis down or stalled gives 503 for context
// operations while plain completions go on, AOF brings contexts back after a Redis restart, a
// context of another model is a 409, damaged bytes are refused, the password is honoured.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "redis_process.h"
#include "server_test_util.h"

namespace kvs {
namespace {

using json = nlohmann::json;
using test::get;
using test::post;
using test::Reply;
using Clock = std::chrono::steady_clock;

using test::kStory;

server::ServeOptions replica_options(const test::RedisProcess& r) {
  server::ServeOptions o = test::test_options();
  o.redis.url = r.url();
  o.redis.client.password = r.password;
  o.redis.client.timeout = std::chrono::milliseconds(300);
  o.redis.client.retry = std::chrono::milliseconds(500);
  return o;
}

std::string create(const test::TestServer& s) {
  const Reply c = post(s, "/v1/contexts", json{{"text", kStory}, {"kv_compression", {{"press", "snapkv"}, {"keep", 0.5}}}});
  EXPECT_EQ(c.status, 200) << c.body;
  return c.json.value("id", "");
}

Reply ask_reply(const test::TestServer& s, const std::string& id) {
  return post(s, "/v1/completions", json{{"context_id", id}, {"prompt", " Then"}, {"max_tokens", 12}, {"temperature", 0}});
}

std::string ask(const test::TestServer& s, const std::string& id) {
  const Reply a = ask_reply(s, id);
  EXPECT_EQ(a.status, 200) << a.body;
  return a.status == 200 ? a.json["choices"][0]["text"].get<std::string>() : a.body;
}

std::vector<std::string> listed(const test::TestServer& s) {
  const Reply l = get(s, "/v1/contexts?order=asc");
  EXPECT_EQ(l.status, 200) << l.body;
  std::vector<std::string> ids;
  for (const auto& c : l.json["data"]) ids.push_back(c["id"].get<std::string>());
  return ids;
}

int plain_completion(const test::TestServer& s) {
  return post(s, "/v1/completions", json{{"prompt", "Once upon"}, {"max_tokens", 4}, {"temperature", 0}}).status;
}

TEST(SharedContexts, MadeOnOneReplicaAnsweredByAnother) {
  auto model = Model::load(test::stories_gguf());
  test::TempDir dir("redis_shared");
  test::RedisProcess redis(dir.str());
  test::TestServer a(*model, replica_options(redis)), b(*model, replica_options(redis));
  const std::string id = create(a), id2 = create(b);
  const std::string on_a = ask(a, id);
  // B never saw the context: it loads it from Redis and answers the same tokens.
  const Reply info = get(b, "/v1/contexts/" + id);
  ASSERT_EQ(info.status, 200) << info.body;
  EXPECT_FALSE(info.json["resident"].get<bool>());
  EXPECT_TRUE(info.json["persisted"].get<bool>());
  EXPECT_EQ(info.json["kv_bytes_held"], get(a, "/v1/contexts/" + id).json["kv_bytes_held"]);
  EXPECT_EQ(ask(b, id), on_a);
  EXPECT_TRUE(get(b, "/v1/contexts/" + id).json["resident"].get<bool>());
  EXPECT_EQ(test::metric(get(b, "/metrics").body, "kvshrink_contexts_reloaded_total"), 1);
  // The same list, in creation order, from both.
  EXPECT_EQ(listed(a), (std::vector<std::string>{id, id2}));
  EXPECT_EQ(listed(b), (std::vector<std::string>{id, id2}));
}

TEST(SharedContexts, DeletedThroughOneReplicaIsGoneOnAll) {
  auto model = Model::load(test::stories_gguf());
  test::TempDir dir("redis_delete");
  test::RedisProcess redis(dir.str());
  test::TestServer a(*model, replica_options(redis)), b(*model, replica_options(redis));
  const std::string id = create(a);
  ask(b, id);  // resident on both now
  EXPECT_EQ(test::del(b, "/v1/contexts/" + id).status, 200);
  EXPECT_EQ(get(a, "/v1/contexts/" + id).status, 404);
  const Reply q = ask_reply(a, id);
  EXPECT_EQ(q.status, 404) << q.body;
  EXPECT_TRUE(listed(a).empty());
  EXPECT_EQ(test::del(a, "/v1/contexts/" + id).status, 404);
  EXPECT_EQ(redis.client()->command({"EXISTS", "kvshrink:ctx:" + id}).integer, 0);
  // A's copy in memory goes too (its watcher asks Redis every second).
  double resident = 1;
  for (int i = 0; i < 40 && resident != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    resident = test::metric(get(a, "/metrics").body, "kvshrink_contexts_resident");
  }
  EXPECT_EQ(resident, 0);
}

TEST(SharedContexts, AReplicaLostTakesNothingWithIt) {
  auto model = Model::load(test::stories_gguf());
  test::TempDir dir("redis_lost");
  test::RedisProcess redis(dir.str());
  auto a = std::make_unique<test::TestServer>(*model, replica_options(redis));
  test::TestServer b(*model, replica_options(redis));
  const std::string id = create(*a);
  const std::string on_a = ask(*a, id);
  a.reset();  // replica A is gone
  EXPECT_EQ(ask(b, id), on_a);
  EXPECT_EQ(listed(b), std::vector<std::string>{id});
}

TEST(SharedContexts, RedisDownOrStalledGives503AndCompletionsGoOn) {
  auto model = Model::load(test::stories_gguf());
  test::TempDir dir("redis_down");
  test::RedisProcess redis(dir.str());
  test::TestServer a(*model, replica_options(redis));
  const std::string id = create(a);
  redis.stop(SIGKILL);
  auto expect_503 = [&](const Reply& r, const char* what) {
    EXPECT_EQ(r.status, 503) << what << ": " << r.body;
    EXPECT_EQ(r.json["error"]["code"], "context_store_unavailable") << what;
    EXPECT_NE(r.body.find("Redis at 127.0.0.1:" + std::to_string(redis.port)), std::string::npos) << r.body;
  };
  expect_503(post(a, "/v1/contexts", json{{"text", kStory}}), "create");
  expect_503(get(a, "/v1/contexts"), "list");
  expect_503(get(a, "/v1/contexts/" + id), "get");
  expect_503(test::del(a, "/v1/contexts/" + id), "delete");
  expect_503(ask_reply(a, id), "question");
  EXPECT_EQ(plain_completion(a), 200);

  // Stalled (SIGSTOP): each context operation waits at most the timeout, then the breaker answers at once.
  redis.start();  // without persistence: empty
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // the breaker's retry period
  const std::string id2 = create(a);
  redis.pause();
  auto t0 = Clock::now();
  const Reply slow = post(a, "/v1/contexts", json{{"text", kStory}});
  EXPECT_EQ(slow.status, 503) << slow.body;
  EXPECT_NE(slow.body.find("no reply within 300 ms"), std::string::npos) << slow.body;
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 3.0);
  for (int i = 0; i < 5; ++i) {
    t0 = Clock::now();
    EXPECT_EQ(plain_completion(a), 200);
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 2.0);
    EXPECT_EQ(ask_reply(a, id2).status, 503);
  }
  redis.resume();
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  EXPECT_FALSE(ask(a, id2).empty());
  EXPECT_EQ(post(a, "/v1/contexts", json{{"text", kStory}}).status, 200);
}

TEST(SharedContexts, AofBringsContextsBackAfterARedisRestart) {
  auto model = Model::load(test::stories_gguf());
  test::TempDir dir("redis_aof");
  test::RedisProcess redis(dir.str(), /*aof=*/true);
  std::string id1, id2, answer;
  {
    test::TestServer a(*model, replica_options(redis));
    id1 = create(a);
    id2 = create(a);
    answer = ask(a, id2);
  }
  redis.stop(SIGKILL);  // appendfsync always: every acknowledged write is on disk
  redis.start();
  test::TestServer c(*model, replica_options(redis));  // a fresh replica: nothing in memory
  EXPECT_EQ(listed(c), (std::vector<std::string>{id1, id2}));
  EXPECT_EQ(ask(c, id2), answer);
}

TEST(SharedContexts, AContextOfAnotherModelIs409NeverAnswered) {
  auto model = Model::load(test::stories_gguf());
  test::TempDir dir("redis_model");
  test::RedisProcess redis(dir.str());
  test::TestServer a(*model, replica_options(redis));
  const std::string mine = create(a);
  // What a replica serving another model would have written.
  const std::string info = get(a, "/v1/contexts/" + mine).body;
  auto r = redis.client();
  const std::string theirs = "ctx_0123456789abcdef01234567";
  const std::string kvc = r->command({"HGET", "kvshrink:ctx:" + mine, "kvc"}).str;
  const std::string stored_info = r->command({"HGET", "kvshrink:ctx:" + mine, "info"}).str;
  r->command({"HSET", "kvshrink:ctx:" + theirs, "kvc", kvc, "info", stored_info, "model", "other-model", "fingerprint",
              "00000000deadbeef"});
  r->command({"ZADD", "kvshrink:ids", "99", theirs});
  for (const Reply& x : {get(a, "/v1/contexts/" + theirs), ask_reply(a, theirs), test::del(a, "/v1/contexts/" + theirs)}) {
    EXPECT_EQ(x.status, 409) << x.body;
    EXPECT_EQ(x.json["error"]["code"], "context_model_mismatch");
    EXPECT_NE(x.body.find("other-model"), std::string::npos) << x.body;
  }
  EXPECT_EQ(listed(a), std::vector<std::string>{mine});
  EXPECT_EQ(r->command({"EXISTS", "kvshrink:ctx:" + theirs}).integer, 1);  // not deleted
}

TEST(SharedContexts, DamagedBytesInRedisAreRefused) {
  auto model = Model::load(test::stories_gguf());
  test::TempDir dir("redis_damaged");
  test::RedisProcess redis(dir.str());
  test::TestServer a(*model, replica_options(redis)), b(*model, replica_options(redis));
  const std::string id = create(a);
  auto r = redis.client();
  std::string kvc = r->command({"HGET", "kvshrink:ctx:" + id, "kvc"}).str;
  ASSERT_GT(kvc.size(), 200u);
  kvc[kvc.size() / 2] ^= 0x40;
  r->command({"HSET", "kvshrink:ctx:" + id, "kvc", kvc});
  const Reply q = ask_reply(b, id);  // B loads it: the checksum refuses it
  EXPECT_EQ(q.status, 500) << q.body;
  EXPECT_NE(q.body.find("cannot be used"), std::string::npos) << q.body;
  EXPECT_NE(q.body.find("checksum"), std::string::npos) << q.body;
  EXPECT_EQ(plain_completion(b), 200);
}

TEST(SharedContexts, PasswordIsHonoured) {
  auto model = Model::load(test::stories_gguf());
  test::TempDir dir("redis_password");
  test::RedisProcess redis(dir.str(), false, "s3cret-pass");
  test::TestServer a(*model, replica_options(redis));
  EXPECT_FALSE(create(a).empty());
  server::ServeOptions o = replica_options(redis);
  o.redis.client.password.clear();
  test::TestServer no_pw(*model, o);
  const Reply c = post(no_pw, "/v1/contexts", json{{"text", kStory}});
  EXPECT_EQ(c.status, 503) << c.body;
  EXPECT_NE(c.body.find("NOAUTH"), std::string::npos) << c.body;
}

TEST(SharedContexts, UrlsAreCheckedAndPasswordsRefused) {
  const server::RedisUrl u = server::parse_redis_url("redis://10.0.0.5:7000/3");
  EXPECT_EQ(u.host, "10.0.0.5");
  EXPECT_EQ(u.port, 7000);
  EXPECT_EQ(u.db, 3);
  EXPECT_EQ(server::parse_redis_url("redis://cache").port, 6379);
  EXPECT_EQ(server::parse_redis_url("redis://[::1]:6380").host, "::1");
  auto refused = [](const std::string& url, const std::string& why) {
    try {
      server::parse_redis_url(url);
      ADD_FAILURE() << url << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << url << ": " << e.what();
    }
  };
  refused("redis://:pw@host:6379", "KVSHRINK_REDIS_PASSWORD");
  refused("http://host:6379", "expected redis://");
  refused("redis://host:99999", "port");
  refused("redis://host:6379/x", "database");
  refused("redis://:6379", "no host");
  refused("redis://host?ssl=1", "query");
}

}  // namespace
}  // namespace kvs
