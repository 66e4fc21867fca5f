#include "runtime/engine_probe.h"

#include "core/error.h"
#include "runtime/calibration_store.h"
#include "runtime/chat_parts.h"

namespace kvs {

EngineProbe::EngineProbe(Engine& engine, std::span<const int32_t> context, std::span<const float> nll)
    : engine_(engine), context_(context), nll_(nll) {}

EngineProbe::~EngineProbe() = default;

ProbeDims EngineProbe::dims() const {
  const HParams& hp = engine_.hp();
  return {hp.n_layer, hp.n_embd, hp.n_head, hp.n_head_kv, hp.head_dim, hp.rope_dim, hp.n_ctx_train};
}

void EngineProbe::project_queries(int layer, const float* hidden, int n, const float* rope_cs, bool rope_shared,
                                  float* out) {
  if (layer < 0 || layer >= engine_.hp().n_layer) fail("probe: layer {} out of range", layer);
  engine_.project_queries(layer, hidden, n, rope_cs, rope_shared, out);
}

void EngineProbe::project_attn_input_queries(int layer, const float* attn_in, int n, const float* rope_cs,
                                             bool rope_shared, float* out) {
  if (layer < 0 || layer >= engine_.hp().n_layer) fail("probe: layer {} out of range", layer);
  engine_.project_attn_input_queries(layer, attn_in, n, rope_cs, rope_shared, out);
}

std::vector<float> EngineProbe::rope_table(int layer, std::span<const int32_t> pos) const {
  if (layer < 0 || layer >= engine_.hp().n_layer) fail("probe: layer {} out of range", layer);
  std::vector<float> t(pos.size() * static_cast<size_t>(engine_.hp().rope_dim));
  arch::rope_table(engine_.model(), layer, pos.data(), static_cast<int>(pos.size()), t.data());
  return t;
}

std::vector<float> EngineProbe::rope_table_mean(int layer, int32_t first, int32_t count) const {
  if (layer < 0 || layer >= engine_.hp().n_layer) fail("probe: layer {} out of range", layer);
  if (count < 1) fail("probe: averaging RoPE over {} positions", count);
  std::vector<float> t(static_cast<size_t>(engine_.hp().rope_dim));
  arch::rope_table_mean(engine_.model(), layer, first, count, t.data());
  return t;
}

void EngineProbe::probe_forward(const KvCache& cache, std::span<const int32_t> tokens, LayerObserver& observer,
                                bool bf16_attention) {
  std::unique_ptr<KvCache> fork = cache.fork();
  ForwardHooks hooks;
  hooks.observer = &observer;
  hooks.bf16_attention = bf16_attention;
  engine_.forward(*fork, tokens, Logits::None, hooks);
}  // the fork's pages are released here

void EngineProbe::probe_forward_continue(const KvCache& cache, std::span<const int32_t> tokens,
                                         LayerObserver& observer) {
  if (!session_ || session_base_ != &cache) {
    session_ = cache.fork();
    session_base_ = &cache;
  }
  engine_.forward(*session_, tokens, Logits::None, &observer);
}

void EngineProbe::end_probe_session() {
  session_.reset();
  session_base_ = nullptr;
}

std::vector<int32_t> EngineProbe::encode(const std::string& text, bool chat) const {
  const Tokenizer& tok = *engine_.model().tokenizer;
  if (!chat || !has_chat_template()) return tok.encode(text, false, false);
  const ChatParts p = split_chat_template(tok);
  return tok.encode(p.head + text + p.tail, false, true);
}

const nlohmann::json* EngineProbe::calibration(const std::string& press) {
  auto it = calib_.find(press);
  if (it == calib_.end()) it = calib_.emplace(press, load_calibration(engine_.model(), press)).first;
  return it->second ? &*it->second : nullptr;
}

bool EngineProbe::has_chat_template() const { return engine_.model().tokenizer->chat_format() != ChatFormat::None; }

}  // namespace kvs
