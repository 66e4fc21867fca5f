// kvshrink compress: prefill + compress a context and save the compressed cache (.kvc);
// kvshrink ask: answer a question from a saved compressed cache, without the original text.
#include <fmt/format.h>

#include "runtime/kvc_meta.h"
#include "cli_common.h"
#include "context_report.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "kvcache/cache_file.h"
#include "press_options.h"

namespace kvs::cli {
namespace {

struct CompressOptions {
  EngineOptions eng;
  PressOptions press;
  PromptOptions prompt;
  std::string context_file, out;
  bool per_layer = false;
};

void run_compress(const CompressOptions& o) {
  check_output_file("-o", o.out);  // before the model is loaded and the context prefilled
  auto model = Model::load(o.eng.model);
  Engine engine(*model, o.eng.params());
  CompressedContext ctx(engine, o.press.spec());
  ctx.prefill(o.prompt.context_tokens(*model->tokenizer, read_file(o.context_file)));
  save_cache(o.out, ctx.cache(), cache_meta(*model, o.press, o.prompt, ctx));
  fmt::print(stderr, "wrote {}\n", o.out);
  print_context_report(ctx, engine, o.press, o.per_layer, false);
}

struct AskOptions {
  EngineOptions eng;
  std::string file;
  std::vector<std::string> questions;
  int max_new = 64;
};

void run_ask(const AskOptions& o) {
  const nlohmann::json meta = read_cache_header(o.file);
  AskOptions a = o;
  if (a.eng.model.empty()) a.eng.model = meta_model_path(meta, o.file);
  auto model = Model::load(a.eng.model);
  check_cache_model(meta, *model, o.file);
  EngineParams ep = a.eng.params();
  Engine engine(*model, ep);
  LoadedCache lc = load_cache(o.file, engine.page_pool(), engine.kv_layout());
  PressOptions po = press_options_from_meta(meta);
  PromptOptions pr = prompt_options_from_meta(meta);
  CompressedContext ctx(engine, po.spec());
  ctx.adopt(std::move(lc.cache), meta.value("full_bytes", size_t{0}), meta.value("full_slots", size_t{0}),
            press_state_from_meta(meta, o.file));
  AnswerOptions ao;
  ao.max_new_tokens = o.max_new;
  for (const auto& q : o.questions) {
    Answer ans = ctx.ask(pr.question_tokens(*model->tokenizer, q), ao);
    fmt::print("Q: {}\nA: {}\n", q, ans.text);
  }
  const double measured = meta.value("keep_measured", ctx.keep_measured());
  const auto& chosen = meta.contains("keep_chosen") ? meta.at("keep_chosen") : nlohmann::json(nullptr);
  fmt::print(stderr, "context: {} tokens compressed by {} (keep {}{}; kept {:.3f}), KV held {}\n", ctx.context_tokens(),
             po.press, ctx.spec().request.describe(),
             chosen.is_number() ? fmt::format(", chose {:.3f}", chosen.get<double>()) : "", measured,
             format_bytes(ctx.cache().bytes_held()));
}

}  // namespace

void register_compress(CLI::App& app) {
  auto o = std::make_shared<CompressOptions>();
  CLI::App* cmd = app.add_subcommand("compress", "compress a context and save it as a .kvc file");
  o->eng.add(cmd);
  add_press_options(cmd, o->press);
  add_prompt_options(cmd, o->prompt);
  cmd->add_option("--context", o->context_file, "context text file")->required()->check(CLI::ExistingFile);
  cmd->add_option("-o,--out", o->out, "output .kvc file")->required();
  cmd->add_flag("--per-layer", o->per_layer, "print per-layer keep ratios");
  cmd->callback([o] { run_compress(*o); });

  auto a = std::make_shared<AskOptions>();
  CLI::App* ask = app.add_subcommand("ask", "answer questions from a saved compressed context");
  ask->add_option("file", a->file, ".kvc file written by `kvshrink compress`")->required()->check(CLI::ExistingFile);
  ask->add_option("question", a->questions, "question(s)")->required();
  a->eng.add(ask, false);
  ask->add_option("-n,--max-new", a->max_new, "tokens per answer at most")->capture_default_str();
  ask->callback([a] { run_ask(*a); });
}

}  // namespace kvs::cli
