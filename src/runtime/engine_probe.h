// The runtime's implementation of the model probe a press may use (press/model_probe.h): query
// projection and RoPE tables through the engine's own forward code, probe forwards on
// copy-on-write forks, the context's tokens and per-token NLL, the tokenizer.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <span>

#include "press/model_probe.h"
#include "runtime/engine.h"

namespace kvs {

class EngineProbe : public ModelProbe {
 public:
  // context: the tokens the cache was prefilled with (may be empty); nll: their per-token NLL
  // ([n - 1], may be empty). Both must outlive the probe.
  EngineProbe(Engine& engine, std::span<const int32_t> context = {}, std::span<const float> nll = {});
  ~EngineProbe() override;

  ProbeDims dims() const override;
  void project_queries(int layer, const float* hidden, int n, const float* rope_cs, bool rope_shared,
                       float* out) override;
  void project_attn_input_queries(int layer, const float* attn_in, int n, const float* rope_cs, bool rope_shared,
                                  float* out) override;
  std::vector<float> rope_table(int layer, std::span<const int32_t> pos) const override;
  std::vector<float> rope_table_mean(int layer, int32_t first, int32_t count) const override;
  void probe_forward(const KvCache& cache, std::span<const int32_t> tokens, LayerObserver& observer,
                     bool bf16_attention = false) override;
  void probe_forward_continue(const KvCache& cache, std::span<const int32_t> tokens, LayerObserver& observer) override;
  void end_probe_session() override;
  std::span<const int32_t> context_tokens() const override { return context_; }
  std::span<const float> context_nll() const override { return nll_; }
  std::vector<int32_t> encode(const std::string& text, bool chat) const override;
  bool has_chat_template() const override;
  const nlohmann::json* calibration(const std::string& press) override;

 private:
  Engine& engine_;
  std::span<const int32_t> context_;
  std::span<const float> nll_;
  std::map<std::string, std::optional<nlohmann::json>> calib_;  // loaded per press
  std::unique_ptr<KvCache> session_;       // the fork of probe_forward_continue
  const KvCache* session_base_ = nullptr;  // the cache it was forked from
};

}  // namespace kvs
