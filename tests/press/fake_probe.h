// A model probe without a model, for press tests: a probe forward appends each token's key (a
// function of the token and layer) to a fork of the cache and shows the observer queries (another
// function), with the log-sum-exp computed by the cache's own attention; calibration data and the
// context's NLL are whatever the test puts in.
#pragma once
#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <numeric>

#include "core/error.h"
#include "press/model_probe.h"
#include "press/press.h"

namespace kvs::test {

struct FakeProbe : ModelProbe {
  ProbeDims d;
  AttnShape shape;
  ThreadPool* pool = nullptr;
  std::vector<int32_t> ctx;
  std::vector<float> nll;
  std::map<std::string, nlohmann::json> calib;
  // Key of token `tok` at `layer`: [n_head_kv][head_dim]; query: [n_head][head_dim].
  std::function<void(int layer, int32_t tok, float* k)> key_of;
  std::function<void(int layer, int32_t tok, float* q)> query_of;
  int forwards = 0;  // probe forwards run
  std::vector<size_t> fork_slots;  // slots the fork held at each layer view (memory checks)

  FakeProbe(int n_layer, const AttnShape& s, ThreadPool& p) : shape(s), pool(&p) {
    d = {n_layer, 0, s.n_head, s.n_head_kv, s.head_dim, s.head_dim};
  }
  ProbeDims dims() const override { return d; }
  void project_queries(int, const float*, int, const float*, bool, float*) override { fail("fake probe: no queries"); }
  void project_attn_input_queries(int, const float*, int, const float*, bool, float*) override {
    fail("fake probe: no queries");
  }
  std::vector<float> rope_table(int, std::span<const int32_t>) const override { return {}; }
  std::vector<float> rope_table_mean(int, int32_t, int32_t) const override { return {}; }

  void probe_forward(const KvCache& cache, std::span<const int32_t> tokens, LayerObserver& obs,
                     bool = false) override {  // (its attention is the plain f32 one)
    auto fork = cache.fork();
    run(*fork, tokens, obs);
  }
  void probe_forward_continue(const KvCache& cache, std::span<const int32_t> tokens, LayerObserver& obs) override {
    probe_forward(cache, tokens, obs);
  }
  void end_probe_session() override {}
  std::span<const int32_t> context_tokens() const override { return ctx; }
  std::span<const float> context_nll() const override { return nll; }
  // One token per byte (id = byte + 1): continuation ids of "a" + text start with those of "a".
  std::vector<int32_t> encode(const std::string& text, bool) const override {
    std::vector<int32_t> v;
    for (unsigned char ch : text) v.push_back(static_cast<int32_t>(ch) + 1);
    return v;
  }
  bool has_chat_template() const override { return false; }
  const nlohmann::json* calibration(const std::string& press) override {
    const auto it = calib.find(press);
    return it == calib.end() ? nullptr : &it->second;
  }

  void run(KvCache& c, std::span<const int32_t> tokens, LayerObserver& obs) {
    ++forwards;
    const int T = static_cast<int>(tokens.size()), H = shape.n_head, Hkv = shape.n_head_kv, D = shape.head_dim;
    std::vector<int32_t> pos(static_cast<size_t>(T));
    std::iota(pos.begin(), pos.end(), c.n_past());
    for (int layer = 0; layer < d.n_layer; ++layer) {
      std::vector<float> k(static_cast<size_t>(T) * Hkv * D), v(k.size(), 0.0f), q(static_cast<size_t>(T) * H * D);
      for (int t = 0; t < T; ++t) {
        key_of(layer, tokens[t], k.data() + static_cast<size_t>(t) * Hkv * D);
        query_of(layer, tokens[t], q.data() + static_cast<size_t>(t) * H * D);
      }
      if (!c.append(layer, T, k.data(), v.data(), pos.data())) fail("fake probe: pool full");
      std::vector<float> out(q.size()), lse(static_cast<size_t>(T) * H);
      AttnScratch scr;
      attention(c, layer, shape, q.data(), pos.data(), T, out.data(), lse.data(), *pool, scr);
      LayerView view;
      view.layer = layer;
      view.n_tok = T;
      view.pos = pos.data();
      view.shape = &shape;
      view.q = q.data();
      view.lse = lse.data();
      view.cache = &c;
      fork_slots.push_back(c.total_slots());
      obs.on_layer(view);
    }
  }
};

}  // namespace kvs::test
