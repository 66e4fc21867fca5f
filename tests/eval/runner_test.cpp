// The grid runner on stories260K (it cannot retrieve; the point is that the harness runs end to
// end): every unit writes one line with the documented fields, a rerun skips finished lines, a line
// cut by a kill is redone, a different configuration is refused, and the report renders.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/mapped_file.h"
#include "eval/runner.h"
#include "eval_test_util.h"

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

}  // namespace
}  // namespace kvs::eval
