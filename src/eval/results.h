// results.jsonl: one JSON object per line, one line per (task, press, keep, sample). Appended and
// flushed line by line, so an interrupted run loses at most the line being written; a rerun reads
// the finished keys and skips them. run.json records what the results depend on (model, seed,
// prompt format, ...) so a rerun with different settings cannot mix into the same file.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdio>
#include <set>
#include <string>
#include <vector>

namespace kvs::eval {

std::string result_key(const std::string& task, const std::string& press, const std::string& keep,
                       const std::string& sample);
std::string result_key(const nlohmann::json& record);  // from the fields task/press/keep_label/sample
std::string result_key(const nlohmann::ordered_json& record);

class ResultsFile {
 public:
  // Reads the finished keys of an existing file (malformed lines, e.g. a line cut by a kill, are
  // counted and ignored) and opens it for appending.
  explicit ResultsFile(std::string path);
  ~ResultsFile();
  ResultsFile(const ResultsFile&) = delete;
  ResultsFile& operator=(const ResultsFile&) = delete;

  bool done(const std::string& key) const { return done_.count(key) > 0; }
  void append(const nlohmann::ordered_json& record);  // one line, flushed
  size_t existing() const { return existing_; }
  size_t malformed() const { return malformed_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  std::set<std::string> done_;
  size_t existing_ = 0, malformed_ = 0;
};

// Writes dir/run.json (identity + info), or checks that the existing one has the same values for
// every key of `identity` (a null value matching an absent key); throws kvs::Error naming the
// differing fields otherwise. `info` (e.g. the model's path) is recorded but not compared.
void check_run_identity(const std::string& dir, const nlohmann::json& identity, const nlohmann::json& info = {});

// Joins the results of several output folders — typically the slices of one grid run with
// `eval --shard K/N` on different machines — into out_dir (results.jsonl + run.json; the report is
// rendered by the caller). Every folder must hold run.json and results.jsonl, and their run.json
// must agree on every field the results depend on (everything but the model's path and name,
// n_batch and the shard): a folder of another configuration is refused, naming the field. A line
// present in several folders is written once (the first); copies that differ in more than their
// times are counted as conflicts. out_dir must not hold results yet.
struct MergeSummary {
  size_t lines = 0;                 // written
  size_t duplicates = 0;            // identical copies skipped
  size_t conflicts = 0;             // copies that differ beyond their times (the first kept)
  size_t malformed = 0;             // unreadable lines skipped
  int shard_n = 0;                  // N of the merged shards (0: the folders were not shards)
  std::vector<int> missing_shards;  // K in 1..N with no folder
};
MergeSummary merge_results(const std::vector<std::string>& dirs, const std::string& out_dir);

}  // namespace kvs::eval
