// The worked example of docs/adding-a-press.md: a press that uses the model probe. Compiled and
// tested (tests/runtime/example_probe_press_test.cpp), so the document cannot rot.
//
// "Mean query" scorer: every key is scored by the attention it would receive from a typical
// future query of its layer — the mean of the layer's attention inputs (attn_norm of the hidden
// states) seen during prefill, projected through W_q (+ bias) and RoPE averaged over the next 16
// positions (a simplified form of the expected-attention idea; GVote samples such queries).
#pragma once
#include <cmath>
#include <vector>

#include "kernels/ops.h"
#include "press/model_probe.h"
#include "press/press.h"
#include "press/scorers/scorers.h"

namespace kvs::example {

class MeanQueryScorer : public Scorer {
 public:
  std::string name() const override { return "mean_query"; }
  // The attention-input moments come from the prefill's statistics; the projection from the probe.
  Needs needs() const override { return {.stats = {.attn_input_moments = true}, .probe = true}; }

  Scores score(const PressEnv& env) const override {
    const ProbeDims d = env.probe->dims();
    const KvCache& c = env.cache;
    const int group = d.n_head / d.n_head_kv;
    Scores sc = make_scores(c);
    std::vector<float> q(static_cast<size_t>(d.n_head) * d.head_dim);      // [n_head][head_dim]
    std::vector<float> k(static_cast<size_t>(d.head_dim));                 // [head_dim]
    for (int layer = 0; layer < d.n_layer; ++layer) {
      // One (cos, sin) row: the layer's RoPE averaged over the positions the next 16 tokens will take.
      const std::vector<float> rope = env.probe->rope_table_mean(layer, c.n_past(), 16);
      const std::vector<float> mean = env.stats->attn_input_stats(layer).mean();  // [n_embd]
      env.probe->project_attn_input_queries(layer, mean.data(), 1, rope.data(), /*rope_shared=*/true, q.data());
      for (int kvh = 0; kvh < d.n_head_kv; ++kvh) {
        std::vector<float>& out = sc.at(c.layout(), layer, kvh);
        // Attention of each query head of the group over the head's slots, summed over the group.
        for (int g = 0; g < group; ++g) {
          const float* qh = q.data() + static_cast<size_t>(kvh * group + g) * d.head_dim;
          std::vector<float> logit(out.size());
          for (size_t s = 0; s < out.size(); ++s) {
            c.read_k(layer, kvh, static_cast<int32_t>(s), k.data());
            logit[s] = env.shape.scale * kernels::dot_f32(qh, k.data(), d.head_dim);
          }
          float mx = -INFINITY;
          for (float x : logit) mx = std::max(mx, x);
          double z = 0;
          for (float x : logit) z += std::exp(static_cast<double>(x - mx));
          for (size_t s = 0; s < out.size(); ++s) out[s] += static_cast<float>(std::exp(static_cast<double>(logit[s] - mx)) / z);
        }
      }
    }
    return sc;
  }
};

}  // namespace kvs::example
