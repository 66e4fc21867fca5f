// kvshrink::Context: asking, deriving compressed contexts from one prefill, saving, and reading
// what each (layer, KV head) kept.
#include <fmt/format.h>

#include "core/error.h"
#include "impl.h"
#include "kvcache/cache_file.h"
#include "scoring.h"

namespace kvshrink {

Context::Context(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Context::~Context() {
  if (!impl_) return;
  // Freeing the context's pages goes to the model's page pool: under the engine lock, held
  // through a reference that outlives the context (it may be the model's last owner).
  const std::shared_ptr<Model::Impl> m = impl_->model;
  auto lock = detail::engine_lock(*m);
  impl_.reset();
}
Context::Context(Context&&) noexcept = default;
Context& Context::operator=(Context&& o) noexcept {
  if (this != &o) {
    Context old(std::move(*this));  // released under its model's lock by ~Context
    impl_ = std::move(o.impl_);
  }
  return *this;
}

namespace {
Context::Impl& live(const std::unique_ptr<Context::Impl>& p) {
  if (!p) throw Error("this Context was moved from");
  return *p;
}
void check_head(const kvs::KvCache& c, int layer, int head) {
  const kvs::KvLayout& l = c.layout();
  if (layer < 0 || layer >= l.n_layer) kvs::fail("layer {} is out of range (the model has {} layers)", layer, l.n_layer);
  if (head < 0 || head >= l.n_head_kv)
    kvs::fail("head {} is out of range (the model has {} KV heads per layer)", head, l.n_head_kv);
}
}  // namespace

Answer Context::ask(const std::string& question, const AskOptions& options) {
  return detail::guarded([&] {
    Impl& c = live(impl_);
    auto lock = detail::engine_lock(*c.model);
    const auto q = c.prompt.question_tokens(*c.model->model->tokenizer, question);
    const kvs::AnswerOptions ao = detail::answer_options(options);
    if (options.query_aware) {
      if (c.context_tokens.empty())
        kvs::fail("ask: query_aware needs the context's text; a context loaded from a .kvc file has only its KV");
      return detail::to_answer(c.ctx->ask_query_aware(q, ao));
    }
    return detail::to_answer(c.ctx->ask(q, ao));
  });
}

Context Context::compress(const CompressOptions& options) const {
  return detail::guarded([&] {
    const Impl& base = live(impl_);
    auto lock = detail::engine_lock(*base.model);
    if (!base.uncompressed_base)
      kvs::fail("compress: this context is already compressed (press '{}'); compress a context from Model::prefill",
                base.options.press);
    if (options.chat != base.options.chat)
      kvs::fail("compress: options.chat is {} but the context was prefilled with chat={}", options.chat, base.options.chat);
    kvs::Engine& engine = *base.model->engine;
    auto c = std::make_unique<Impl>();
    c->model = base.model;
    c->options = options;
    c->press = detail::press_options(options);
    c->prompt = detail::prompt_options(options);
    c->prompt.question_tokens(*base.model->model->tokenizer, "");  // checks the question template
    const kvs::CompressionSpec spec = c->press.spec();
    c->context_tokens = base.context_tokens;
    c->ctx = std::make_unique<kvs::CompressedContext>(engine, spec);
    if (detail::base_covers(*base.ctx, spec)) {
      if (options.keep_scores) c->scores = detail::score_context(engine, *base.ctx, base.context_tokens, spec);
      c->ctx->compress_from(*base.ctx);
    } else {
      // The prefill did not collect this press's statistics (Model::prefill's prepare_for): again.
      if (options.keep_scores) {
        kvs::CompressedContext fresh(engine, detail::press_options(CompressOptions{}).spec());
        fresh.prefill(base.context_tokens, spec.press.needs());
        c->scores = detail::score_context(engine, fresh, base.context_tokens, spec);
        c->ctx->compress_from(fresh);
      } else {
        c->ctx->prefill(base.context_tokens);
      }
    }
    return Context(std::move(c));
  });
}

void Context::save(const std::string& path) const {
  detail::guarded([&] {
    const Impl& c = live(impl_);
    auto lock = detail::engine_lock(*c.model);
    nlohmann::json meta = kvs::cache_meta(*c.model->model, c.press, c.prompt, *c.ctx);
    if (c.loaded_keep_chosen) meta["keep_chosen"] = *c.loaded_keep_chosen;
    kvs::save_cache(path, c.ctx->cache(), meta);
  });
}

const CompressOptions& Context::options() const { return live(impl_).options; }
int Context::n_layer() const { return live(impl_).ctx->cache().layout().n_layer; }
int Context::n_head_kv() const { return live(impl_).ctx->cache().layout().n_head_kv; }
int Context::context_tokens() const { return live(impl_).ctx->context_tokens(); }

std::vector<int32_t> Context::kept_positions(int layer, int head) const {
  return detail::guarded([&] {
    auto lock = detail::engine_lock(*live(impl_).model);
    const kvs::KvCache& cache = live(impl_).ctx->cache();
    check_head(cache, layer, head);
    return cache.head(layer, head).pos;
  });
}

std::vector<float> Context::scores(int layer, int head) const {
  return detail::guarded([&] {
    const Impl& c = live(impl_);
    check_head(c.ctx->cache(), layer, head);
    if (c.scores.empty())
      kvs::fail("scores: none recorded for this context (compress with keep_scores = true; .kvc files do not hold them)");
    return c.scores[static_cast<size_t>(layer * c.ctx->cache().layout().n_head_kv + head)];
  });
}

bool Context::has_scores() const { return !live(impl_).scores.empty(); }
double Context::keep_measured() const { return live(impl_).ctx->keep_measured(); }
std::optional<double> Context::keep_chosen() const {
  const Impl& c = live(impl_);
  return c.loaded_keep_chosen ? c.loaded_keep_chosen : c.ctx->keep_chosen();
}
size_t Context::kv_bytes() const { return live(impl_).ctx->cache().bytes_held(); }
size_t Context::full_kv_bytes() const { return live(impl_).ctx->full_bytes(); }

}  // namespace kvshrink
