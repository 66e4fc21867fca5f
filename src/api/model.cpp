// kvshrink::Model: loading, tokenizing, generating, and the ways to a Context (prefill, compress,
// load a .kvc).
#include <algorithm>
#include <thread>

#include "kvcache/kv_rows.h"
#include "core/dtype.h"
#include "core/error.h"
#include "impl.h"
#include "kvcache/cache_file.h"
#include "press/registry.h"
#include "scoring.h"

namespace kvshrink {
namespace {

kvs::EngineParams engine_params(const ModelOptions& o) {
  kvs::EngineParams p;
  const int hw = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  if (o.threads < 0 || o.threads > 4 * hw)
    kvs::fail("threads must be in 0..{} (0 = all cores), got {}", 4 * hw, o.threads);
  p.n_threads = o.threads;
  kvs::DType t;
  if (!kvs::dtype_from_name(o.kv_type, &t) || !kvs::kv_dtype_supported(t))
    kvs::fail("kv_type '{}' is not supported (expected {})", o.kv_type, kvs::kv_dtype_names());
  p.kv_dtype = t;
  if (o.page_tokens < 1 || o.page_tokens > 65536)
    kvs::fail("page_tokens must be in 1..65536, got {}", o.page_tokens);
  p.page_tokens = o.page_tokens;
  if (o.batch < 1 || o.batch > (1 << 20)) kvs::fail("batch must be in 1..1048576, got {}", o.batch);
  p.n_batch = o.batch;
  return p;
}

// Uncompressed spec ("full"): prefill and generation.
kvs::CompressionSpec full_spec() { return kvs::make_compression_spec(kvs::SpecArgs{}); }

}  // namespace

Model::Model(const std::string& path, const ModelOptions& options) {
  detail::guarded([&] {
    const kvs::EngineParams ep = engine_params(options);
    auto impl = std::make_shared<Impl>();
    impl->model = kvs::Model::load(path);
    impl->engine = std::make_unique<kvs::Engine>(*impl->model, ep);
    impl_ = std::move(impl);
  });
}

Model::~Model() = default;
Model::Model(const Model&) = default;
Model& Model::operator=(const Model&) = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

ModelInfo Model::info() const {
  const kvs::Model& m = *impl_->model;
  ModelInfo i;
  i.name = m.name;
  i.path = m.path;
  i.arch = m.hp.arch_name;
  i.n_vocab = m.hp.n_vocab;
  i.n_embd = m.hp.n_embd;
  i.n_layer = m.hp.n_layer;
  i.n_head = m.hp.n_head;
  i.n_head_kv = m.hp.n_head_kv;
  i.head_dim = m.hp.head_dim;
  i.n_ctx_train = m.hp.n_ctx_train;
  return i;
}

std::vector<int32_t> Model::tokenize(const std::string& text, bool add_bos) const {
  return detail::guarded([&] { return impl_->model->tokenizer->encode(text, add_bos, false); });
}

std::string Model::detokenize(const std::vector<int32_t>& tokens) const {
  return detail::guarded([&] {
    const int32_t n = impl_->model->tokenizer->n_vocab();
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] < 0 || tokens[i] >= n) kvs::fail("detokenize: token {} at index {} is not in 0..{}", tokens[i], i, n - 1);
    return impl_->model->tokenizer->decode(tokens);
  });
}

Answer Model::generate(const std::string& prompt, const GenerateOptions& options) {
  return detail::guarded([&] {
    auto lock = detail::engine_lock(*impl_);
    const kvs::Tokenizer& tok = *impl_->model->tokenizer;
    std::vector<int32_t> ids;
    if (options.chat) {
      std::vector<kvs::ChatMessage> msgs;
      if (!options.system.empty()) msgs.push_back({"system", options.system});
      msgs.push_back({"user", prompt});
      ids = tok.encode(tok.apply_chat_template(msgs, true), true, true);
    } else {
      if (!options.system.empty()) kvs::fail("generate: 'system' needs chat=true");
      ids = tok.encode(prompt, true, false);
    }
    if (ids.size() < 2) kvs::fail("generate: the prompt is empty (it tokenized to {} token)", ids.size());
    // The prompt minus its last token is prefilled; the last token starts the answer (as
    // `kvshrink generate` does with a press; with `full` nothing is evicted).
    kvs::CompressedContext ctx(*impl_->engine, full_spec());
    ctx.prefill(std::span<const int32_t>(ids).first(ids.size() - 1));
    Answer a = detail::to_answer(ctx.ask(std::span<const int32_t>(ids).last(1), detail::answer_options(options)));
    a.prefill_seconds += ctx.prefill_seconds();
    return a;
  });
}

Context Model::prefill(const std::string& context, const std::vector<CompressOptions>& prepare_for, bool chat) {
  return detail::guarded([&] {
    auto lock = detail::engine_lock(*impl_);
    auto c = std::make_unique<Context::Impl>();
    c->model = impl_;
    c->options.chat = chat;
    c->press = detail::press_options(c->options);
    c->prompt = detail::prompt_options(c->options);
    kvs::Needs extra;
    for (const CompressOptions& o : prepare_for)  // the press's needs; its keep etc. come with Context::compress
      extra |= kvs::make_press(o.press, kvs::parse_params(detail::press_options(o).opts)).needs();
    c->context_tokens = c->prompt.context_tokens(*impl_->model->tokenizer, context);
    c->ctx = std::make_unique<kvs::CompressedContext>(*impl_->engine, c->press.spec());
    c->ctx->prefill(c->context_tokens, extra);
    c->uncompressed_base = true;
    return Context(std::move(c));
  });
}

Context Model::compress(const std::string& context, const CompressOptions& options) {
  auto lock = detail::engine_lock(*impl_);
  if (options.keep_scores) {
    // Scores are read from the uncompressed prefill, so go through one.
    Context base = prefill(context, {options}, options.chat);
    return base.compress(options);
  }
  return detail::guarded([&] {
    auto c = std::make_unique<Context::Impl>();
    c->model = impl_;
    c->options = options;
    c->press = detail::press_options(options);
    c->prompt = detail::prompt_options(options);
    // What `kvshrink compress` does: the CLI's spec, the CLI's context tokens, one prefill.
    c->ctx = std::make_unique<kvs::CompressedContext>(*impl_->engine, c->press.spec());
    c->prompt.question_tokens(*impl_->model->tokenizer, "");  // checks the question template before the prefill
    c->context_tokens = c->prompt.context_tokens(*impl_->model->tokenizer, context);
    c->ctx->prefill(c->context_tokens);
    return Context(std::move(c));
  });
}

Context Model::load(const std::string& kvc_path) {
  return detail::guarded([&] {
    // As `kvshrink ask` loads a file: header checks, the model's fingerprint, then the body.
    auto lock = detail::engine_lock(*impl_);
    const nlohmann::json meta = kvs::read_cache_header(kvc_path);
    kvs::check_cache_model(meta, *impl_->model, kvc_path);
    kvs::LoadedCache lc = kvs::load_cache(kvc_path, impl_->engine->page_pool(), impl_->engine->kv_layout());
    auto c = std::make_unique<Context::Impl>();
    c->model = impl_;
    c->press = kvs::press_options_from_meta(meta);
    c->prompt = kvs::prompt_options_from_meta(meta);
    c->options = detail::compress_options(c->press, c->prompt);
    c->ctx = std::make_unique<kvs::CompressedContext>(*impl_->engine, c->press.spec());
    c->ctx->adopt(std::move(lc.cache), meta.value("full_bytes", size_t{0}), meta.value("full_slots", size_t{0}),
                  kvs::press_state_from_meta(meta, kvc_path));
    if (meta.contains("keep_chosen") && meta.at("keep_chosen").is_number())
      c->loaded_keep_chosen = meta.at("keep_chosen").get<double>();
    return Context(std::move(c));
  });
}

}  // namespace kvshrink
