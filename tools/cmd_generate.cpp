// kvshrink generate: stream a completion (or a chat reply) and report prefill/decode speed and
// memory.
#include <fmt/format.h>

#include "cli_common.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "core/progress.h"
#include "core/timer.h"
#include "press_options.h"
#include "runtime/sampler.h"
#include "runtime/session.h"

namespace kvs::cli {
namespace {

struct GenerateOptions {
  EngineOptions eng;
  PressOptions press;
  std::string prompt, prompt_file, system;
  int n_predict = 128;
  bool chat = false, ignore_eos = false, quiet = false;
  SamplerParams sp;
};

// Every numeric option is checked before the model is loaded.
void check_options(const GenerateOptions& o) {
  require_number("--temp", o.sp.temp, 0, 100);
  require_int("--top-k", o.sp.top_k, 0, 1 << 24);
  require_number("--top-p", o.sp.top_p, 0, 1, /*lo_open=*/true);
  require_number("--min-p", o.sp.min_p, 0, 1, false, /*hi_open=*/true);
  require_int("--n-predict", o.n_predict, 0, 1 << 24);
}

void run_generate(const GenerateOptions& o) {
  check_options(o);
  std::string prompt = o.prompt;
  if (!o.prompt_file.empty()) prompt = read_file(o.prompt_file);
  if (prompt.empty() && !o.chat) fail("empty prompt: give -p TEXT or -f FILE");
  Timer load_t;
  auto model = Model::load(o.eng.model);
  const double load_s = load_t.seconds();
  Engine engine(*model, o.eng.params());
  const Tokenizer& tok = *model->tokenizer;
  Sampler sampler(o.sp);

  std::vector<int32_t> ids;
  if (o.chat) {
    std::vector<ChatMessage> msgs;
    if (!o.system.empty()) msgs.push_back({"system", o.system});
    msgs.push_back({"user", prompt});
    ids = tok.encode(tok.apply_chat_template(msgs, true), true, true);
  } else {
    ids = tok.encode(prompt, true, false);
  }
  if (ids.empty()) fail("the prompt tokenized to nothing");
  if (static_cast<int>(ids.size()) + o.n_predict > model->hp.n_ctx_train && !o.quiet)
    fmt::print(stderr, "warning: {} prompt + {} new tokens exceed the model's training context of {}\n", ids.size(),
               o.n_predict, model->hp.n_ctx_train);

  if (o.press.press != "full") {
    // Compressed generation: the prompt minus its last token is the context, compressed before
    // generation starts; the last token is fed on the compressed cache, then decoding continues
    // (with decode-time eviction for presses that do it).
    if (ids.size() < 2) fail("--press needs a prompt of at least 2 tokens");
    CompressedContext ctx(engine, o.press.spec());
    if (!o.quiet) ctx.set_prefill_progress(progress_callback("prefill", prefill_progress_options()));
    Timer pt;
    ctx.prefill(std::span<const int32_t>(ids).first(ids.size() - 1));
    AnswerOptions ao;
    ao.max_new_tokens = o.n_predict;
    ao.sampler = o.sp;
    ao.stop_at_eog = !o.ignore_eos;
    Answer a = ctx.ask(std::span<const int32_t>(ids).last(1), ao);
    const double prefill_s = pt.seconds() - a.decode_seconds - a.compress_seconds;
    Utf8Stream out;
    if (!o.chat) out.write(prompt);
    out.write(a.text);
    out.flush();
    std::fputc('\n', stdout);
    if (o.quiet) return;
    fmt::print(stderr, "\nprefill: {} tokens in {:.3f} s = {:.1f} tokens/s (compression included)\n", ids.size(), prefill_s,
               ids.size() / std::max(prefill_s, 1e-9));
    fmt::print(stderr, "decode:  {} tokens in {:.3f} s = {:.1f} tokens/s\n", a.tokens.size(), a.decode_seconds,
               a.tokens.size() / std::max(a.decode_seconds, 1e-9));
    fmt::print(stderr, "kv cache: prompt {} -> {} after {} (keep {}); {} at the end of generation\n",
               format_bytes(ctx.full_bytes()), format_bytes(ctx.cache().bytes_held()), o.press.press, o.press.keep,
               format_bytes(a.kv_bytes_end));
    return;
  }
  auto cache = engine.new_cache();
  Utf8Stream out;
  Timer pt;
  // Prefill in the engine's chunks, showing progress (on stderr, silent under a second); the
  // prompt is echoed once it is in, so that a progress bar does not draw over it.
  const auto progress = o.quiet ? nullptr : progress_callback("prefill", prefill_progress_options());
  const size_t nb = static_cast<size_t>(std::max(1, engine.params().n_batch));
  std::vector<float> logits;
  for (size_t b = 0; b < ids.size(); b += nb) {
    const size_t n = std::min(nb, ids.size() - b);
    logits = engine.forward(*cache, std::span<const int32_t>(ids).subspan(b, n), b + n == ids.size() ? Logits::Last : Logits::None);
    if (progress) progress(b + n, ids.size());
  }
  const double prefill_s = pt.seconds();
  if (!o.chat) out.write(prompt);
  Timer dt;
  int n_gen = 0;
  for (; n_gen < o.n_predict; ++n_gen) {
    const int32_t next = sampler.sample(logits);
    if (!o.ignore_eos && tok.is_eog(next)) break;
    out.write(tok.token_bytes(next));
    if (n_gen + 1 == o.n_predict) {
      ++n_gen;
      break;
    }
    logits = engine.forward(*cache, std::span<const int32_t>(&next, 1), Logits::Last);
  }
  const double decode_s = dt.seconds();
  out.flush();
  std::fputc('\n', stdout);
  if (o.quiet) return;
  fmt::print(stderr, "\nmodel: {} ({}), load {:.2f} s, weights {} ({} resident)\n", model->name,
             model->hp.summary(), load_s, format_bytes(model->weight_bytes()), format_bytes(model->resident_bytes()));
  fmt::print(stderr, "prefill: {} tokens in {:.3f} s = {:.1f} tokens/s\n", ids.size(), prefill_s,
             ids.size() / std::max(prefill_s, 1e-9));
  fmt::print(stderr, "decode:  {} tokens in {:.3f} s = {:.1f} tokens/s\n", n_gen, decode_s,
             n_gen > 1 ? (n_gen - 1) / std::max(decode_s, 1e-9) : 0.0);
  fmt::print(stderr, "kv cache: {} tokens, {} held ({} in slots), pool high-water {}, {} threads\n", cache->n_past(),
             format_bytes(cache->bytes_held()), format_bytes(cache->bytes_of_slots()),
             format_bytes(engine.page_pool().high_water_bytes()), engine.pool().size());
}

}  // namespace

void register_generate(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "generate text from a prompt, streaming tokens");
  o->eng.add(cmd);
  add_press_options(cmd, o->press);
  cmd->add_option("-p,--prompt", o->prompt, "prompt text");
  cmd->add_option("-f,--file", o->prompt_file, "read the prompt from a file")->check(CLI::ExistingFile);
  cmd->add_option("-n,--n-predict", o->n_predict, "tokens to generate")->capture_default_str()->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--temp", o->sp.temp, "temperature (0 = greedy)")->capture_default_str();
  cmd->add_option("--top-k", o->sp.top_k, "top-k filter (0 = off)")->capture_default_str();
  cmd->add_option("--top-p", o->sp.top_p, "top-p (nucleus) filter (1 = off)")->capture_default_str();
  cmd->add_option("--min-p", o->sp.min_p, "min-p filter (0 = off)")->capture_default_str();
  cmd->add_option("--seed", o->sp.seed, "sampling seed")->capture_default_str()->check(non_negative_integer());
  cmd->add_flag("--chat", o->chat, "wrap the prompt in the model's chat template");
  cmd->add_option("--system", o->system, "system message (with --chat)");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "keep generating past end-of-generation tokens");
  cmd->add_flag("-q,--quiet", o->quiet, "print only the text");
  cmd->callback([o] { run_generate(*o); });
}

}  // namespace kvs::cli
