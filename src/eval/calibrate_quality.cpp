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
// The fit (fit=log, default): each triple's r is the keep MEASURED on the compressed fork (what
// the press kept, protected tokens and page rounding included), y = (NLL_full + ε) / (NLL_comp + ε)
// with ε = nll_floor (0.02 nats): the paper's ratio when the NLLs are large, ~1 when both are ~0 (a
// retrieved value the model is sure of: the ratio of two ~1e-3 NLLs is noise); the questions of a
// sample are combined per (sample, r) by the geometric mean; the residuals are log f - log y, so
// y > 1 is a small residual and nothing is clipped. fit=linear is the earlier form (nominal r, raw
// y, clipped to 1 with clip=true, residual f - y).
//
// Held-out evaluation (heldout=true, default), as the paper evaluates τ on task families it did
// not fit (§5.4: fit on RULER, evaluated on LongBench): the tasks are grouped into families (niah:
// niah*, ruler_niah_*; multihop: ruler_vt; aggregation: ruler_cwe, ruler_fwe; qa: squad*, ruler_qa*,
// hotpot*; any other task its own family). For each family, (α, β) are fitted on the others; each
// of its samples is compressed at the r* the fit gives for its context and τ (taus=, default
// 0.9,0.95), its questions answered (teacher-forced), and the measured y at r* compared with τ:
// "heldout" in the fit holds per family and τ the mean r*, the mean measured keep, the coverage
// (share of samples with y >= τ) and the median y. The deployed (α, β) are fitted on every family.
//
// Options (everything else is passed to press P):
//   press=P (required), tasks=LIST (default niah,ruler_niah_single_2,ruler_niah_multikey_1,
//   squad_multi: the retrieval and QA tasks of the eval; Compactor used a subset of RULER),
//   ratios=LIST (default 0.1,0.2,...,0.9), depths=LIST (NIAH, default 0.1,0.3,0.5,0.7,0.9),
//   under_weight=W (default 4), fit=log|linear (default log), nll_floor=ε (default 0.02),
//   fit_alpha=true|false (default true; false: b is one constant), clip=true|false (fit=linear
//   only, default true), heldout=true|false (default true), taus=LIST (default 0.9,0.95).
// --samples N (default 2 per length x depth cell), --tokens L (one target length, default
// min(n_ctx_train, 1024)). Samples are drawn with seed + 1000003, so they are not the samples
// `kvshrink eval --seed S` evaluates. The fit is stored under the press's key (quality_key) in
// the model's "quality" calibration, next to the fits of other presses (merged into the file):
// `fit_triples` holds exactly the (r, nll_context, y) the fit used (measured r, floored and
// combined y with fit=log), so fit_calibration on them gives the stored (α, β) again; `triples`
// the raw measurements per question (nominal r, keep_measured, both NLLs, the unfloored ratio).
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

// The task family a task belongs to (held-out evaluation).
std::string task_family(const std::string& t) {
  auto starts = [&](const char* p) { return t.rfind(p, 0) == 0; };
  if (starts("niah") || starts("ruler_niah")) return "niah";
  if (t == "ruler_vt") return "multihop";
  if (t == "ruler_cwe" || t == "ruler_fwe") return "aggregation";
  if (starts("squad") || starts("ruler_qa") || starts("hotpot")) return "qa";
  return t;
}

// One calibration sample: its context, questions with answers, the context's NLL and the
// full-cache answer NLLs.
struct CalibSample {
  std::string task, family, id;
  std::vector<int32_t> ctx;
  std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> qa;
  double nll_c = 0;
  std::vector<double> full;
};

// Geometric mean over the questions of (NLL_full + ε) / (NLL_comp + ε), the fitted y.
double floored_ratio(const std::vector<double>& full, const std::vector<double>& comp, double eps) {
  double s = 0;
  for (size_t i = 0; i < full.size(); ++i) s += std::log((full[i] + eps) / (comp[i] + eps));
  return std::exp(s / static_cast<double>(full.size()));
}

nlohmann::json run_quality_calibration(const CalibrateArgs& a) {
  ParamMap opt = a.options;
  auto take = [&](const std::string& k, const std::string& def) {
    const auto it = opt.find(k);
    std::string v = it == opt.end() ? def : it->second;
    if (it != opt.end()) opt.erase(it);
    return v;
  };
  auto take_bool = [&](const std::string& k, const std::string& def) {
    const std::string v = take(k, def);
    const auto b = parse_bool_word(v);
    if (!b) fail("calibrate quality: {} must be true or false, got '{}'", k, v);
    return *b;
  };
  const std::string press = take("press", "");
  if (press.empty()) fail("calibrate quality: give the press to calibrate, --opt press=NAME (and its options)");
  const std::vector<std::string> tasks = split(take("tasks", "niah,ruler_niah_single_2,ruler_niah_multikey_1,squad_multi"), ',');
  const std::vector<double> ratios = parse_list(take("ratios", "0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9"), "ratios", 1e-6, 1.0);
  const std::vector<double> depths = parse_list(take("depths", "0.1,0.3,0.5,0.7,0.9"), "depths", 0.0, 1.0);
  const double under = parse_list(take("under_weight", "4"), "under_weight", 1.0, 1e6)[0];
  const std::string fit_form = take("fit", "log");
  if (fit_form != "log" && fit_form != "linear") fail("calibrate quality: fit must be log or linear, got '{}'", fit_form);
  const bool log_fit = fit_form == "log";
  const double eps = parse_list(take("nll_floor", "0.02"), "nll_floor", 0.0, 100.0)[0];
  if (log_fit && !(eps > 0)) fail("calibrate quality: the log fit needs nll_floor > 0");
  const bool fit_alpha = take_bool("fit_alpha", "true");
  const bool clip = take_bool("clip", "true");
  const bool heldout = take_bool("heldout", "true");
  const std::vector<double> taus = parse_list(take("taus", "0.9,0.95"), "taus", 1e-6, 1.0);
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

  // Prefills a sample's full cache (with the press's statistics and the context's NLL).
  auto prefill = [&](CompressedContext& base, const CalibSample& cs) { base.prefill(cs.ctx, need); };
  // Answer NLLs of every question on a fork compressed at keep r; returns them, the measured keep.
  auto compressed_nlls = [&](const CompressedContext& base, const CalibSample& cs, double r, double* measured) {
    SpecArgs sa = probe_args;
    sa.keep = r;
    CompressedContext c(a.engine, make_compression_spec(sa));
    c.compress_from(base);
    if (measured) *measured = c.keep_measured();
    std::vector<double> out;
    for (const auto& [q, ans] : cs.qa) out.push_back(answer_nll(a.engine, c.cache(), q, ans));
    return out;
  };

  std::vector<math::CalibTriple> triples;
  std::vector<std::string> triple_family;  // the family of each triple
  std::vector<CalibSample> kept_samples;   // for the held-out pass (contexts and answers only)
  nlohmann::json rows = nlohmann::json::array();
  nlohmann::json fit_rows = nlohmann::json::array();  // exactly the triples fit_calibration sees
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
    CalibSample cs;
    cs.task = task.name();
    cs.family = task_family(cs.task);
    cs.id = spec.id;
    cs.ctx = prompter.context_tokens(smp.context);
    // Question and answer ids of every question with a reference.
    for (const Question& q : smp.questions) {
      if (q.references.empty()) continue;
      const auto qt = prompter.question_tokens(smp.context, cs.ctx, q);
      Question with = q;
      with.answer_prefix += " " + q.references[0];
      const auto at = prompter.question_tokens(smp.context, cs.ctx, with);
      if (!qt.exact || !at.exact || at.ids.size() <= qt.ids.size() ||
          !std::equal(qt.ids.begin(), qt.ids.end(), at.ids.begin()))
        continue;  // the answer does not tokenize as a continuation of the question
      cs.qa.push_back({qt.ids, {at.ids.begin() + static_cast<std::ptrdiff_t>(qt.ids.size()), at.ids.end()}});
    }
    if (cs.qa.empty()) continue;
    CompressedContext base(a.engine, make_compression_spec({}));
    prefill(base, cs);
    for (float x : base.context_nll()) cs.nll_c += x;
    cs.nll_c /= static_cast<double>(std::max<size_t>(1, base.context_nll().size()));
    for (const auto& [q, ans] : cs.qa) cs.full.push_back(answer_nll(a.engine, base.cache(), q, ans));
    for (double r : ratios) {
      double measured = r;
      const std::vector<double> comp = compressed_nlls(base, cs, r, &measured);
      for (size_t i = 0; i < cs.qa.size(); ++i) {
        const double y = comp[i] > 0 ? cs.full[i] / comp[i] : 1.0;
        rows.push_back({{"task", cs.task}, {"sample", cs.id}, {"question", i}, {"r", r},
                        {"keep_measured", std::round(measured * 1e6) / 1e6}, {"nll_context", cs.nll_c},
                        {"nll_full", cs.full[i]}, {"nll_compressed", comp[i]}, {"y", y}});
        if (!log_fit) {
          triples.push_back({r, cs.nll_c, clip ? std::min(y, 1.0) : y});
          triple_family.push_back(cs.family);
        }
      }
      if (log_fit) {
        triples.push_back({std::clamp(measured, 1e-6, 1.0 - 1e-9), cs.nll_c, floored_ratio(cs.full, comp, eps)});
        triple_family.push_back(cs.family);
      }
      for (size_t i = fit_rows.size(); i < triples.size(); ++i)
        fit_rows.push_back({{"task", cs.task}, {"sample", cs.id}, {"family", cs.family}, {"r", triples[i].r},
                            {"nll_context", triples[i].nll}, {"y", triples[i].y}});
    }
    kept_samples.push_back(std::move(cs));
    ++done;
  }
  if (triples.size() < 2)
    fail("calibrate quality: only {} triples ({} samples skipped): give more samples, other tasks or lengths",
         triples.size(), skipped);
  math::CalibFitOptions fo;
  fo.under_weight = under;
  fo.log_space = log_fit;
  fo.fit_alpha = fit_alpha;
  const math::CalibFit fit = math::fit_calibration(triples, fo);

  // Held out: fit without a family, compress its samples at the r* of that fit, measure y.
  nlohmann::json held = nlohmann::json::object();
  std::vector<std::string> families;
  for (const auto& f : triple_family)
    if (std::find(families.begin(), families.end(), f) == families.end()) families.push_back(f);
  if (heldout && families.size() >= 2) {
    for (const std::string& fam : families) {
      std::vector<math::CalibTriple> rest;
      for (size_t i = 0; i < triples.size(); ++i)
        if (triple_family[i] != fam) rest.push_back(triples[i]);
      math::CalibFit hf;
      try {
        hf = math::fit_calibration(rest, fo);
      } catch (const Error&) {
        continue;  // too few triples without this family
      }
      nlohmann::json per_tau = nlohmann::json::object();
      for (double tau : taus) {
        std::vector<double> ys;
        double r_sum = 0, keep_sum = 0;
        int covered = 0;
        for (const CalibSample& cs : kept_samples) {
          if (cs.family != fam) continue;
          const double r_star = math::calib_solve_r(tau, math::calib_b(hf.alpha, hf.beta, cs.nll_c));
          CompressedContext base(a.engine, make_compression_spec({}));
          prefill(base, cs);
          double measured = r_star;
          const std::vector<double> comp = compressed_nlls(base, cs, r_star, &measured);
          const double y = floored_ratio(cs.full, comp, eps > 0 ? eps : 0.02);
          ys.push_back(y);
          covered += y >= tau;
          r_sum += r_star;
          keep_sum += measured;
        }
        if (ys.empty()) continue;
        std::sort(ys.begin(), ys.end());
        const double n = static_cast<double>(ys.size());
        per_tau[fmt::format("{}", tau)] = {{"samples", ys.size()},
                                          {"r_star_mean", std::round(r_sum / n * 1e4) / 1e4},
                                          {"keep_measured_mean", std::round(keep_sum / n * 1e4) / 1e4},
                                          {"coverage", std::round(covered / n * 1e4) / 1e4},
                                          {"y_median", std::round(ys[ys.size() / 2] * 1e4) / 1e4}};
      }
      held[fam] = {{"alpha", hf.alpha}, {"beta", hf.beta}, {"n_triples", hf.n_used}, {"tau", per_tau}};
    }
  }
  // One file holds every press's fit: merge with what is there.
  nlohmann::json j = load_calibration(m, kQualityCalibration).value_or(nlohmann::json::object());
  if (!j.contains("fits") || !j["fits"].is_object()) j["fits"] = nlohmann::json::object();
  j["fits"][key] = {{"alpha", fit.alpha},
                    {"beta", fit.beta},
                    {"loss", fit.loss},
                    {"iterations", fit.iterations},
                    {"n_triples", fit.n_used},
                    {"under_weight", under},
                    {"fit", fit_form},
                    {"nll_floor", eps},
                    {"fit_alpha", fit_alpha},
                    {"clip", !log_fit && clip},
                    {"press", press},
                    {"options", opt},
                    {"tasks", tasks},
                    {"families", families},
                    {"ratios", ratios},
                    {"samples", done},
                    {"length", cfg.lengths[0]},
                    {"seed", cfg.seed},
                    {"heldout", held},
                    {"fit_triples", fit_rows},
                    {"triples", rows}};
  if (a.progress) {
    fmt::print(stderr, "quality calibration ({}): alpha {:.4f}, beta {:.4f} from {} triples (loss {:.4f})\n", key,
               fit.alpha, fit.beta, fit.n_used, fit.loss);
    for (const auto& [fam, h] : held.items())
      for (const auto& [tau, t] : h["tau"].items())
        fmt::print(stderr, "  held out {}: tau {} -> r* {:.3f}, coverage {:.2f} of {} samples, median y {:.3f}\n", fam, tau,
                   t["r_star_mean"].get<double>(), t["coverage"].get<double>(), t["samples"].get<int>(),
                   t["y_median"].get<double>());
  }
  return j;
}

}  // namespace

CalibratorInfo quality_calibrator() {
  return {"quality",
          "context-calibrated keep ratios for any press (Compactor §3.5): fits (alpha, beta) of the NLL-ratio curve "
          "on calibration tasks in log space, with held-out task families (--opt press=P [P's options], tasks=, "
          "ratios=, under_weight=, fit=, nll_floor=, fit_alpha=, heldout=, taus=)",
          run_quality_calibration};
}

}  // namespace kvs::eval
