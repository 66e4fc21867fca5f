#include "press/budget/calibrated.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "press/math/calibration_curve.h"

namespace kvs {

CalibratedAllocator::CalibratedAllocator(std::shared_ptr<const BudgetAllocator> inner, std::string key,
                                         std::optional<double> tau)
    : inner_(std::move(inner)), key_(std::move(key)), tau_(tau) {
  KVS_ASSERT(inner_ != nullptr);
  if (inner_->adaptive()) fail("quality: allocator '{}' chooses its own keep ratio; it cannot be calibrated", inner_->name());
  if (tau_ && !(*tau_ > 0.0 && *tau_ <= 1.0)) fail("quality: target {} is outside (0, 1]", *tau_);
}

Needs CalibratedAllocator::needs() const {
  Needs n = inner_->needs();
  n.probe = true;
  n.context_nll = true;
  return n;
}

Allocation CalibratedAllocator::allocate(const Scores& scores, const PressEnv& env) const {
  const std::optional<double> tau = tau_ ? tau_ : env.request.quality;
  if (!tau) fail("quality: no target quality (give --quality TAU, or the option allocator=quality:tau=TAU)");
  if (!env.probe) fail("quality: the calibrated keep ratio needs the model (its calibration and the context's NLL)");
  const QualityFit fit = quality_fit(env.probe->calibration(kQualityCalibration), key_);
  const std::span<const float> nll = env.probe->context_nll();
  if (nll.empty()) fail("quality: the context's NLL is not available (a context of one token, or a loaded .kvc)");
  double sum = 0;
  for (float x : nll) sum += x;
  const double r = quality_keep(fit, sum / static_cast<double>(nll.size()), *tau);
  CompressRequest req = env.request;
  req.keep = r;
  req.max_tokens = 0;
  req.quality.reset();
  const PressEnv inner_env{env.cache, env.shape, env.stats, env.pool, req, env.probe, env.state};
  Allocation a = inner_->allocate(scores, inner_env);
  a.keep_chosen = r;
  return a;
}

std::string quality_key(const std::string& press, const ParamMap& options) {
  const PressInfo& info = press_info(press);
  ParamMap o = options;
  const auto it = o.find("allocator");
  if (it != o.end() && it->second == "quality") {
    const auto b = options.find("base");
    if (b == options.end() || b->second.empty())
      o.erase("allocator");
    else
      o["allocator"] = b->second;
    o.erase("tau");
    o.erase("base");
  }
  const std::string alloc = o.count("allocator") ? o.at("allocator") : info.default_allocator;
  if (alloc == info.default_allocator) o.erase("allocator");
  // Drop options equal to their defaults (numbers compared as numbers: "0.30" is "0.3"); a
  // preset's values are the defaults under that preset.
  const PressPreset* preset = selected_preset(info, o);
  for (const auto& spec : press_param_specs(info, alloc)) {
    const auto f = o.find(spec.name);
    if (f == o.end()) continue;
    const std::string& def =
        preset && spec.name != "preset" && preset->values.count(spec.name) ? preset->values.at(spec.name) : spec.default_value;
    const auto x = parse_finite_double(f->second), d = parse_finite_double(def);
    if (f->second == def || (x && d && *x == *d)) o.erase(f);
  }
  std::string key = press;
  for (const auto& [k, v] : o) key += ":" + k + "=" + v;
  return key;
}

QualityFit quality_fit(const nlohmann::json* calibration, const std::string& key) {
  const std::string press = key.substr(0, key.find(':'));
  if (!calibration)
    fail("no quality calibration for this model: run `kvshrink calibrate -m MODEL --press quality --opt press={}` first",
         press);
  const auto fits = calibration->find("fits");
  if (fits == calibration->end() || !fits->is_object()) fail("quality calibration: no 'fits' object (calibrate again)");
  const auto f = fits->find(key);
  if (f == fits->end()) {
    std::string have;
    for (const auto& [k, v] : fits->items()) have += (have.empty() ? "" : ", ") + k;
    fail("no quality calibration for '{}' on this model (calibrated: {}); run `kvshrink calibrate -m MODEL --press "
         "quality --opt press={}` with the same options",
         key, have.empty() ? "none" : have, press);
  }
  auto num = [&](const char* name) {
    const auto x = f->find(name);
    if (x == f->end() || !x->is_number() || !std::isfinite(x->get<double>()))
      fail("quality calibration of '{}': '{}' must be a finite number", key, name);
    return x->get<double>();
  };
  return {num("alpha"), num("beta")};
}

double quality_keep(const QualityFit& fit, double nll, double tau) {
  return math::calib_solve_r(tau, math::calib_b(fit.alpha, fit.beta, nll));
}

bool wants_quality(const ParamMap& options, std::optional<double> quality) {
  const auto it = options.find("allocator");
  return quality.has_value() || (it != options.end() && it->second == "quality");
}

Press make_calibrated_press(const std::string& name, const ParamMap& options, std::optional<double> quality) {
  const PressInfo& info = press_info(name);
  const auto it = options.find("allocator");
  const bool option = it != options.end() && it->second == "quality";
  if (option && quality)
    fail("press '{}': give either a quality target (--quality) or allocator=quality:tau=..., not both", name);
  ParamMap base = options;
  std::optional<double> tau;
  if (option) {
    const Params p(name, press_param_specs(info, "quality"), options);
    tau = p.get_float("tau");
    const std::string b = p.get_str("base");
    base.erase("allocator");
    base.erase("tau");
    base.erase("base");
    if (!b.empty()) base["allocator"] = b;
  }
  Press press = make_press(name, base);
  if (press.is_full()) return press;
  press.allocator = std::make_shared<CalibratedAllocator>(press.allocator, quality_key(name, options), tau);
  return press;
}

AllocatorInfo quality_allocator_info() {
  using T = ParamSpec::Type;
  return {"quality",
          "context-calibrated keep ratio (Compactor §3.5): keep r* with f(r*, c) = tau, from the model's fit "
          "(kvshrink calibrate --press quality --opt press=P) and the context's NLL; adaptive",
          {{"tau", T::Float, "0.95", "target quality: predicted NLL(answer | full) / NLL(answer | compressed)", 1e-6, 1},
           {"base", T::String, "", "allocator spreading the chosen keep ratio (default: the press's own)"}},
          [](const Params& p, const Scorer& s) -> std::shared_ptr<const BudgetAllocator> {
            const std::string base = p.get_str("base").empty() ? "uniform" : p.get_str("base");
            if (base == "quality") fail("quality: base cannot be quality itself");
            const AllocatorInfo& ai = allocator_info(base);
            auto inner = ai.make(Params("quality base " + base, ai.params, {}), s);
            // make_compression_spec replaces this with the press's own base and the press label.
            return std::make_shared<CalibratedAllocator>(std::move(inner), s.name(), p.get_float("tau"));
          }};
}

}  // namespace kvs
