#include "eval/results.h"

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/error.h"
#include "core/mapped_file.h"

namespace kvs::eval {
using nlohmann::json;

std::string result_key(const std::string& task, const std::string& press, const std::string& keep,
                       const std::string& sample) {
  return task + "\t" + press + "\t" + keep + "\t" + sample;
}

std::string result_key(const json& r) {
  return result_key(r.at("task").get<std::string>(), r.at("press").get<std::string>(), r.at("keep_label").get<std::string>(),
                    r.at("sample").get<std::string>());
}

std::string result_key(const nlohmann::ordered_json& r) {
  return result_key(r.at("task").get<std::string>(), r.at("press").get<std::string>(), r.at("keep_label").get<std::string>(),
                    r.at("sample").get<std::string>());
}

ResultsFile::ResultsFile(std::string path) : path_(std::move(path)) {
  bool ends_with_newline = true;
  if (std::filesystem::exists(path_)) {
    std::ifstream in(path_, std::ios::binary);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      try {
        done_.insert(result_key(json::parse(line)));
        ++existing_;
      } catch (const std::exception&) {
        ++malformed_;
      }
    }
    const std::string all = read_file(path_);
    ends_with_newline = all.empty() || all.back() == '\n';
  }
  f_ = std::fopen(path_.c_str(), "ab");
  if (!f_) fail("cannot open '{}' for appending", path_);
  if (!ends_with_newline) std::fputc('\n', f_);  // a line cut short stays on its own (malformed) line
}

ResultsFile::~ResultsFile() {
  if (f_) std::fclose(f_);
}

void ResultsFile::append(const nlohmann::ordered_json& r) {
  const std::string line = r.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
  if (std::fwrite(line.data(), 1, line.size(), f_) != line.size() || std::fflush(f_) != 0)
    fail("cannot write to '{}'", path_);
  done_.insert(result_key(r));
}

void check_run_identity(const std::string& dir, const json& identity, const json& info) {
  const std::string p = (std::filesystem::path(dir) / "run.json").string();
  if (std::filesystem::exists(p)) {
    json old;
    try {
      old = json::parse(read_file(p));
    } catch (const std::exception& e) {
      fail("{}: unreadable ({}); remove it or use another output directory", p, e.what());
    }
    std::string diff;
    // A null identity field matches an absent one (fields added later, e.g. question_template).
    for (const auto& [k, v] : identity.items())
      if (old.contains(k) ? old[k] != v : !v.is_null())
        diff += fmt::format("\n  {}: was {}, now {}", k, old.contains(k) ? old[k].dump() : "(absent)", v.dump());
    if (!diff.empty())
      fail("{} holds results of a different configuration:{}\nuse another -o directory, or --fresh to discard them", dir, diff);
    return;
  }
  json all = identity;
  if (info.is_object())
    for (const auto& [k, v] : info.items()) all[k] = v;
  std::ofstream out(p);
  out << all.dump(1) << "\n";
  if (!out) fail("cannot write '{}'", p);
}

namespace {

// run.json fields that do not change a result line: where the model was read from, its name,
// the prefill batch, and which slice of the grid a folder holds. Also native_bf16 (the CPU's
// BF16 products): it changes only lines whose press says precision=auto (KVzip), whose scores
// differ between a BF16 and an f32 repeat pass by rounding — recorded for the reader, not a reason
// to refuse slices run on different CPUs.
bool informational(const std::string& key) {
  return key == "model" || key == "model_name" || key == "n_batch" || key == "shard" || key == "merged_from" ||
         key == "shards" || key == "native_bf16";
}

// A record without the fields that vary from run to run of the same unit (its times).
// Compared as an unordered object: the same fields in another order are the same line.
json without_times(const nlohmann::ordered_json& line) {
  json r = json::parse(line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
  for (auto it = r.begin(); it != r.end();) {
    const std::string& k = it.key();
    if (k.size() > 2 && k.compare(k.size() - 2, 2, "_s") == 0)
      it = r.erase(it);
    else
      ++it;
  }
  return r;
}

}  // namespace

MergeSummary merge_results(const std::vector<std::string>& dirs, const std::string& out_dir) {
  namespace fs = std::filesystem;
  if (dirs.empty()) fail("eval merge: no folders to merge");
  const std::string out_results = (fs::path(out_dir) / "results.jsonl").string();
  if (fs::exists(out_results)) fail("eval merge: {} already holds results; merge into a new folder", out_dir);
  std::error_code ec;
  for (const auto& d : dirs)
    if (fs::exists(out_dir) && fs::equivalent(d, out_dir, ec))
      fail("eval merge: the output folder {} is also an input", out_dir);

  MergeSummary sum;
  json first_run;
  std::set<int> shards_seen;
  std::vector<std::string> shard_of;
  std::map<std::string, nlohmann::ordered_json> kept;  // key -> record (times included, fields in their order), first copy
  std::vector<std::string> order;    // keys in the order first seen
  for (size_t i = 0; i < dirs.size(); ++i) {
    const std::string& d = dirs[i];
    const std::string run_path = (fs::path(d) / "run.json").string();
    const std::string res_path = (fs::path(d) / "results.jsonl").string();
    if (!fs::is_regular_file(run_path)) fail("eval merge: {} has no run.json (not an eval output folder?)", d);
    if (!fs::is_regular_file(res_path)) fail("eval merge: {} has no results.jsonl", d);
    json run;
    try {
      run = json::parse(read_file(run_path));
    } catch (const std::exception& e) {
      fail("eval merge: {}: unreadable ({})", run_path, e.what());
    }
    if (!run.is_object()) fail("eval merge: {}: not a JSON object", run_path);
    if (i == 0) {
      first_run = run;
    } else {
      std::string diff;
      std::set<std::string> keys;
      for (const auto& [k, v] : first_run.items()) keys.insert(k);
      for (const auto& [k, v] : run.items()) keys.insert(k);
      for (const auto& k : keys) {
        if (informational(k)) continue;
        const json a = first_run.contains(k) ? first_run[k] : json(nullptr);
        const json b = run.contains(k) ? run[k] : json(nullptr);
        if (a != b) diff += fmt::format("\n  {}: {} in {}, {} in {}", k, a.dump(), dirs[0], b.dump(), d);
      }
      if (!diff.empty()) fail("eval merge: {} and {} hold results of different configurations:{}", dirs[0], d, diff);
    }
    // The shard this folder holds ("K/N"), if any: all folders must be slices of the same N.
    const std::string shard = run.contains("shard") && run["shard"].is_string() ? run["shard"].get<std::string>() : "";
    int k = 0, n = 0;
    if (!shard.empty() && std::sscanf(shard.c_str(), "%d/%d", &k, &n) == 2 && k >= 1 && k <= n) {
      if (sum.shard_n && n != sum.shard_n)
        fail("eval merge: {} holds shard {} but an earlier folder a shard of {}", d, shard, sum.shard_n);
      if (!sum.shard_n && i > 0 && shards_seen.empty())
        fail("eval merge: {} holds shard {} but {} is not a shard", d, shard, dirs[0]);
      sum.shard_n = n;
      shards_seen.insert(k);
    } else if (sum.shard_n) {
      fail("eval merge: {} is not a shard but {} is", d, dirs[0]);
    }
    shard_of.push_back(shard);
    std::ifstream f(res_path);
    std::string line;
    while (std::getline(f, line)) {
      if (line.empty()) continue;
      nlohmann::ordered_json r;
      try {
        r = nlohmann::ordered_json::parse(line);
        if (!r.is_object()) throw std::runtime_error("not an object");
      } catch (const std::exception&) {
        ++sum.malformed;
        continue;
      }
      std::string key;
      try {
        key = result_key(r);
      } catch (const std::exception&) {
        ++sum.malformed;
        continue;
      }
      auto it = kept.find(key);
      if (it == kept.end()) {
        kept.emplace(key, std::move(r));
        order.push_back(key);
      } else if (without_times(it->second) == without_times(r)) {
        ++sum.duplicates;
      } else {
        ++sum.conflicts;
      }
    }
  }
  for (int k = 1; k <= sum.shard_n; ++k)
    if (!shards_seen.count(k)) sum.missing_shards.push_back(k);

  fs::create_directories(out_dir);
  {
    std::ofstream out(out_results);
    for (const auto& key : order) out << kept[key].dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
    if (!out) fail("cannot write '{}'", out_results);
  }
  sum.lines = order.size();
  json run = first_run;
  run.erase("shard");
  run["merged_from"] = dirs;
  if (sum.shard_n) run["shards"] = shard_of;
  std::ofstream out((fs::path(out_dir) / "run.json").string());
  out << run.dump(1) << "\n";
  if (!out) fail("cannot write '{}'", (fs::path(out_dir) / "run.json").string());
  return sum;
}

}  // namespace kvs::eval
