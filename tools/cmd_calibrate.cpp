// kvshrink calibrate: per-model preparation of a press (see src/eval/calibrators.h), saved next
// to the model (src/runtime/calibration_store.h) where the press finds it.
#include <fmt/format.h>

#include "cli_common.h"
#include "core/error.h"
#include "core/timer.h"
#include "eval/calibrators.h"
#include "runtime/calibration_store.h"

namespace kvs::cli {
namespace {

struct CalibrateOptions {
  EngineOptions eng;
  std::string press, data, out;
  std::vector<std::string> opts;
  int samples = 0, tokens = 0;
  uint64_t seed = 0;
  bool list = false, no_progress = false;
};

void run_calibrate(const CalibrateOptions& o) {
  if (o.list) {
    for (const auto& c : eval::calibrators()) fmt::print("{:<12} {}\n", c.press, c.description);
    if (eval::calibrators().empty()) fmt::print("(no press has a calibration yet)\n");
    return;
  }
  if (o.eng.model.empty()) fail("--model is required");
  if (o.press.empty()) fail("--press is required (kvshrink calibrate --list shows which presses have one)");
  const eval::CalibratorInfo& cal = eval::calibrator(o.press);
  auto model = Model::load(o.eng.model);
  Engine engine(*model, o.eng.params());
  eval::DataStore data(o.data.empty() ? eval::DataStore::default_root() : o.data);
  eval::CalibrateArgs args{*model, engine, data, o.samples, o.tokens, parse_params(o.opts), o.seed, !o.no_progress};
  Timer t;
  const nlohmann::json result = cal.run(args);
  const std::string path = save_calibration(*model, o.press, result, o.out);
  fmt::print(stderr, "calibrated {} for {} in {:.1f} s -> {}\n", o.press, model->name, t.seconds(), path);
}

}  // namespace

void register_calibrate(CLI::App& app) {
  auto o = std::make_shared<CalibrateOptions>();
  CLI::App* cmd = app.add_subcommand("calibrate", "prepare a press for a model (saved next to the model)");
  o->eng.add(cmd, false);
  cmd->add_option("--press", o->press, "press to calibrate (see --list)");
  cmd->add_option("--opt", o->opts, "press option key=value (repeatable)");
  cmd->add_option("--samples", o->samples, "calibration samples (default: the press's)")->check(CLI::Range(0, 100000));
  cmd->add_option("--tokens", o->tokens, "tokens per sample (default: the press's)")->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--data", o->data, "data directory (default: $KVSHRINK_DATA, else the data shipped beside the binary, share/kvshrink/data)");
  cmd->add_option("-o,--out", o->out, "output file (default: next to the model)");
  cmd->add_option("--seed", o->seed, "seed")->capture_default_str();
  cmd->add_flag("--list", o->list, "list the presses that have a calibration");
  cmd->add_flag("--no-progress", o->no_progress, "no progress lines");
  cmd->callback([o] { run_calibrate(*o); });
}

}  // namespace kvs::cli
