#include "eval/runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <sys/wait.h>

#include "core/error.h"
#include "core/paths.h"
#include "core/timer.h"
#include "eval/metrics.h"
#include "eval/perplexity.h"
#include "eval/progress.h"
#include "eval/results.h"
#include "eval/text_util.h"
#include "kernels/ops.h"
#include "runtime/session.h"


namespace kvs::eval {
namespace fs = std::filesystem;
using nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

struct GridEntry {
  const PressEntry* press;
  double keep;        // requested keep ratio (1 for full and adaptive presses)
  std::string keep_label;
  bool nominal;       // keep is a requested ratio (false: adaptive)
};

std::string keep_label(double k) { return fmt::format("{}", k); }

double r6(double x) { return std::round(x * 1e6) / 1e6; }

CompressionSpec make_spec(const EvalOptions& o, const GridEntry& g) {
  SpecArgs a;
  a.press = g.press->name;
  a.options = g.press->params;
  if (g.nominal) a.keep = g.keep;  // adaptive presses choose their own
  a.sinks = o.sinks;
  a.window = o.window;
  a.seed = o.task.seed;
  return make_compression_spec(a);
}

ojson base_record(const std::string& task, const Sample& smp, const GridEntry& g, const EvalOptions& o) {
  ojson r;
  r["task"] = task;
  r["sample"] = smp.id;
  r["press"] = g.press->label;
  r["press_name"] = g.press->name;
  r["keep"] = g.nominal ? ojson(g.keep) : ojson(nullptr);
  r["keep_label"] = g.keep_label;
  r["query_aware"] = o.query_aware;
  return r;
}

struct Tokenized {
  std::vector<int32_t> context;
  std::vector<std::vector<int32_t>> questions;
  int inexact = 0;
};

// `base` (optional): the sample's context prefilled once with every statistic the grid needs;
// each (press, keep) then compresses a fork of it instead of prefilling again.
ojson run_qa(Engine& engine, const EvalOptions& o, const std::string& task, const Sample& smp, const Tokenized& tk,
            const GridEntry& g, const CompressedContext* base) {
  ojson r = base_record(task, smp, g, o);
  Timer total;
  CompressedContext ctx(engine, make_spec(o, g));
  if (o.query_aware)
    ctx.set_context(tk.context);  // each question prefills context + question once (no throw-away compression)
  else if (base)
    ctx.compress_from(*base);
  else
    ctx.prefill(tk.context);
  size_t kept_bytes = ctx.cache().bytes_held(), kept_slots = ctx.cache().total_slots();
  size_t full_bytes = ctx.full_bytes(), full_slots = ctx.full_slots();
  std::optional<double> keep_chosen = ctx.result().keep_chosen;
  // Query-aware: the compressions the answers came from, one per question.
  ojson qa_kept_slots = ojson::array(), qa_kept_bytes = ojson::array(), qa_full_slots = ojson::array(),
        qa_chosen = ojson::array();
  size_t qa_after = 0, qa_before = 0, qa_bytes_after = 0, qa_bytes_before = 0;
  double qa_chosen_sum = 0;
  size_t qa_n = 0, qa_n_chosen = 0;
  size_t peak = o.query_aware ? 0 : kept_bytes;
  double q_prefill = 0, decode = 0, decode_compress = 0;
  size_t gen = 0;
  ojson answers = ojson::array(), scores = ojson::array(), refs = ojson::array(), qs = ojson::array();
  ojson extra = ojson::object();
  double sum = 0;
  for (size_t i = 0; i < smp.questions.size(); ++i) {
    const Question& q = smp.questions[i];
    AnswerOptions ao;
    ao.max_new_tokens = q.max_new_tokens;
    ao.stop = q.stop;
    const Answer a = o.query_aware ? ctx.ask_query_aware(tk.questions[i], ao) : ctx.ask(tk.questions[i], ao);
    const double sc = score_answer(q.metric, a.text, q.references);
    sum += sc;
    answers.push_back(a.text);
    scores.push_back(r6(sc));
    refs.push_back(q.references);
    qs.push_back(q.text);
    for (const auto& m : q.extra_metrics) extra[m].push_back(r6(score_answer(m, a.text, q.references)));
    peak = std::max(peak, a.kv_bytes_peak);
    if (a.compression) {
      const CompressResult& c = *a.compression;
      qa_kept_slots.push_back(c.slots_after);
      qa_kept_bytes.push_back(c.bytes_after);
      qa_full_slots.push_back(c.slots_before);
      qa_chosen.push_back(c.keep_chosen ? ojson(r6(*c.keep_chosen)) : ojson(nullptr));
      qa_after += c.slots_after;
      qa_before += c.slots_before;
      qa_bytes_after += c.bytes_after;
      qa_bytes_before += c.bytes_before;
      if (c.keep_chosen) {
        qa_chosen_sum += *c.keep_chosen;
        ++qa_n_chosen;
      }
      ++qa_n;
    }
    q_prefill += a.prefill_seconds;
    decode += a.decode_seconds;
    decode_compress += a.compress_seconds;
    gen += a.tokens.size();
  }
  const auto& cr = ctx.result();
  double measured_keep = full_slots ? static_cast<double>(kept_slots) / full_slots : 1.0;
  if (qa_n > 0) {
    // The memory columns of a query-aware line are those of the compressions that answered (context
    // + question, compressed together): means over the questions, each question's in `per_question`.
    auto mean = [&](size_t x) { return static_cast<size_t>(std::llround(static_cast<double>(x) / static_cast<double>(qa_n))); };
    kept_slots = mean(qa_after);
    kept_bytes = mean(qa_bytes_after);
    full_slots = mean(qa_before);
    full_bytes = mean(qa_bytes_before);
    measured_keep = qa_before ? static_cast<double>(qa_after) / static_cast<double>(qa_before) : 1.0;
    keep_chosen = qa_n_chosen ? std::optional<double>(qa_chosen_sum / static_cast<double>(qa_n_chosen)) : std::nullopt;
  }
  r["metric"] = smp.questions.empty() ? "" : smp.questions[0].metric;
  r["score"] = r6(smp.questions.empty() ? 0.0 : sum / smp.questions.size());
  r["scores"] = scores;
  r["answers"] = answers;
  r["references"] = refs;
  r["questions"] = qs;
  if (!extra.empty()) {
    ojson means = ojson::object();
    for (auto& [k, v] : extra.items()) {
      double s = 0;
      for (const auto& x : v) s += x.get<double>();
      means[k] = r6(s / v.size());
    }
    r["extra_scores"] = extra;
    r["extra"] = means;
  }
  r["context_tokens"] = tk.context.size();
  size_t qtok = 0;
  for (const auto& q : tk.questions) qtok += q.size();
  r["question_tokens"] = qtok;
  if (tk.inexact) r["question_tokenized_apart"] = tk.inexact;
  r["full_bytes"] = full_bytes;
  r["kept_bytes"] = kept_bytes;
  r["peak_bytes"] = peak;
  r["full_slots"] = full_slots;
  r["kept_slots"] = kept_slots;
  r["measured_keep"] = r6(measured_keep);
  if (keep_chosen) r["keep_chosen"] = r6(*keep_chosen);
  if (qa_n > 0)
    r["per_question"] = {{"full_slots", qa_full_slots}, {"kept_slots", qa_kept_slots}, {"kept_bytes", qa_kept_bytes},
                         {"keep_chosen", qa_chosen}};
  r["prefill_s"] = r6(ctx.prefill_seconds());
  r["compress_s"] = r6(cr.score_seconds + cr.apply_seconds + decode_compress);
  r["question_prefill_s"] = r6(q_prefill);
  r["decode_s"] = r6(decode);
  r["generated_tokens"] = gen;
  r["total_s"] = r6(total.seconds());
  r["meta"] = smp.meta;
  return r;
}

ojson run_ppl(Engine& engine, const EvalOptions& o, const std::string& task, const Sample& smp, const GridEntry& g) {
  ojson r = base_record(task, smp, g, o);
  Timer total;
  const CompressionSpec cs = make_spec(o, g);
  PerplexityOptions po;
  po.chunk = o.ppl_chunk;
  po.budget = cs.press.is_full() || g.keep >= 1.0
                  ? 0
                  : std::max<int32_t>(1, static_cast<int32_t>(std::lround(g.keep * static_cast<double>(smp.tokens.size()))));
  const PerplexityResult pr = streaming_perplexity(engine, cs, smp.tokens, po);
  ojson nll = ojson::array();
  for (float x : pr.nll) nll.push_back(std::round(x * 1e4) / 1e4);
  r["metric"] = "nll";
  r["score"] = r6(pr.mean_nll);
  r["ppl"] = r6(std::exp(pr.mean_nll));
  r["budget_tokens"] = po.budget;
  r["chunk"] = po.chunk;
  r["nll"] = nll;
  r["context_tokens"] = smp.tokens.size();
  r["full_bytes"] = pr.full_bytes;
  r["kept_bytes"] = pr.end_bytes;
  r["peak_bytes"] = pr.peak_bytes;
  r["full_slots"] = pr.full_slots;
  r["kept_slots"] = pr.end_slots;
  r["measured_keep"] = r6(pr.full_slots ? static_cast<double>(pr.end_slots) / pr.full_slots : 1.0);
  r["prefill_s"] = r6(pr.forward_seconds);
  r["compress_s"] = r6(pr.compress_seconds);
  r["question_prefill_s"] = 0;
  r["decode_s"] = 0;
  r["evictions"] = pr.evictions;
  r["total_s"] = r6(total.seconds());
  r["meta"] = smp.meta;
  return r;
}

}  // namespace

PressEntry parse_press_entry(const std::string& s) {
  PressEntry e;
  std::string body = s;
  if (body.size() > 5 && body.substr(body.size() - 5) == "@auto") {
    e.adaptive = true;
    body.resize(body.size() - 5);
  }
  const auto parts = split(body, ':');
  e.name = trim(parts[0]);
  e.label = body;
  std::vector<std::string> kv(parts.begin() + 1, parts.end());
  e.params = parse_params(kv);
  const Press p = make_press(e.name, e.params);  // validates the name and options now, not mid-run
  if (e.adaptive && !p.adaptive())
    fail("'{}': '{}' needs a keep ratio; '@auto' is for presses that choose their own (none of the fixed-budget presses)",
         s, e.name);
  if (!e.adaptive && p.adaptive()) e.adaptive = true;  // an adaptive press is always run once, at its own keep
  return e;
}

std::vector<int> default_lengths(const Model& model) {
  const int n = model.hp.n_ctx_train > 0 ? std::min(model.hp.n_ctx_train, 4096) : 2048;
  std::vector<int> v;
  for (int l : {n / 4, n / 2, n})
    if (l >= 64 && (v.empty() || v.back() != l)) v.push_back(l);
  if (v.empty()) v.push_back(n);
  return v;
}

EvalSummary run_eval(const EvalOptions& o, const Model& model, const EngineParams& ep) {
  if (o.out_dir.empty()) fail("no output directory (-o)");
  if (o.presses.empty()) fail("no presses given");
  if (o.task.lengths.empty()) fail("no target lengths");
  if (o.shard_n < 1 || o.shard_k < 1 || o.shard_k > o.shard_n)
    fail("shard {}/{}: expected K/N with 1 <= K <= N", o.shard_k, o.shard_n);
  for (double k : o.keeps)
    if (!(k > 0 && k <= 1)) fail("keep ratios must be in (0, 1], got {}", k);
  const auto task_names = expand_task_names(o.tasks);
  fs::create_directories(o.out_dir);
  const std::string results_path = (fs::path(o.out_dir) / "results.jsonl").string();
  if (o.fresh) {
    fs::remove(results_path);
    fs::remove(fs::path(o.out_dir) / "run.json");
    fs::remove(fs::path(o.out_dir) / "errors.log");
  }
  json identity = {{"model_fingerprint", fmt::format("{:016x}", model.fingerprint)},
                   {"seed", o.task.seed},
                   {"query_aware", o.query_aware},
                   {"chat", o.prompt.chat},
                   {"system", o.prompt.system},
                   {"max_new", o.task.max_new},
                   {"sinks", o.sinks},
                   {"window", o.window},
                   {"ppl_chunk", o.ppl_chunk},
                   {"kv_dtype", std::string(dtype_name(ep.kv_dtype))},
                   {"page_tokens", ep.page_tokens}};
  // null when unset: matches result folders made before these options existed.
  identity["question_template"] =
      o.prompt.question_template.empty() ? json(nullptr) : json(o.prompt.question_template);
  identity["answer_prefix"] = o.prompt.answer_prefix ? json(*o.prompt.answer_prefix) : json(nullptr);
  // A shard's folder holds that shard only (null when unsharded: matches folders made before).
  identity["shard"] = o.shard_n > 1 ? json(fmt::format("{}/{}", o.shard_k, o.shard_n)) : json(nullptr);
  // n_batch (-b) is recorded, not checked: no result depends on it (UNComp's pruned prefill runs
  // layer-major whatever -b is), so a run may resume with another.
  // native_bf16: whether this CPU multiplies BF16 in hardware, which decides what KVzip's
  // precision=auto means (bf16 or f32 repeat pass); recorded, not checked.
  check_run_identity(o.out_dir, identity,
                     {{"model", model.path}, {"model_name", model.name}, {"n_batch", ep.n_batch},
                      {"native_bf16", kernels::native_bf16()}});

  Engine engine(model, ep);
  DataStore data(o.data_dir.empty() ? DataStore::default_root() : o.data_dir);
  Prompter prompter(*model.tokenizer, o.prompt);
  TaskEnv env(data, prompter, o.task);
  ResultsFile results(results_path);
  if (results.malformed())
    fmt::print(stderr, "note: {} malformed line(s) in {} ignored (an interrupted write?)\n", results.malformed(), results_path);

  std::vector<GridEntry> grid;
  for (const auto& p : o.presses) {
    if (p.name == "full")
      grid.push_back({&p, 1.0, "1", true});
    else if (p.adaptive)
      grid.push_back({&p, 1.0, "auto", false});
    else
      for (double k : o.keeps) grid.push_back({&p, k, keep_label(k), true});
  }

  struct Planned {
    const Task* task;
    SampleSpec spec;
    std::vector<const GridEntry*> todo;
  };
  std::vector<Planned> plan;
  EvalSummary sum;
  sum.results_path = results_path;
  double weight = 0;
  size_t units = 0;
  size_t sample_index = 0;  // position in the whole grid's sample order, whatever the shard
  for (const auto& tn : task_names) {
    const Task& t = find_task(tn);
    for (auto& spec : t.plan(o.task)) {
      if (sample_index++ % static_cast<size_t>(o.shard_n) != static_cast<size_t>(o.shard_k - 1)) continue;
      Planned pl{&t, spec, {}};
      for (const auto& g : grid) {
        if (t.is_perplexity() && !g.nominal) continue;  // adaptive presses have no budget to stream under
        ++sum.planned;
        if (results.done(result_key(t.name(), g.press->label, g.keep_label, spec.id)))
          ++sum.skipped;
        else
          pl.todo.push_back(&g);
      }
      units += pl.todo.size();
      weight += static_cast<double>(pl.todo.size()) * std::max(1, spec.length);
      if (!pl.todo.empty()) plan.push_back(std::move(pl));
    }
  }
  if (sum.skipped)
    fmt::print(stderr, "resuming: {} of {} results already in {}\n", sum.skipped, sum.planned, results_path);

  if (units > 0) {  // warm up (threads, pages, caches) so the first unit's times are not inflated
    auto c = engine.new_cache();
    const std::vector<int32_t> w(16, model.tokenizer->bos() >= 0 ? model.tokenizer->bos() : 0);
    engine.forward(*c, w, Logits::Last);
  }
  Timer wall;
  Progress prog(units, weight, o.progress);
  const std::string err_path = (fs::path(o.out_dir) / "errors.log").string();
  auto log_error = [&](const std::string& what) {
    if (std::FILE* f = std::fopen(err_path.c_str(), "ab")) {
      std::fprintf(f, "%s\n", what.c_str());
      std::fclose(f);
    }
  };
  for (const auto& pl : plan) {
    const std::string tn = pl.task->name();
    const double w = std::max(1, pl.spec.length);
    prog.set_label(fmt::format("{} {} generating", tn, pl.spec.id));
    Sample smp;
    Tokenized tk;
    try {
      smp = pl.task->make(pl.spec, env);
      if (!pl.task->is_perplexity()) {
        tk.context = prompter.context_tokens(smp.context);
        for (const auto& q : smp.questions) {
          auto qt = prompter.question_tokens(smp.context, tk.context, q);
          tk.inexact += !qt.exact;
          tk.questions.push_back(std::move(qt.ids));
        }
      }
    } catch (const Error& e) {
      log_error(fmt::format("{} {}: {}", tn, pl.spec.id, e.what()));
      sum.failed += pl.todo.size();
      for (size_t i = 0; i < pl.todo.size(); ++i) prog.advance(w);
      continue;
    }
    // One shared prefill per sample (query-agnostic QA): the statistics of every press in the grid.
    std::unique_ptr<CompressedContext> base;
    if (!pl.task->is_perplexity() && !o.query_aware && pl.todo.size() > 1) {
      try {
        Needs all;
        for (const GridEntry* g : pl.todo) all |= make_spec(o, *g).press.needs();
        CompressionSpec full;
        full.press = make_press("full");
        base = std::make_unique<CompressedContext>(engine, full);
        prog.set_label(fmt::format("{} {} prefill", tn, pl.spec.id));
        base->prefill(tk.context, all);
      } catch (const Error& e) {
        base.reset();  // fall back to a prefill per unit (its error, if any, is logged there)
      }
    }
    for (const GridEntry* g : pl.todo) {
      prog.set_label(fmt::format("{} {} {} keep {}", tn, pl.spec.id, g->press->label, g->keep_label));
      try {
        ojson r = pl.task->is_perplexity() ? run_ppl(engine, o, tn, smp, *g)
                                           : run_qa(engine, o, tn, smp, tk, *g, base.get());
        results.append(r);
        ++sum.ran;
      } catch (const Error& e) {
        log_error(fmt::format("{} {} {} keep {}: {}", tn, pl.spec.id, g->press->label, g->keep_label, e.what()));
        ++sum.failed;
      }
      prog.advance(w);
    }
  }
  prog.finish();
  sum.seconds = wall.seconds();
  if (sum.failed) fmt::print(stderr, "{} unit(s) failed; see {}\n", sum.failed, err_path);
  return sum;
}

void parse_shard(const std::string& text, int& k, int& n) {
  const size_t slash = text.find('/');
  auto number = [&](const std::string& part) {
    if (part.empty() || part.size() > 7 || part.find_first_not_of("0123456789") != std::string::npos) return -1;
    return std::stoi(part);
  };
  const int a = slash == std::string::npos ? -1 : number(text.substr(0, slash));
  const int b = slash == std::string::npos ? -1 : number(text.substr(slash + 1));
  if (a < 1 || b < 1 || a > b || b > 1000000)
    fail("--shard '{}': expected K/N with 1 <= K <= N (e.g. 2/4: the second of four slices)", text);
  k = a;
  n = b;
}

std::string default_report_script() {
  if (const char* e = std::getenv("KVSHRINK_REPORT_SCRIPT"); e && *e) return e;
  return share_dir() + "/report.py";  // eval/report.py, laid out beside the binary by the build and the install
}

int render_report(const std::string& out_dir, std::string script, std::string python) {
  if (script.empty()) script = default_report_script();
  if (!fs::exists(python) || !fs::exists(script)) return -1;
  auto quote = [](const std::string& s) { return "'" + replace_all(s, "'", "'\\''") + "'"; };
  const std::string cmd = quote(python) + " " + quote(script) + " " + quote(out_dir);
  std::fflush(stdout);
  std::fflush(stderr);
  const int rc = std::system(cmd.c_str());
  return rc == -1 ? -1 : WEXITSTATUS(rc);
}

}  // namespace kvs::eval
