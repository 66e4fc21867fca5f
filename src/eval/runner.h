// The evaluation grid: tasks x samples x presses x keep ratios on one model. For each sample the
// context is prefilled and compressed once (query-agnostic, or per question with query_aware),
// every question is answered greedily on a fork, scored, and one JSON line is appended to
// out_dir/results.jsonl with the answers, scores, KV bytes held and times. With query_aware the
// context is not prefilled alone: each question prefills context + question once, compresses it
// and answers, and the line's memory columns (full/kept slots and bytes, measured_keep,
// keep_chosen) are those compressions' (means over the questions; `per_question` each one's).
// Perplexity tasks run
// the text through streaming_perplexity under a budget of keep x window tokens per head.
// Lines already in results.jsonl are skipped, so an interrupted run resumes where it stopped.
#pragma once
#include <string>
#include <vector>

#include "eval/prompt.h"
#include "eval/task.h"
#include "press/registry.h"
#include "runtime/engine.h"

namespace kvs::eval {

// One press of the grid: "name", "name:key=value:key=value". A press that chooses its own keep
// ratio (adaptive: GVote, a calibrated press) runs once per sample, placed at its measured keep;
// "@auto" says so explicitly and is refused for a fixed-budget press.
struct PressEntry {
  std::string label;  // as given, without "@auto"
  std::string name;
  ParamMap params;
  bool adaptive = false;
};
PressEntry parse_press_entry(const std::string& s);  // throws kvs::Error (unknown press, bad option)

struct EvalOptions {
  std::vector<std::string> tasks;      // names or groups (ruler, longbench, ppl, all)
  std::vector<PressEntry> presses;
  std::vector<double> keeps{1.0, 0.5, 0.25, 0.1};
  TaskConfig task;
  PromptFormat prompt;
  bool query_aware = false;
  int sinks = -1, window = -1;         // -1: each press's default
  int ppl_chunk = 8;
  std::string data_dir;                // empty: DataStore::default_root()
  std::string out_dir;
  bool progress = true;
  bool fresh = false;                  // discard the results already in out_dir
  // --shard K/N: run only the samples whose index in the grid's (deterministic) sample order is
  // K-1 modulo N, every press and keep of each (one shared prefill per sample, as unsharded).
  // N runs with K = 1..N, on any machines, together write exactly the unsharded lines;
  // merge_results joins their folders. shard_n 1: everything.
  int shard_k = 1, shard_n = 1;
};

struct EvalSummary {
  size_t planned = 0, skipped = 0, ran = 0, failed = 0;
  double seconds = 0;
  std::string results_path;
};

// Default target lengths for a model: n/4, n/2, n with n = min(n_ctx_train, 4096).
std::vector<int> default_lengths(const Model& model);

EvalSummary run_eval(const EvalOptions& o, const Model& model, const EngineParams& ep);

// Parses "K/N" (1 <= K <= N <= 1,000,000) into k, n; throws kvs::Error naming the text otherwise.
void parse_shard(const std::string& text, int& k, int& n);

// Runs `python script out_dir` (report.md + plots). Returns the exit status, or -1 if python is
// not available. `script` empty: the source tree's eval/report.py.
int render_report(const std::string& out_dir, std::string script = "", std::string python = "/usr/bin/python3");
std::string default_report_script();

}  // namespace kvs::eval
