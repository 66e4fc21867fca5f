// Context-calibrated compression for ANY press (Chari & Van Durme 2025, Compactor §3.5 and §5.4;
// the curve and its fit: press/math/calibration_curve.h): instead of a keep ratio the user gives a
// quality target τ (e.g. 0.95, at most ~5% more NLL on answers), and the press keeps
//     r* = the r with f(r, c) = τ,   f(r, c) = (exp(r b - b) - exp(-b)) / (1 - exp(-b)),
//     b = α NLL(c) + β,   NLL(c) = mean per-token NLL of the context (from the prefill logits),
// where (α, β) were fitted once per (model, press) by `kvshrink calibrate --press quality --opt
// press=P` on (r, context, NLL ratio) triples (src/eval/calibrate_quality.cpp). The fits of every
// press live in one calibration file of the model ("quality": {"fits": {KEY: {"alpha", "beta",
// ...}}}), KEY = the press label (quality_key).
//
// CalibratedAllocator wraps the press's own allocator: it reads the fit through the model probe,
// computes NLL(c) from ModelProbe::context_nll(), solves r*, delegates to the wrapped allocator
// at keep r* and reports r* as keep_chosen. It is adaptive (the request carries no keep ratio) and
// calibrated (it reads CompressRequest::quality when it has no τ of its own).
//
// Two ways in:
//  - `--quality τ` with any press (CLI, .kvc headers): make_compression_spec wraps the press's
//    allocator (make_calibrated_press with the request's quality);
//  - `allocator=quality:tau=τ[:base=ALLOC]` as a press option (eval grids, which carry no quality):
//    the "quality" allocator; make_compression_spec rebuilds the press with `base` (default: the
//    press's own allocator) wrapped. Options of the base allocator keep their defaults there (give
//    them through --quality instead).
#pragma once
#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>

#include "press/press.h"
#include "press/registry.h"

namespace kvs {

// The calibration name (ModelProbe::calibration) holding the fits of every press.
inline constexpr const char* kQualityCalibration = "quality";

struct QualityFit {
  double alpha = 0, beta = 0;
};

class CalibratedAllocator : public BudgetAllocator {
 public:
  // key: the fit's key (quality_key); tau: the target, or none to read CompressRequest::quality.
  CalibratedAllocator(std::shared_ptr<const BudgetAllocator> inner, std::string key, std::optional<double> tau = {});
  std::string name() const override { return "quality"; }
  Needs needs() const override;
  Allocation allocate(const Scores& scores, const PressEnv& env) const override;
  bool adaptive() const override { return true; }
  bool calibrated() const override { return true; }

  const BudgetAllocator& inner() const { return *inner_; }
  const std::string& key() const { return key_; }
  std::optional<double> tau() const { return tau_; }

 private:
  std::shared_ptr<const BudgetAllocator> inner_;
  std::string key_;
  std::optional<double> tau_;
};

// The fit key of press `press` with `options` (as given: CLI --opt, an eval entry): the press name
// and its options that differ from their defaults, sorted ("snapkv:window_size=32"); the quality
// allocator's own options (tau, base) are dropped and allocator=quality is replaced by its base,
// so `compactor`, `compactor:allocator=quality:tau=0.9` and `--press compactor --quality 0.9` share
// one fit.
std::string quality_key(const std::string& press, const ParamMap& options);

// The fit stored under `key` in the model's quality calibration (null: none). Throws kvs::Error
// naming the command to run, or the keys the file holds.
QualityFit quality_fit(const nlohmann::json* calibration, const std::string& key);

// r* for a context of mean token NLL `nll` and target `tau` (in (0, 1]).
double quality_keep(const QualityFit& fit, double nll, double tau);

// True when press options or a quality target ask for a calibrated keep ratio.
bool wants_quality(const ParamMap& options, std::optional<double> quality);
// Press `name` with `options` and its allocator wrapped in a CalibratedAllocator (see above).
// Throws kvs::Error when both a quality target and allocator=quality are given.
Press make_calibrated_press(const std::string& name, const ParamMap& options, std::optional<double> quality);

// The allocator registry's "quality" entry (options tau, base).
AllocatorInfo quality_allocator_info();

}  // namespace kvs
