// The grid runner on stories260K (it cannot retrieve; the point is that the harness runs end to
// end): every unit writes one line with the documented fields, a rerun skips finished lines, a line
// cut by a kill is redone, a different configuration is refused, and the report renders.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/error.h"
#include "core/mapped_file.h"
#include "eval/data.h"
#include "eval/results.h"
#include "eval/runner.h"
#include "eval_test_util.h"
#include "kernels/ops.h"
#include "runtime/compression_spec.h"
#include "runtime/session.h"

namespace kvs::eval {
namespace {
using nlohmann::json;

std::string lower_ascii(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

EvalOptions tiny_grid(const std::string& out) {
  EvalOptions o;
  o.tasks = {"niah", "ruler_vt", "squad_multi", "ppl_wikitext2"};
  for (const char* p : {"full", "snapkv", "h2o:recent_fraction=0.25", "snapkv:allocator=nucleus:mass=0.8@auto"}) o.presses.push_back(parse_press_entry(p));
  o.keeps = {0.5, 0.25};
  o.task.lengths = {512};
  o.task.depths = {0.5};
  o.task.samples = 1;
  o.task.max_new = 8;
  o.task.ppl_tokens = 128;
  o.data_dir = test::data_dir();
  o.out_dir = out;
  o.progress = false;
  return o;
}

std::vector<json> read_lines(const std::string& path, size_t* malformed = nullptr) {
  std::vector<json> v;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    try {
      v.push_back(json::parse(line));
    } catch (const std::exception&) {
      if (malformed) ++*malformed;
    }
  }
  return v;
}

EngineParams two_threads() {
  EngineParams ep;
  ep.n_threads = 2;
  return ep;
}

TEST(EvalRunner, PressEntries) {
  const auto e = parse_press_entry("snapkv:window_size=16:kernel_size=3");
  EXPECT_EQ(e.name, "snapkv");
  EXPECT_EQ(e.label, "snapkv:window_size=16:kernel_size=3");
  EXPECT_EQ(e.params.at("window_size"), "16");
  EXPECT_FALSE(e.adaptive);
  EXPECT_TRUE(parse_press_entry("snapkv:allocator=nucleus@auto").adaptive);
  EXPECT_TRUE(parse_press_entry("snapkv:allocator=nucleus").adaptive);  // adaptive with or without @auto
  EXPECT_THROW(parse_press_entry("adakv@auto"), Error);                  // a fixed press cannot be @auto
  EXPECT_THROW(parse_press_entry("nope"), Error);
  EXPECT_THROW(parse_press_entry("snapkv:bogus=1"), Error);
}

TEST(EvalRunner, TinyGridWritesResumesAndReports) {
  test::TempDir d("eval_runner");
  const EvalOptions o = tiny_grid(d.str());
  const auto s = run_eval(o, test::stories(), two_threads());
  // per sample: full (1) + snapkv, h2o x 2 keeps (4) + nucleus@auto (1); perplexity skips @auto
  EXPECT_EQ(s.planned, 6u * 3 + 5u);
  EXPECT_EQ(s.failed, 0u);
  EXPECT_EQ(s.ran, s.planned);
  const auto lines = read_lines(s.results_path);
  ASSERT_EQ(lines.size(), s.planned);
  for (const auto& r : lines) {
    SCOPED_TRACE(r.dump().substr(0, 200));
    for (const char* k : {"task", "sample", "press", "press_name", "keep", "keep_label", "metric", "score", "full_bytes",
                          "kept_bytes", "peak_bytes", "full_slots", "kept_slots", "measured_keep", "prefill_s",
                          "compress_s", "question_prefill_s", "decode_s", "total_s", "meta"})
      EXPECT_TRUE(r.contains(k)) << k;
    EXPECT_LE(r["kept_bytes"].get<size_t>(), r["full_bytes"].get<size_t>());
    const std::string press = r["press_name"];
    if (r["keep_label"] == "auto") {
      EXPECT_TRUE(r["keep"].is_null());
      // The adaptive press compressed for real and reported what it chose.
      ASSERT_TRUE(r.contains("keep_chosen"));
      EXPECT_LT(r["measured_keep"].get<double>(), 1.0);
      EXPECT_NEAR(r["measured_keep"].get<double>(), r["keep_chosen"].get<double>(), 1e-6);
    } else if (press != "full") {
      EXPECT_NEAR(r["measured_keep"].get<double>(), r["keep"].get<double>(), 0.02);
    } else {
      EXPECT_EQ(r["measured_keep"].get<double>(), 1.0);
    }
    if (r["metric"] == "nll") {
      // The line's score is the mean of its per-token NLLs (recomputed here).
      ASSERT_EQ(r["nll"].size(), 127u);
      double m = 0;
      for (const auto& x : r["nll"]) m += x.get<double>() / 127.0;
      EXPECT_NEAR(r["score"].get<double>(), m, 1e-4);
      EXPECT_GT(m, 0.0);
    } else {
      // One answer per question, aligned with its references; the line's score is the mean of the
      // per-question scores, each recomputed here for the string-match metrics.
      ASSERT_EQ(r["answers"].size(), r["references"].size());
      ASSERT_EQ(r["answers"].size(), r["scores"].size());
      ASSERT_EQ(r["answers"].size(), r["questions"].size());
      double mean = 0;
      for (size_t i = 0; i < r["scores"].size(); ++i) {
        mean += r["scores"][i].get<double>() / static_cast<double>(r["scores"].size());
        if (r["metric"] == "string_match_all") {
          const std::string a = lower_ascii(r["answers"][i].get<std::string>());
          double hit = 0;
          for (const auto& ref : r["references"][i]) hit += a.find(lower_ascii(ref.get<std::string>())) != std::string::npos;
          EXPECT_DOUBLE_EQ(r["scores"][i].get<double>(), hit / static_cast<double>(r["references"][i].size())) << i;
        }
      }
      EXPECT_NEAR(r["score"].get<double>(), mean, 1e-9);
    }
  }

  // a rerun finds everything done
  const auto s2 = run_eval(o, test::stories(), two_threads());
  EXPECT_EQ(s2.ran, 0u);
  EXPECT_EQ(s2.skipped, s.planned);

  // a kill in the middle of the last line: that line is redone on a line of its own
  std::string all = read_file(s.results_path);
  all.resize(all.size() - 40);
  {
    std::ofstream f(s.results_path, std::ios::binary | std::ios::trunc);
    f << all;
  }
  const auto s3 = run_eval(o, test::stories(), two_threads());
  EXPECT_EQ(s3.ran, 1u);
  size_t bad = 0;
  EXPECT_EQ(read_lines(s.results_path, &bad).size(), s.planned);
  EXPECT_EQ(bad, 1u);

  // other settings in the same directory are refused
  EvalOptions other = o;
  other.task.seed = 1;
  EXPECT_THROW(run_eval(other, test::stories(), two_threads()), Error);

  // the report: tables always, plots with matplotlib
  if (std::filesystem::exists("/usr/bin/python3")) {
    EXPECT_EQ(render_report(d.str(), std::string(KVS_SOURCE_DIR) + "/eval/report.py"), 0);
    const std::string md = read_file((d.path / "report.md").string());
    for (const char* t : {"### niah", "### ruler_vt", "### squad_multi", "### ppl_wikitext2", "## Memory", "## Time"})
      EXPECT_NE(md.find(t), std::string::npos) << t;
  }
}

// --shard K/N: two slices, run apart, write exactly the unsharded run's lines between them (every
// field but the times), each sample in one slice only; `merge_results` joins them into that run.
// Folders of another configuration, a slice beside a non-slice, an output folder that already has
// results are refused; a missing slice and a line that differs between copies are reported.
std::map<std::string, json> by_key_without_times(const std::string& path) {
  std::map<std::string, json> m;
  for (json r : read_lines(path)) {
    for (auto it = r.begin(); it != r.end();) {
      const std::string k = it.key();
      if (k.size() > 2 && k.substr(k.size() - 2) == "_s")
        it = r.erase(it);
      else
        ++it;
    }
    m[r["task"].get<std::string>() + "|" + r["press"].get<std::string>() + "|" + r["keep_label"].get<std::string>() +
      "|" + r["sample"].get<std::string>()] = r;
  }
  return m;
}

TEST(EvalRunner, ShardsTogetherAreTheUnshardedRun) {
  test::TempDir d("eval_shards");
  EvalOptions o = tiny_grid((d.path / "all").string());
  o.tasks = {"niah", "ruler_vt", "ppl_wikitext2"};
  o.task.depths = {0.0, 0.5, 1.0};  // 3 NIAH samples + 1 + 1: slices of 3 and 2 samples
  ASSERT_EQ(run_eval(o, test::stories(), two_threads()).failed, 0u);
  std::vector<std::string> slices;
  std::set<std::string> samples_seen;
  for (int k = 1; k <= 2; ++k) {
    EvalOptions sk = o;
    sk.out_dir = (d.path / fmt::format("shard{}", k)).string();
    sk.shard_k = k;
    sk.shard_n = 2;
    const auto s = run_eval(sk, test::stories(), two_threads());
    EXPECT_EQ(s.failed, 0u);
    EXPECT_GT(s.ran, 0u);
    for (const auto& r : read_lines(s.results_path)) {
      const std::string sample = r["task"].get<std::string>() + " " + r["sample"].get<std::string>();
      if (k == 1)
        samples_seen.insert(sample);
      else
        EXPECT_FALSE(samples_seen.count(sample)) << sample << " is in both slices";
    }
    slices.push_back(sk.out_dir);
  }
  EXPECT_EQ(samples_seen.size(), 3u);  // samples 0, 2, 4 of 5 in the first slice
  const std::string merged = (d.path / "merged").string();
  const MergeSummary m = merge_results(slices, merged);
  EXPECT_EQ(m.shard_n, 2);
  EXPECT_TRUE(m.missing_shards.empty());
  EXPECT_EQ(m.conflicts, 0u);
  EXPECT_EQ(m.duplicates, 0u);
  const auto want = by_key_without_times((d.path / "all" / "results.jsonl").string());
  const auto got = by_key_without_times((d.path / "merged" / "results.jsonl").string());
  EXPECT_EQ(got.size(), want.size());
  EXPECT_EQ(m.lines, want.size());
  for (const auto& [k, r] : want) {
    ASSERT_TRUE(got.count(k)) << k << " missing from the merge";
    EXPECT_EQ(got.at(k), r) << k;
  }
  const json run = json::parse(read_file((d.path / "merged" / "run.json").string()));
  EXPECT_FALSE(run.contains("shard"));
  EXPECT_EQ(run["shards"], json({"1/2", "2/2"}));
  EXPECT_EQ(run["seed"], 0);

  // Refusals: the merge's own folder again; a slice beside the unsharded folder; another seed.
  EXPECT_THROW(merge_results(slices, merged), Error);
  EXPECT_THROW(merge_results({(d.path / "all").string(), slices[1]}, (d.path / "m2").string()), Error);
  EvalOptions seed1 = o;
  seed1.out_dir = (d.path / "seed1").string();
  seed1.task.seed = 1;
  seed1.tasks = {"ruler_vt"};
  ASSERT_EQ(run_eval(seed1, test::stories(), two_threads()).failed, 0u);
  try {
    merge_results({(d.path / "all").string(), seed1.out_dir}, (d.path / "m3").string());
    ADD_FAILURE() << "folders of two seeds merged";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("seed"), std::string::npos) << e.what();
  }
  // One slice alone: merged, the other reported missing.
  const MergeSummary half = merge_results({slices[0]}, (d.path / "m4").string());
  EXPECT_EQ(half.missing_shards, std::vector<int>({2}));
  // The same slice twice, one line's score changed in the copy: one conflict, the rest duplicates.
  const std::string copy = (d.path / "shard1b").string();
  std::filesystem::create_directories(copy);
  std::filesystem::copy_file(slices[0] + "/run.json", copy + "/run.json");
  std::vector<json> lines = read_lines(slices[0] + "/results.jsonl");
  lines[0]["score"] = lines[0]["score"].get<double>() + 1;
  {
    std::ofstream f(copy + "/results.jsonl");
    for (const auto& r : lines) f << r.dump() << "\n";
  }
  const MergeSummary twice = merge_results({slices[0], copy}, (d.path / "m5").string());
  EXPECT_EQ(twice.conflicts, 1u);
  EXPECT_EQ(twice.duplicates, lines.size() - 1);
  EXPECT_EQ(twice.lines, lines.size());
  // run.json records whether the CPU multiplies BF16 (KVzip's precision=auto); a slice made on a
  // CPU that differs there still merges (the field is informational).
  json r1 = json::parse(read_file(slices[0] + "/run.json"));
  EXPECT_EQ(r1["native_bf16"], kernels::native_bf16());
  r1["native_bf16"] = !kernels::native_bf16();
  {
    std::ofstream f(copy + "/run.json");
    f << r1.dump(1) << "\n";
  }
  EXPECT_NO_THROW(merge_results({slices[1], copy}, (d.path / "m6").string()));
}

TEST(EvalRunner, ShardTextIsParsedOrRefused) {
  int k = 0, n = 0;
  parse_shard("2/4", k, n);
  EXPECT_EQ(k, 2);
  EXPECT_EQ(n, 4);
  parse_shard("1/1", k, n);
  EXPECT_EQ(k, 1);
  for (const char* bad : {"0/2", "3/2", "2", "a/b", "1/0", "1/2/3", "-1/2", "1/", "/2", "", " 1/2", "1/99999999"})
    EXPECT_THROW(parse_shard(bad, k, n), Error) << bad;
  test::TempDir d("eval_bad_shard");
  EvalOptions o = tiny_grid(d.str());
  o.shard_k = 3;
  o.shard_n = 2;
  EXPECT_THROW(run_eval(o, test::stories(), two_threads()), Error);
}

// A known case: v7s1 at full cache retrieves the needle, so the line holds the reference in its
// answer, a per-question score of 1 and a line score of 1; a press that evicts it (StreamingLLM
// at keep 0.1 keeps the first and last tokens only; the needle is at 50%) scores 0 on the same
// sample with the references unchanged.
TEST(EvalRunner, KnownAnswerLines) {
  test::TempDir d("eval_runner_known");
  EvalOptions o = tiny_grid(d.str());
  o.tasks = {"niah"};
  o.presses = {parse_press_entry("full"), parse_press_entry("streaming_llm")};
  o.keeps = {0.1};
  auto model = Model::load(std::string(KVS_SOURCE_DIR) + "/testbed/models/v7s1/model-f16.gguf");
  const auto s = run_eval(o, *model, two_threads());
  ASSERT_EQ(s.ran, 2u);
  json full, streaming;
  for (const auto& r : read_lines(s.results_path)) (r["press"] == "full" ? full : streaming) = r;
  const std::string ref = full["references"][0][0].get<std::string>();
  EXPECT_EQ(ref.size(), 7u);  // a 7-digit value
  EXPECT_NE(full["answers"][0].get<std::string>().find(ref), std::string::npos) << full["answers"][0];
  EXPECT_EQ(full["scores"][0].get<double>(), 1.0);
  EXPECT_EQ(full["score"].get<double>(), 1.0);
  EXPECT_EQ(streaming["references"], full["references"]);
  EXPECT_EQ(streaming["answers"][0].get<std::string>().find(ref), std::string::npos) << streaming["answers"][0];
  EXPECT_EQ(streaming["score"].get<double>(), 0.0);
}

TEST(EvalRunner, QueryAwareLines) {
  test::TempDir d("eval_runner_qa");
  EvalOptions o = tiny_grid(d.str());
  o.tasks = {"squad_multi"};
  o.presses = {parse_press_entry("snapkv")};
  o.keeps = {0.5};
  o.query_aware = true;
  const auto s = run_eval(o, test::stories(), two_threads());
  ASSERT_EQ(s.ran, 1u);
  const auto lines = read_lines(s.results_path);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(lines[0]["query_aware"].get<bool>());
  EXPECT_GT(lines[0]["compress_s"].get<double>(), 0.0);
}

// A query-aware line's memory columns are those of the compression that answered — context +
// question prefilled once and compressed together — not of a query-agnostic compression of the
// context alone. Reproduced here from the sample's tokens through the runtime: the same press
// compresses context + question; slots, bytes, measured and chosen keep must equal the line's.
// SnapKV (fixed budget: round(keep x (context + question)) per head) and GVote (adaptive: the keep
// it chose with the question in view).
TEST(EvalRunner, QueryAwareLinesReportTheAnsweringCompression) {
  test::TempDir d("eval_runner_qa_memory");
  EvalOptions o = tiny_grid(d.str());
  o.tasks = {"niah"};
  o.presses = {parse_press_entry("snapkv"), parse_press_entry("gvote")};
  o.keeps = {0.5};
  o.query_aware = true;
  const Model& m = test::stories();
  const auto s = run_eval(o, m, two_threads());
  ASSERT_EQ(s.ran, 2u);
  const auto lines = read_lines(s.results_path);
  ASSERT_EQ(lines.size(), 2u);

  // The sample's tokens, as the runner makes them.
  DataStore data(o.data_dir);
  Prompter prompter(*m.tokenizer, o.prompt);
  TaskEnv env(data, prompter, o.task);
  const Task& t = find_task("niah");
  const auto specs = t.plan(o.task);
  ASSERT_EQ(specs.size(), 1u);
  const Sample smp = t.make(specs[0], env);
  ASSERT_EQ(smp.questions.size(), 1u);
  const auto ctx = prompter.context_tokens(smp.context);
  const auto q = prompter.question_tokens(smp.context, ctx, smp.questions[0]).ids;

  Engine engine(m, two_threads());
  const size_t heads = static_cast<size_t>(engine.kv_layout().n_heads_total());
  for (const auto& line : lines) {
    const std::string press = line["press_name"].get<std::string>();
    SCOPED_TRACE(press);
    SpecArgs a;
    a.press = press;
    if (press == "snapkv") a.keep = 0.5;
    CompressedContext c(engine, make_compression_spec(a));
    c.set_context(ctx);
    std::vector<float> logits;
    CompressResult r;
    Sequence seq = c.prefill_query_aware(q, &logits, nullptr, nullptr, &r);
    EXPECT_EQ(line["context_tokens"].get<size_t>(), ctx.size());
    EXPECT_EQ(line["full_slots"].get<size_t>(), (ctx.size() + q.size()) * heads);
    EXPECT_EQ(line["kept_slots"].get<size_t>(), seq.cache->total_slots());
    EXPECT_EQ(line["kept_bytes"].get<size_t>(), seq.cache->bytes_held());
    EXPECT_EQ(line["full_bytes"].get<size_t>(), r.bytes_before);
    EXPECT_NEAR(line["measured_keep"].get<double>(),
                static_cast<double>(seq.cache->total_slots()) / static_cast<double>((ctx.size() + q.size()) * heads), 1e-6);
    EXPECT_EQ(line["per_question"]["kept_slots"][0].get<size_t>(), seq.cache->total_slots());
    EXPECT_GE(line["peak_bytes"].get<size_t>(), line["kept_bytes"].get<size_t>());
    EXPECT_EQ(line["prefill_s"].get<double>(), 0.0);  // no context prefill of its own
    if (press == "snapkv") {
      // The definition: round(keep x len) per head, len = context + question.
      EXPECT_EQ(seq.cache->total_slots(), heads * static_cast<size_t>(std::llround(0.5 * static_cast<double>(ctx.size() + q.size()))));
      EXPECT_FALSE(line.contains("keep_chosen"));
    } else {
      ASSERT_TRUE(r.keep_chosen.has_value());
      ASSERT_TRUE(line.contains("keep_chosen"));
      EXPECT_NEAR(line["keep_chosen"].get<double>(), *r.keep_chosen, 1e-6);
    }
  }
}

}  // namespace
}  // namespace kvs::eval
