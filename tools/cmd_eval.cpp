// kvshrink eval: run a grid of tasks x presses x keep ratios on one model and write
// DIR/results.jsonl (one line per task, press, keep, sample; resumable), then DIR/report.md and
// plots through eval/report.py. See docs/evaluation.md.
#include <fmt/format.h>

#include <filesystem>

#include "cli_common.h"
#include "core/error.h"
#include "eval/progress.h"
#include "eval/results.h"
#include "eval/runner.h"

namespace kvs::cli {
namespace {

struct EvalCliOptions {
  EngineOptions eng;
  std::vector<std::string> tasks{"niah"};
  std::vector<std::string> presses{"full", "streaming_llm", "h2o", "snapkv"};
  std::vector<double> keeps{1.0, 0.5, 0.25, 0.1};
  std::vector<int> lengths;
  std::vector<double> depths{0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0};
  int samples = 5;
  uint64_t seed = 0;
  bool query_aware = false, chat = false, fresh = false, no_progress = false, no_report = false, list = false;
  std::string system, data, out, report_script, question_template, answer_prefix, shard;
  bool has_answer_prefix = false;
  int max_new = 0, ppl_tokens = 0, ppl_chunk = 8, sinks = -1, window = -1;
};

void list_tasks() {
  for (const auto& t : eval::task_registry())
    fmt::print("{:<26} {:<17} {}\n", t->name(), t->metric(), t->description());
  fmt::print("\ngroups: ruler (every ruler_* task), longbench, ppl, all\n");
}

void report(const std::string& out, const std::string& script);  // eval/report.py on out (below)

void run_eval_cmd(const EvalCliOptions& c) {
  if (c.list) return list_tasks();
  if (c.eng.model.empty()) fail("--model is required");
  if (c.out.empty()) fail("-o DIR is required");
  if (!c.question_template.empty() && c.question_template.find("{question}") == std::string::npos)
    fail("--question-template must contain {{question}}, got '{}'", c.question_template);
  check_output_dir("-o", c.out);
  require_numbers("--keep", c.keeps, 0, 1, /*lo_open=*/true);
  require_numbers("--depths", c.depths, 0, 1);
  require_ints("--lengths", c.lengths, 1, kMaxTokensOption);
  require_int("--sinks", c.sinks, -1, kMaxTokensOption);
  require_int("--window", c.window, -1, kMaxTokensOption);
  int shard_k = 1, shard_n = 1;
  if (!c.shard.empty()) eval::parse_shard(c.shard, shard_k, shard_n);  // refused before the model is loaded
  auto model = Model::load(c.eng.model);
  eval::EvalOptions o;
  o.tasks = c.tasks;
  for (const auto& p : c.presses) o.presses.push_back(eval::parse_press_entry(p));
  o.keeps = c.keeps;
  o.task.lengths = c.lengths.empty() ? eval::default_lengths(*model) : c.lengths;
  o.task.depths = c.depths;
  o.task.samples = c.samples;
  o.task.seed = c.seed;
  o.task.max_new = c.max_new;
  o.task.ppl_tokens = c.ppl_tokens;
  o.prompt.chat = c.chat;
  o.prompt.system = c.system;
  o.prompt.question_template = c.question_template;
  if (c.has_answer_prefix) o.prompt.answer_prefix = c.answer_prefix;
  o.query_aware = c.query_aware;
  o.sinks = c.sinks;
  o.window = c.window;
  o.ppl_chunk = c.ppl_chunk;
  o.data_dir = c.data;
  o.out_dir = c.out;
  o.progress = !c.no_progress;
  o.fresh = c.fresh;
  o.shard_k = shard_k;
  o.shard_n = shard_n;
  std::string lens;
  for (int l : o.task.lengths) lens += (lens.empty() ? "" : ",") + std::to_string(l);
  fmt::print(stderr, "eval: model {} | tasks {} | lengths {} | {} press(es) x keep {} | {}{}\n", model->name,
             fmt::join(o.tasks, ","), lens, o.presses.size(), fmt::join(o.keeps, ","),
             o.query_aware ? "query-aware" : "query-agnostic",
             o.shard_n > 1 ? fmt::format(" | shard {}/{}", o.shard_k, o.shard_n) : "");
  const auto s = eval::run_eval(o, *model, c.eng.params());
  fmt::print(stderr, "eval: {} result(s) written, {} already present, {} failed, in {} -> {}\n", s.ran, s.skipped, s.failed,
             eval::format_duration(s.seconds), s.results_path);
  if (!c.no_report) report(c.out, c.report_script);
  // exit status 1 when units failed (a rerun retries them; the reasons are in errors.log)
  if (s.failed) fail("{} unit(s) failed; see {}", s.failed, (std::filesystem::path(c.out) / "errors.log").string());
}

struct MergeCliOptions {
  std::vector<std::string> dirs;
  std::string out, report_script;
  bool no_report = false;
};

// kvshrink eval merge -o OUT DIR...: the slices of a sharded grid (or any folders of one
// configuration) joined into one results.jsonl and report.
void run_merge_cmd(const MergeCliOptions& c) {
  if (c.out.empty()) fail("eval merge: -o DIR is required");
  if (c.dirs.empty()) fail("eval merge: name the folders to merge (eval -o folders, e.g. the slices of --shard K/N)");
  check_output_dir("-o", c.out);
  const eval::MergeSummary s = eval::merge_results(c.dirs, c.out);
  fmt::print(stderr, "eval merge: {} line(s) from {} folder(s) -> {}", s.lines, c.dirs.size(),
             (std::filesystem::path(c.out) / "results.jsonl").string());
  if (s.duplicates) fmt::print(stderr, "; {} identical duplicate(s) skipped", s.duplicates);
  if (s.malformed) fmt::print(stderr, "; {} malformed line(s) skipped", s.malformed);
  fmt::print(stderr, "\n");
  if (s.conflicts)
    fmt::print(stderr, "eval merge: warning: {} line(s) present in several folders with different results (the first "
                       "folder's kept): were they run with different builds or data?\n",
               s.conflicts);
  if (!s.missing_shards.empty())
    fmt::print(stderr, "eval merge: warning: shard(s) {} of {} missing: the report covers part of the grid\n",
               fmt::join(s.missing_shards, ", "), s.shard_n);
  if (!c.no_report) report(c.out, c.report_script);
}

void report(const std::string& out, const std::string& script) {
  {
    const int rc = eval::render_report(out, script);
    if (rc == -1)
      fmt::print(stderr, "eval: /usr/bin/python3 or {} not found; render the report with: python3 eval/report.py {}\n",
                 script.empty() ? eval::default_report_script() : script, out);
    else if (rc != 0)
      fmt::print(stderr, "eval: the report script failed (exit {})\n", rc);
    else
      fmt::print(stderr, "eval: report {}\n", (std::filesystem::path(out) / "report.md").string());
  }
}

}  // namespace

void register_eval(CLI::App& app) {
  auto c = std::make_shared<EvalCliOptions>();
  CLI::App* cmd = app.add_subcommand("eval", "accuracy, KV bytes and time of presses x keep ratios on evaluation tasks");
  c->eng.add(cmd, false);
  cmd->add_option("--tasks", c->tasks, "tasks or groups, comma-separated (see --list-tasks)")->delimiter(',')->capture_default_str();
  cmd->add_option("--presses", c->presses, "presses, comma-separated: NAME[:key=value...][@auto] (@auto: adaptive budget)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--keep", c->keeps, "keep ratios, comma-separated")->delimiter(',')->capture_default_str();
  cmd->add_option("--samples", c->samples, "samples per length (NIAH: per length x depth cell)")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--lengths", c->lengths, "target prompt lengths in tokens (default: n/4, n/2, n of the model's context, n <= 4096)")
      ->delimiter(',');
  cmd->add_option("--depths", c->depths, "NIAH needle depths in [0, 1]")->delimiter(',')->capture_default_str();
  cmd->add_option("--seed", c->seed, "generator seed")->capture_default_str()->check(non_negative_integer());
  cmd->add_flag("--query-aware", c->query_aware, "compress context + question together, per question");
  cmd->add_flag("--chat", c->chat, "wrap prompts in the model's chat template");
  cmd->add_option("--system", c->system, "system message (with --chat)");
  cmd->add_option("--question-template", c->question_template,
                  "what follows the context instead of each task's question line; {question} is replaced by that line "
                  "(e.g. $'\\n\\nQuestion: {question}\\nAnswer:')");
  CLI::Option* prefix_opt = cmd->add_option(
      "--answer-prefix", c->answer_prefix,
      "what the answer continues instead of each task's answer prefix ('' = none; {prefix} = the task's own)");
  cmd->add_option("--data", c->data, "benchmark data directory (default: $KVSHRINK_DATA, else share/kvshrink/data beside the binary: NIAH, RULER, SQuAD, HotpotQA)");
  cmd->add_option("--max-new", c->max_new, "cap on new tokens per answer (default: per task)")->check(CLI::Range(0, 1 << 16));
  cmd->add_option("--ppl-tokens", c->ppl_tokens, "perplexity window in tokens (default: the largest length)")->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--ppl-chunk", c->ppl_chunk, "perplexity: tokens fed per step between evictions")->capture_default_str()->check(CLI::Range(1, 4096));
  cmd->add_option("--sinks", c->sinks, "first tokens always kept (default: each press's)");
  cmd->add_option("--window", c->window, "most recent tokens always kept (default: each press's)");
  cmd->add_option("-o,--out", c->out, "output directory (results.jsonl, run.json, report.md, plots)");
  cmd->add_flag("--fresh", c->fresh, "discard results already in the output directory");
  cmd->add_flag("--no-progress", c->no_progress, "no progress bar");
  cmd->add_flag("--no-report", c->no_report, "do not run eval/report.py at the end");
  cmd->add_option("--report-script", c->report_script, "report script (default: the source tree's eval/report.py)");
  cmd->add_flag("--list-tasks", c->list, "list the tasks and exit");
  cmd->add_option("--shard", c->shard,
                  "K/N: run only the K-th of N deterministic slices of the grid's samples (N runs, on any machines, "
                  "together write exactly the unsharded lines; join them with `eval merge`)");
  auto m = std::make_shared<MergeCliOptions>();
  CLI::App* merge = cmd->add_subcommand("merge", "join eval output folders (e.g. the slices of --shard K/N) into one "
                                                 "results.jsonl and report");
  merge->add_option("dirs", m->dirs, "eval output folders of one configuration")->required();
  merge->add_option("-o,--out", m->out, "output folder (new: results.jsonl, run.json, report.md, plots)")->required();
  merge->add_flag("--no-report", m->no_report, "do not run eval/report.py at the end");
  merge->add_option("--report-script", m->report_script, "report script (default: the source tree's eval/report.py)");
  merge->callback([m] { run_merge_cmd(*m); });
  cmd->callback([c, prefix_opt, merge] {
    if (merge->parsed()) return;  // `eval merge`: its own callback runs
    c->has_answer_prefix = prefix_opt->count() > 0;
    run_eval_cmd(*c);
  });
}

}  // namespace kvs::cli
