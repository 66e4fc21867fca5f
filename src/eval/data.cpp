#include "eval/data.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/mapped_file.h"
#include "core/paths.h"
#include "eval/text_util.h"

namespace kvs::eval {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json parse_json(const std::string& text, const std::string& file) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail("{}: invalid JSON: {}", file, e.what());
  }
}

std::vector<std::string> read_lines(const std::string& text) {
  std::vector<std::string> out;
  for (auto& l : split(text, '\n')) {
    std::string t = trim(l);
    if (!t.empty()) out.push_back(t);
  }
  return out;
}

bool lower_alpha(const std::string& w) {
  if (w.empty()) return false;
  for (char c : w)
    if (c < 'a' || c > 'z') return false;
  return true;
}

std::vector<std::string> every_8th(std::vector<std::string> v) {
  std::vector<std::string> w;
  for (auto& x : v)
    if (lower_alpha(x)) w.push_back(x);
  std::sort(w.begin(), w.end());
  w.erase(std::unique(w.begin(), w.end()), w.end());
  std::vector<std::string> out;
  for (size_t i = 0; i < w.size(); i += 8) out.push_back(w[i]);
  return out;
}

}  // namespace

DataStore::DataStore(std::string root) : root_(std::move(root)) {
  if (!fs::is_directory(root_)) fail("data directory '{}' does not exist (give --data DIR or set KVSHRINK_DATA)", root_);
}

std::string DataStore::default_root() {
  if (const char* e = std::getenv("KVSHRINK_DATA"); e && *e) return e;
  const std::string share = share_dir();
  return share.empty() ? std::string("share/kvshrink/data") : share + "/data";
}

std::string DataStore::path(const std::string& rel) const {
  const std::string p = (fs::path(root_) / rel).string();
  if (!fs::exists(p))
    fail("data file '{}' is missing (data directory '{}'; the data shipped with kvshrink holds NIAH, RULER, SQuAD and HotpotQA only: "
         "give --data DIR or set KVSHRINK_DATA to a folder with the other benchmarks, docs/evaluation.md)",
         p, root_);
  return p;
}

const std::string& DataStore::text(const std::string& rel) {
  auto it = texts_.find(rel);
  if (it != texts_.end()) return it->second;
  return texts_[rel] = read_file(path(rel));
}

const std::string& DataStore::niah_essays() {
  const std::string key = "#niah_essays";
  auto it = texts_.find(key);
  if (it != texts_.end()) return it->second;
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(path("niah_paul_graham_essays/essays")))
    if (e.path().extension() == ".txt") files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  std::string all;
  for (const auto& f : files) {
    if (!all.empty()) all += "\n\n";
    all += trim(read_file(path("niah_paul_graham_essays/essays/" + f)));
  }
  if (all.empty()) fail("{}: no essays found", path("niah_paul_graham_essays/essays"));
  return texts_[key] = std::move(all);
}

const std::string& DataStore::ruler_essays() {
  const std::string key = "#ruler_essays";
  auto it = texts_.find(key);
  if (it != texts_.end()) return it->second;
  const std::string f = path("ruler/PaulGrahamEssays.json");
  const json j = parse_json(read_file(f), f);
  if (!j.contains("text") || !j["text"].is_string()) fail("{}: expected an object with a string field 'text'", f);
  return texts_[key] = j["text"].get<std::string>();
}

const WordPools& DataStore::words() {
  if (words_) return *words_;
  auto w = std::make_unique<WordPools>();
  w->nouns = read_lines(text("ruler/wonderwords/nounlist.txt"));
  w->adjs = read_lines(text("ruler/wonderwords/adjectivelist.txt"));
  w->verbs = read_lines(text("ruler/wonderwords/verblist.txt"));
  w->eval_nouns = every_8th(w->nouns);
  w->eval_adjs = every_8th(w->adjs);
  std::set<std::string> all(w->nouns.begin(), w->nouns.end());
  all.insert(w->adjs.begin(), w->adjs.end());
  all.insert(w->verbs.begin(), w->verbs.end());
  w->all_words.assign(all.begin(), all.end());
  words_ = std::move(w);
  return *words_;
}

const std::vector<SquadParagraph>& DataStore::squad_dev() {
  if (squad_) return *squad_;
  const std::string f = path("squad/dev-v1.1.json");
  const json j = parse_json(read_file(f), f);
  auto out = std::make_unique<std::vector<SquadParagraph>>();
  try {
    for (const auto& art : j.at("data"))
      for (const auto& para : art.at("paragraphs")) {
        SquadParagraph p;
        p.title = art.at("title").get<std::string>();
        p.context = para.at("context").get<std::string>();
        for (const auto& qa : para.at("qas")) {
          SquadQa q;
          q.id = qa.at("id").get<std::string>();
          q.question = qa.at("question").get<std::string>();
          for (const auto& a : qa.at("answers")) q.answers.push_back(a.at("text").get<std::string>());
          p.qas.push_back(std::move(q));
        }
        out->push_back(std::move(p));
      }
  } catch (const json::exception& e) {
    fail("{}: unexpected layout (expected SQuAD v1.1 data/paragraphs/qas): {}", f, e.what());
  }
  squad_ = std::move(out);
  return *squad_;
}

const std::vector<HotpotItem>& DataStore::hotpot() {
  if (hotpot_) return *hotpot_;
  const std::string f = path("hotpotqa/hotpot_dev_distractor_v1.first100.json");
  const json j = parse_json(read_file(f), f);
  auto out = std::make_unique<std::vector<HotpotItem>>();
  try {
    for (const auto& r : j) {
      HotpotItem h;
      h.question = r.at("question").get<std::string>();
      h.answer = r.at("answer").get<std::string>();
      for (const auto& c : r.at("context")) {
        std::string body;
        for (const auto& s : c.at(1)) body += s.get<std::string>();
        h.paragraphs.emplace_back(c.at(0).get<std::string>(), body);
      }
      out->push_back(std::move(h));
    }
  } catch (const json::exception& e) {
    fail("{}: unexpected layout (expected HotpotQA records with question/answer/context): {}", f, e.what());
  }
  hotpot_ = std::move(out);
  return *hotpot_;
}

const std::vector<Gsm8kItem>& DataStore::gsm8k(const std::string& split_name) {
  auto it = gsm8k_.find(split_name);
  if (it != gsm8k_.end()) return it->second;
  const std::string f = "gsm8k/" + split_name + ".jsonl";
  std::vector<Gsm8kItem> v;
  for (const auto& line : read_lines(text(f))) {
    const json j = parse_json(line, path(f));
    if (!j.contains("question") || !j.contains("answer")) fail("{}: a line lacks question/answer", path(f));
    v.push_back({j["question"].get<std::string>(), j["answer"].get<std::string>()});
  }
  return gsm8k_[split_name] = std::move(v);
}

const std::vector<LongBenchItem>& DataStore::longbench(const std::string& task) {
  auto it = longbench_.find(task);
  if (it != longbench_.end()) return it->second;
  const std::string f = "longbench/" + task + ".jsonl";
  std::vector<LongBenchItem> v;
  for (const auto& line : read_lines(text(f))) {
    const json j = parse_json(line, path(f));
    LongBenchItem b;
    try {
      b.id = j.value("_id", std::string());
      b.input = j.at("input").get<std::string>();
      b.context = j.at("context").get<std::string>();
      b.answers = j.at("answers").get<std::vector<std::string>>();
      if (j.contains("all_classes") && j["all_classes"].is_array())
        b.all_classes = j["all_classes"].get<std::vector<std::string>>();
      b.length = j.value("length", 0);
    } catch (const json::exception& e) {
      fail("{}: unexpected LongBench record: {}", path(f), e.what());
    }
    v.push_back(std::move(b));
  }
  return longbench_[task] = std::move(v);
}

std::string DataStore::longbench_prompt(const std::string& task) {
  const std::string f = path("longbench/config/dataset2prompt.json");
  const json j = parse_json(text("longbench/config/dataset2prompt.json"), f);
  if (!j.contains(task)) fail("{}: no prompt for task '{}'", f, task);
  return j[task].get<std::string>();
}

int DataStore::longbench_maxlen(const std::string& task) {
  const std::string f = path("longbench/config/dataset2maxlen.json");
  const json j = parse_json(text("longbench/config/dataset2maxlen.json"), f);
  if (!j.contains(task)) fail("{}: no max length for task '{}'", f, task);
  return j[task].get<int>();
}

}  // namespace kvs::eval
