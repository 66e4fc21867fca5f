// kvshrink make-model: write a random-weight model in a real shape (for speed measurements).
#include <fmt/format.h>

#include "cli_common.h"
#include "core/atomic_output.h"
#include "core/error.h"
#include "core/timer.h"
#include "model/model.h"
#include "model/presets.h"
#include "model/random_model.h"

namespace kvs::cli {
namespace {

struct MakeModelOptions {
  std::string shape, config, tokenizer, type = "f32", out;
  uint64_t seed = 1;
  int window = -1;  // < 0: the shape's own
  bool list = false;
};

void run_make_model(const MakeModelOptions& o) {
  if (o.list) {
    for (const auto& p : shape_presets()) fmt::print("{:<16} {}\n", p.name, p.description);
    return;
  }
  if (o.shape.empty() == o.config.empty()) fail("give exactly one of --shape NAME or --config config.json");
  if (o.out.empty()) fail("missing -o OUT.gguf");
  kvs::check_output_file(o.out, "-o");  // before the weights are generated; written via core/atomic_output
  HParams hp;
  std::string name;
  if (!o.shape.empty()) {
    hp = shape_preset(o.shape).hp;
    name = o.shape + "-random";
  } else {
    hp = detail::hparams_from_hf_config(o.config);
    name = "random";
  }
  if (o.window >= 0) {
    if (hp.n_swa == 0) fail("--window {}: shape '{}' has no sliding-window layers", o.window, o.shape.empty() ? o.config : o.shape);
    if (o.window < 1) fail("--window must be >= 1, got {}", o.window);
    hp.n_swa = o.window;
  }
  DType type;
  if (!dtype_from_name(o.type, &type)) fail("--type '{}' is not a known tensor type", o.type);
  VocabSpec vocab = o.tokenizer.empty() ? synthetic_spm_vocab(hp.n_vocab) : vocab_from_hf_dir(o.tokenizer);
  Timer t;
  write_random_gguf(hp, std::move(vocab), type, o.seed, name, o.out);
  fmt::print(stderr, "wrote {} ({}, {} weights) in {:.1f} s\n", o.out, hp.summary(), o.type, t.seconds());
}

}  // namespace

void register_make_model(CLI::App& app) {
  auto o = std::make_shared<MakeModelOptions>();
  CLI::App* cmd = app.add_subcommand("make-model", "write a random-weight model in a real shape");
  cmd->add_option("--shape", o->shape, "shape preset (see --list)");
  cmd->add_option("--config", o->config, "HF config.json giving the shape")->check(CLI::ExistingFile);
  cmd->add_option("--tokenizer", o->tokenizer, "HF directory whose tokenizer to embed (default: synthetic)")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--type", o->type, "weight type: f32, f16, bf16, q8_0, q4_0, q4_k, q6_k")->capture_default_str();
  cmd->add_option("--seed", o->seed, "random seed")->capture_default_str();
  cmd->add_option("-o,--out", o->out, "output GGUF path");
  cmd->add_option("--window", o->window,
                  "override the sliding window of a shape's local layers (tests that cross it at short lengths)");
  cmd->add_flag("--list", o->list, "list the shape presets");
  cmd->callback([o] { run_make_model(*o); });
}

}  // namespace kvs::cli
