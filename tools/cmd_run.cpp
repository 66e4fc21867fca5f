// kvshrink run: prefill a context, compress it (query-agnostic by default), answer questions on
// forks of the compressed cache, and report the memory kept.
#include <fmt/format.h>

#include "cli_common.h"
#include "context_report.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "core/progress.h"
#include "core/timer.h"
#include "runtime/kvc_meta.h"
#include "eval/inspect/page.h"
#include "inspect_output.h"
#include "press_options.h"

namespace kvs::cli {
namespace {

struct RunOptions {
  EngineOptions eng;
  PressOptions press;
  PromptOptions prompt;
  std::string context_file, context_text, inspect_html, inspect_png;
  std::vector<std::string> questions;
  int max_new = 64;
  bool query_aware = false, per_layer = false, no_progress = false;
};

void run_run(const RunOptions& o) {
  if (o.context_file.empty() == o.context_text.empty()) fail("give exactly one of --context FILE or --context-text TEXT");
  if (o.questions.empty()) fail("give at least one --question");
  if (!o.inspect_html.empty()) check_output_file("--inspect", o.inspect_html);
  if (!o.inspect_png.empty()) check_output_file("--inspect-png", o.inspect_png);
  if (o.query_aware && (!o.inspect_html.empty() || !o.inspect_png.empty()))
    fail("--inspect / --inspect-png show one compressed context; with --query-aware each question compresses its own "
         "(drop --query-aware, or inspect one with `kvshrink compress` + `kvshrink inspect`)");
  const std::string context = o.context_file.empty() ? o.context_text : read_file(o.context_file);
  auto model = Model::load(o.eng.model);
  Engine engine(*model, o.eng.params());
  const Tokenizer& tok = *model->tokenizer;
  CompressedContext ctx(engine, o.press.spec());
  if (!o.no_progress) ctx.set_prefill_progress(progress_callback("prefill", prefill_progress_options()));
  const auto ctx_ids = o.prompt.context_tokens(tok, context);
  if (o.query_aware)
    ctx.set_context(ctx_ids);  // each question prefills context + question once
  else
    ctx.prefill(ctx_ids);
  if (!o.inspect_html.empty() || !o.inspect_png.empty()) {
    const std::string title = o.context_file.empty() ? std::string("--context-text") : o.context_file;
    write_inspect_outputs(inspect::make_page(cache_meta(*model, o.press, o.prompt, ctx), ctx.cache(), &tok, ctx_ids, title),
                          o.inspect_html, o.inspect_png);
  }
  AnswerOptions ao;
  ao.max_new_tokens = o.max_new;
  for (const auto& q : o.questions) {
    const auto q_ids = o.prompt.question_tokens(tok, q);
    Answer a = o.query_aware ? ctx.ask_query_aware(q_ids, ao) : ctx.ask(q_ids, ao);
    fmt::print("Q: {}\nA: {}\n", q, a.text);
    fmt::print(stderr, "   ({} tokens: question prefill {:.3f} s, decode {:.3f} s = {:.1f} tokens/s{})\n", a.tokens.size(),
               a.prefill_seconds, a.decode_seconds, a.tokens.size() / std::max(a.decode_seconds, 1e-9),
               a.compress_seconds > 0 ? fmt::format(", {} {:.3f} s", a.compression ? "compression" : "eviction",
                                                     a.compress_seconds)
                                      : "");
    if (a.compression) print_query_aware_memory(*a.compression);
  }
  print_context_report(ctx, engine, o.press, o.per_layer, o.query_aware);
}

}  // namespace

void register_run(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "compress a context once and answer questions about it");
  o->eng.add(cmd);
  add_press_options(cmd, o->press);
  add_prompt_options(cmd, o->prompt);
  cmd->add_option("--context", o->context_file, "context text file")->check(CLI::ExistingFile);
  cmd->add_option("--context-text", o->context_text, "context given inline");
  cmd->add_option("--question", o->questions, "a question (repeatable)");
  cmd->add_option("-n,--max-new", o->max_new, "tokens per answer at most")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  cmd->add_flag("--query-aware", o->query_aware, "compress context + question together (per question)");
  cmd->add_flag("--per-layer", o->per_layer, "print the keep ratio of every layer and KV head");
  cmd->add_flag("--no-progress", o->no_progress, "no progress display while a long context is prefilled");
  cmd->add_option("--inspect", o->inspect_html, "write the page of `kvshrink inspect` for the compressed context (HTML)");
  cmd->add_option("--inspect-png", o->inspect_png, "write the heatmap of `kvshrink inspect --png` (PNG)");
  cmd->callback([o] { run_run(*o); });
}

}  // namespace kvs::cli
