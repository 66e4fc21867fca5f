// The Redis context store against a real redis-server: a list reads one page of the index, never
// all of it (50,000 contexts list as fast as a few, checked by Redis's own command counts), pages
// in both orders skip expired entries, malformed metadata written by another party is refused as
// corrupt (never converted), and the memory and count budgets hold across replicas.
#include <gtest/gtest.h>

#include <chrono>
#include <fmt/format.h>

#include <regex>

#include "redis_process.h"
#include "server_test_util.h"

namespace kvs {
namespace {

using json = nlohmann::json;
using test::get;
using test::post;
using test::Reply;
using test::kStory;

class RedisStore : public test::StoriesModelSuite {};

server::ServeOptions replica_options(const test::RedisProcess& r) {
  server::ServeOptions o = test::test_options();
  o.redis.url = r.url();
  o.redis.client.timeout = std::chrono::milliseconds(2000);
  o.redis.client.retry = std::chrono::milliseconds(500);
  return o;
}

std::string create(const test::TestServer& s) {
  const Reply c = post(s, "/v1/contexts", json{{"text", kStory}, {"kv_compression", {{"press", "knorm"}, {"keep", 0.5}}}});
  EXPECT_EQ(c.status, 200) << c.body;
  return c.json.value("id", "");
}

// Calls of one Redis command since the last CONFIG RESETSTAT (INFO commandstats).
long long calls(server::RedisClient& c, const std::string& cmd) {
  const std::string info = c.command({"INFO", "commandstats"}).str;
  std::smatch m;
  if (std::regex_search(info, m, std::regex("cmdstat_" + cmd + ":calls=([0-9]+)"))) return std::stoll(m[1]);
  return 0;
}

std::vector<std::string> ids_of(const Reply& r) {
  std::vector<std::string> out;
  for (const auto& c : r.json["data"]) out.push_back(c["id"].get<std::string>());
  return out;
}

TEST_F(RedisStore, ListingReadsOnePageOfTheIndex) {
  test::TempDir dir("redis_paging");
  test::RedisProcess redis(dir.str());
  test::TestServer s(*model_, replica_options(redis));
  const std::string first = create(s);
  auto r = redis.client();
  const std::string key = "kvshrink:ctx:" + first;
  const std::string fp = r->command({"HGET", key, "fingerprint"}).str;
  const json info = json::parse(r->command({"HGET", key, "info"}).str);
  // 50,000 more index entries with their hashes (info and fingerprint: all a list reads).
  constexpr int kMany = 50000;
  std::vector<std::string> ids, infos, seqs;
  for (int i = 0; i < kMany; ++i) {
    ids.push_back(fmt::format("ctx_many{:06d}", i));
    json j = info;
    j["id"] = ids.back();
    j["seq"] = 100 + i;
    infos.push_back(j.dump());
    seqs.push_back(std::to_string(100 + i));
  }
  std::vector<std::string> keys;
  for (const auto& id : ids) keys.push_back("kvshrink:ctx:" + id);
  for (int b = 0; b < kMany; b += 1000) {
    std::vector<server::RedisClient::Command> cmds;
    for (int i = b; i < b + 1000; ++i) {
      cmds.push_back({"HSET", keys[i], "info", infos[i], "fingerprint", fp, "model", "m"});
      cmds.push_back({"ZADD", "kvshrink:ids", seqs[i], ids[i]});
    }
    r->pipeline(cmds);
  }
  r->command({"CONFIG", "RESETSTAT"});
  const auto t0 = std::chrono::steady_clock::now();
  const Reply one = get(s, "/v1/contexts?limit=1");
  const double s1 = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(one.status, 200) << one.body;
  EXPECT_EQ(ids_of(one), std::vector<std::string>{ids.back()});  // newest first
  EXPECT_TRUE(one.json["has_more"].get<bool>());
  EXPECT_LE(calls(*r, "hmget"), 2);  // the page and the one that says more follow
  EXPECT_EQ(calls(*r, "zrange"), 0);
  EXPECT_LT(s1, 0.5);  // generous for a loaded machine; the command counts above are the exact check
  // Paging on from `after`, both orders.
  const Reply next = get(s, "/v1/contexts?limit=3&after=" + ids.back());
  EXPECT_EQ(ids_of(next), (std::vector<std::string>{ids[kMany - 2], ids[kMany - 3], ids[kMany - 4]}));
  const Reply asc = get(s, "/v1/contexts?order=asc&limit=2");
  EXPECT_EQ(ids_of(asc), (std::vector<std::string>{first, ids[0]}));
  const Reply asc2 = get(s, "/v1/contexts?order=asc&limit=2&after=" + ids[0]);
  EXPECT_EQ(ids_of(asc2), (std::vector<std::string>{ids[1], ids[2]}));
  EXPECT_EQ(asc2.json["first_id"], ids[1]);
  EXPECT_EQ(asc2.json["last_id"], ids[2]);
  // An expired hash (its index entry left behind) is skipped, and its entry dropped.
  r->command({"DEL", keys[1], keys[2]});
  const Reply skip = get(s, "/v1/contexts?order=asc&limit=2&after=" + ids[0]);
  EXPECT_EQ(ids_of(skip), (std::vector<std::string>{ids[3], ids[4]}));
  EXPECT_TRUE(r->command({"ZSCORE", "kvshrink:ids", ids[1]}).is_nil());
  // The end of the list: no more.
  const Reply last = get(s, "/v1/contexts?order=asc&limit=5&after=" + ids[kMany - 2]);
  EXPECT_EQ(ids_of(last), std::vector<std::string>{ids.back()});
  EXPECT_FALSE(last.json["has_more"].get<bool>());
  const Reply unknown = get(s, "/v1/contexts?after=ctx_nosuch");
  EXPECT_EQ(unknown.status, 400);
  EXPECT_EQ(unknown.json["error"]["code"], "context_not_found");
}

// Metadata another party wrote: numbers out of range are refused as corrupt (500 naming the field),
// never converted; the list leaves the context out.
TEST_F(RedisStore, MalformedMetadataIsRefusedAsCorrupt) {
  test::TempDir dir("redis_meta");
  test::RedisProcess redis(dir.str());
  test::TestServer s(*model_, replica_options(redis));
  const std::string id = create(s), good = create(s);
  auto r = redis.client();
  const std::string key = "kvshrink:ctx:" + id;
  const json info = json::parse(r->command({"HGET", key, "info"}).str);
  for (const auto& [field, value] : std::vector<std::pair<std::string, json>>{
           {"n_tokens", 1e300}, {"n_tokens", -5}, {"n_tokens", 12.5}, {"kv_bytes_held", -1}, {"created", 1e30},
           {"seq", -1}, {"keep_measured", 7}, {"kv_bytes_full", 18446744073709551615ull}}) {
    json bad = info;
    bad[field] = value;
    r->command({"HSET", key, "info", bad.dump()});
    const Reply g = get(s, "/v1/contexts/" + id);
    EXPECT_EQ(g.status, 500) << field << "=" << value.dump() << ": " << g.body;
    EXPECT_NE(g.body.find(field), std::string::npos) << g.body;
    EXPECT_EQ(ids_of(get(s, "/v1/contexts")), std::vector<std::string>{good}) << field;
  }
}

long long used_memory(server::RedisClient& c) {
  const std::string info = c.command({"INFO", "memory"}).str;
  std::smatch m;
  return std::regex_search(info, m, std::regex("used_memory:([0-9]+)")) ? std::stoll(m[1]) : -1;
}

// The disk budget of a Redis store bounds the Redis server's memory: past it the oldest contexts go.
TEST_F(RedisStore, MemoryBudgetDeletesTheOldest) {
  test::TempDir dir("redis_memory");
  test::RedisProcess redis(dir.str());
  auto r = redis.client();
  // Redis's memory with this server's connections open and one context's bytes, measured.
  long long base = 0, one = 0;
  {
    test::TestServer probe(*model_, replica_options(redis));
    const std::string id = create(probe);
    one = r->command({"HSTRLEN", "kvshrink:ctx:" + id, "kvc"}).integer;
    test::del(probe, "/v1/contexts/" + id);
    base = used_memory(*r);
  }
  ASSERT_GT(one, 0);
  server::ServeOptions o = replica_options(redis);
  o.contexts.disk_bytes = static_cast<size_t>(base + 8 * one);  // about eight contexts
  test::TestServer s(*model_, o);
  EXPECT_EQ(test::metric(get(s, "/metrics").body, "kvshrink_contexts_budget_disk_bytes"),
            static_cast<double>(o.contexts.disk_bytes));
  std::vector<std::string> ids;
  for (int i = 0; i < 40; ++i) {
    ids.push_back(create(s));
    EXPECT_LE(used_memory(*r), static_cast<long long>(o.contexts.disk_bytes) + 2 * one) << i;
  }
  const long long left = r->command({"ZCARD", "kvshrink:ids"}).integer;
  EXPECT_LT(left, 40);
  EXPECT_GT(left, 0);
  EXPECT_EQ(r->command({"EXISTS", "kvshrink:ctx:" + ids.front()}).integer, 0);  // the oldest went
  EXPECT_EQ(get(s, "/v1/contexts/" + ids.back()).status, 200);
  EXPECT_GT(test::metric(get(s, "/metrics").body, "kvshrink_contexts_deleted_total{reason=\"disk_quota\"}"), 0);
}

TEST_F(RedisStore, CountBudgetIsSharedByTheReplicas) {
  test::TempDir dir("redis_count");
  test::RedisProcess redis(dir.str());
  server::ServeOptions o = replica_options(redis);
  o.contexts.max_contexts = 3;
  test::TestServer a(*model_, o), b(*model_, o);
  const std::string c1 = create(a), c2 = create(b), c3 = create(a), c4 = create(b), c5 = create(a);
  EXPECT_EQ(ids_of(get(a, "/v1/contexts?order=asc")), (std::vector<std::string>{c3, c4, c5}));
  EXPECT_EQ(redis.client()->command({"ZCARD", "kvshrink:ids"}).integer, 3);
  EXPECT_EQ(redis.client()->command({"EXISTS", "kvshrink:ctx:" + c1}).integer, 0);
  EXPECT_EQ(test::metric(get(a, "/metrics").body, "kvshrink_contexts_budget_count"), 3);
  (void)c2;
}

}  // namespace
}  // namespace kvs
