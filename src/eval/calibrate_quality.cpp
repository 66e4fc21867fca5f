// `kvshrink calibrate --press quality --opt press=P [--opt KEY=VALUE ...]`: the fit of
// context-calibrated compression (Compactor §3.5 and §5.4) for press P on this model.
//
// Triples (r, NLL(c), y) on a calibration task set: for each sample (a context with questions and
// reference answers, from the eval's generators) the context is prefilled once (full cache, with
// P's statistics and the context's per-token NLL); for each keep ratio r of `ratios` a fork is
// compressed by P at keep r; for each question, y = NLL(t | q, c) / NLL(t | q, c_r), t = the first
// reference answer teacher-forced after the question (mean per-token NLL; the question and answer
// run on a fork of the compressed cache, no eviction while answering). NLL(c) is the context's mean
// per-token NLL. (α, β) of b = α NLL(c) + β are fitted with press/math/calibration_curve.h
// (asymmetric least squares, under-estimation of r* weighted `under_weight`, default 4).
//
// Options (everything else is passed to press P):
//   press=P (required), tasks=LIST (default niah,ruler_niah_single_2,ruler_niah_multikey_1,
//   squad_multi: the retrieval and QA tasks of the eval; Compactor used a subset of RULER),
//   ratios=LIST (default 0.1,0.2,...,0.9), depths=LIST (NIAH, default 0.1,0.3,0.5,0.7,0.9),
//   under_weight=W (default 4), clip=true|false (default true: y above 1 is fitted as 1, see below).
// y > 1 (the compressed context gave the answer a LOWER NLL) happens when the full-cache NLL is
// tiny (a retrieved 7-digit value: ~1e-3 nats) and the ratio of two tiny numbers is noise; f(r, c)
// never exceeds 1, so those triples are fitted as 1 ("no loss") by default. The raw y is stored.
// --samples N (default 2 per length x depth cell), --tokens L (one target length, default
// min(n_ctx_train, 1024)). Samples are drawn with seed + 1000003, so they are not the samples
// `kvshrink eval --seed S` evaluates. The fit is stored under the press's key (quality_key) in
// the model's "quality" calibration, next to the fits of other presses (merged into the file).
#include "eval/calibrate_quality.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/progress.h"
#include "core/timer.h"
#include "eval/task.h"
#include "eval/text_util.h"
#include "press/budget/calibrated.h"
#include "press/math/calibration_curve.h"
#include "runtime/calibration_store.h"
#include "runtime/sampler.h"
#include "runtime/session.h"

namespace kvs::eval {

namespace {

std::vector<double> parse_list(const std::string& s, const std::string& what, double lo, double hi) {
  std::vector<double> v;
  for (const auto& part : split(s, ',')) {
    const auto x = parse_finite_double(trim(part));
    if (!x || *x < lo || *x > hi) fail("calibrate quality: {} must be numbers in [{}, {}], got '{}'", what, lo, hi, part);
    v.push_back(*x);
  }
  if (v.empty()) fail("calibrate quality: {} is empty", what);
  return v;
}

// Mean NLL of `answer` teacher-forced after `question` on a fork of `cache`.
double answer_nll(Engine& engine, const KvCache& cache, const std::vector<int32_t>& question,
                  const std::vector<int32_t>& answer) {
  auto fork = cache.fork();
  std::vector<int32_t> ids = question;
  ids.insert(ids.end(), answer.begin(), answer.end());
  const std::vector<float> logits = engine.forward(*fork, ids, Logits::All);
  const size_t V = static_cast<size_t>(engine.hp().n_vocab);
  double s = 0;
  for (size_t i = 0; i < answer.size(); ++i) {
    const size_t row = question.size() - 1 + i;  // the logits that predict answer[i]
    s += token_nll({logits.data() + row * V, V}, answer[i]);
  }
  return s / static_cast<double>(answer.size());
}

nlohmann::json run_quality_calibration(const CalibrateArgs& a) {
  ParamMap opt = a.options;
  auto take = [&](const std::string& k, const std::string& def) {
    const auto it = opt.find(k);
    std::string v = it == opt.end() ? def : it->second;
    if (it != opt.end()) opt.erase(it);
    return v;
  };
  const std::string press = take("press", "");
  if (press.empty()) fail("calibrate quality: give the press to calibrate, --opt press=NAME (and its options)");
  const std::vector<std::string> tasks = split(take("tasks", "niah,ruler_niah_single_2,ruler_niah_multikey_1,squad_multi"), ',');
  const std::vector<double> ratios = parse_list(take("ratios", "0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9"), "ratios", 1e-6, 1.0);
  const std::vector<double> depths = parse_list(take("depths", "0.1,0.3,0.5,0.7,0.9"), "depths", 0.0, 1.0);
  const double under = parse_list(take("under_weight", "4"), "under_weight", 1.0, 1e6)[0];
  const std::string clip_s = take("clip", "true");
  const auto clip = parse_bool_word(clip_s);
  if (!clip) fail("calibrate quality: clip must be true or false, got '{}'", clip_s);
  if (wants_quality(opt, std::nullopt)) fail("calibrate quality: calibrate the press itself, not allocator=quality");
  // Every other option is the press's (validated now, before any work).
  SpecArgs probe_args;
  probe_args.press = press;
  probe_args.options = opt;
  probe_args.keep = 0.5;
  const CompressionSpec check = make_compression_spec(probe_args);
  if (check.press.is_full()) fail("calibrate quality: 'full' keeps everything; there is nothing to calibrate");
  const std::string key = quality_key(press, opt);

  const Model& m = a.model;
  const int n_ctx = m.hp.n_ctx_train > 0 ? m.hp.n_ctx_train : 2048;
  TaskConfig cfg;
  cfg.lengths = {a.tokens > 0 ? a.tokens : std::min(n_ctx, 1024)};
  cfg.depths = depths;
  cfg.samples = a.samples > 0 ? a.samples : 2;
  cfg.seed = a.seed + 1000003;
  Prompter prompter(*m.tokenizer, PromptFormat{});
  TaskEnv env(a.data, prompter, cfg);
  Needs need = check.press.needs();
  need.context_nll = true;

  std::vector<math::CalibTriple> triples;
  nlohmann::json rows = nlohmann::json::array();
  // The samples of every task, planned first so that the progress bar knows the total.
  std::vector<std::pair<const Task*, SampleSpec>> plan;
  for (const auto& tn : tasks) {
    const Task& task = find_task(trim(tn));
    if (task.is_perplexity()) fail("calibrate quality: '{}' is a perplexity task (give QA tasks)", tn);
    for (const SampleSpec& spec : task.plan(cfg)) plan.emplace_back(&task, spec);
  }
  Progress prog(plan.size(), static_cast<double>(plan.size()), a.progress);  // a bar (terminal) or lines (log)
  prog.set_label(fmt::format("quality calibration ({})", key));
  int done = 0, skipped = 0;
  for (const auto& [task_ptr, spec] : plan) {
    const Task& task = *task_ptr;
    {
      struct Tick {  // one unit of the bar when this sample is finished or skipped
        Progress& p;
        ~Tick() { p.advance(1); }
      } tick{prog};
      Sample smp;
      try {
        smp = task.make(spec, env);
      } catch (const Error& e) {
        ++skipped;
        if (a.progress) fmt::print(stderr, "\nquality calibration: {} {} skipped: {}\n", task.name(), spec.id, e.what());
        continue;
      }
      const std::vector<int32_t> ctx = prompter.context_tokens(smp.context);
      // Question and answer ids of every question with a reference.
      std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> qa;
      for (const Question& q : smp.questions) {
        if (q.references.empty()) continue;
        const auto qt = prompter.question_tokens(smp.context, ctx, q);
        Question with = q;
        with.answer_prefix += " " + q.references[0];
        const auto at = prompter.question_tokens(smp.context, ctx, with);
        if (!qt.exact || !at.exact || at.ids.size() <= qt.ids.size() ||
            !std::equal(qt.ids.begin(), qt.ids.end(), at.ids.begin()))
          continue;  // the answer does not tokenize as a continuation of the question
        qa.push_back({qt.ids, {at.ids.begin() + static_cast<std::ptrdiff_t>(qt.ids.size()), at.ids.end()}});
      }
      if (qa.empty()) continue;
      CompressedContext base(a.engine, make_compression_spec({}));
      base.prefill(ctx, need);
      double nll_c = 0;
      for (float x : base.context_nll()) nll_c += x;
      nll_c /= std::max<size_t>(1, base.context_nll().size());
      std::vector<double> full(qa.size());
      for (size_t i = 0; i < qa.size(); ++i) full[i] = answer_nll(a.engine, base.cache(), qa[i].first, qa[i].second);
      for (double r : ratios) {
        SpecArgs sa = probe_args;
        sa.keep = r;
        CompressedContext c(a.engine, make_compression_spec(sa));
        c.compress_from(base);
        for (size_t i = 0; i < qa.size(); ++i) {
          const double nr = answer_nll(a.engine, c.cache(), qa[i].first, qa[i].second);
          const double y = nr > 0 ? full[i] / nr : 1.0;
          triples.push_back({r, nll_c, *clip ? std::min(y, 1.0) : y});
          rows.push_back({{"task", task.name()}, {"sample", spec.id}, {"question", i}, {"r", r},
                          {"keep_measured", std::round(c.keep_measured() * 1e6) / 1e6}, {"nll_context", nll_c},
                          {"nll_full", full[i]}, {"nll_compressed", nr}, {"y", y}});
        }
      }
      ++done;
    }
  }
  if (triples.size() < 2)
    fail("calibrate quality: only {} triples ({} samples skipped): give more samples, other tasks or lengths",
         triples.size(), skipped);
  math::CalibFitOptions fo;
  fo.under_weight = under;
  const math::CalibFit fit = math::fit_calibration(triples, fo);
  // One file holds every press's fit: merge with what is there.
  nlohmann::json j = load_calibration(m, kQualityCalibration).value_or(nlohmann::json::object());
  if (!j.contains("fits") || !j["fits"].is_object()) j["fits"] = nlohmann::json::object();
  j["fits"][key] = {{"alpha", fit.alpha},
                    {"beta", fit.beta},
                    {"loss", fit.loss},
                    {"iterations", fit.iterations},
                    {"n_triples", fit.n_used},
                    {"under_weight", under},
                    {"clip", *clip},
                    {"press", press},
                    {"options", opt},
                    {"tasks", tasks},
                    {"ratios", ratios},
                    {"samples", done},
                    {"length", cfg.lengths[0]},
                    {"seed", cfg.seed},
                    {"triples", rows}};
  if (a.progress)
    fmt::print(stderr, "quality calibration ({}): alpha {:.4f}, beta {:.4f} from {} triples (loss {:.4f})\n", key,
               fit.alpha, fit.beta, fit.n_used, fit.loss);
  return j;
}

}  // namespace

CalibratorInfo quality_calibrator() {
  return {"quality",
          "context-calibrated keep ratios for any press (Compactor §3.5): fits (alpha, beta) of the NLL-ratio curve "
          "on calibration tasks (--opt press=P [P's options], tasks=, ratios=, under_weight=)",
          run_quality_calibration};
}

}  // namespace kvs::eval
