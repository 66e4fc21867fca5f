// Which context positions every (layer, KV head) of a compressed cache kept: the data behind
// `kvshrink inspect` (the HTML page and the PNG heatmap). Built from a KvCache (a loaded .kvc or
// a live compressed context); positions >= n_tokens (a question, generated tokens) are ignored.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvs {
class KvCache;
}

namespace kvs::inspect {

struct KeptMap {
  int n_layer = 0, n_head_kv = 0;
  int32_t n_tokens = 0;
  std::vector<uint8_t> kept;  // [n_layer][n_head_kv][n_tokens], 1 = that head holds that position

  KeptMap() = default;
  KeptMap(int n_layer, int n_head_kv, int32_t n_tokens);
  // Per head, the positions it holds (ascending or not, each < n_tokens or ignored).
  static KeptMap from_cache(const KvCache& cache, int32_t n_tokens);

  bool at(int layer, int kvh, int32_t tok) const { return kept[index(layer, kvh, tok)] != 0; }
  void set(int layer, int kvh, int32_t tok, bool v = true) { kept[index(layer, kvh, tok)] = v ? 1 : 0; }

  // Fraction of all (layer, KV head) pairs that kept each token: [n_tokens].
  std::vector<double> token_fraction() const;
  // Fraction of `layer`'s KV heads that kept each token: [n_tokens].
  std::vector<double> layer_token_fraction(int layer) const;
  // Fraction of the context each (layer, KV head) kept: [n_layer][n_head_kv].
  std::vector<double> head_keep_ratio() const;
  // Fraction of the context each layer kept (mean over its heads): [n_layer].
  std::vector<double> layer_keep_ratio() const;
  // Fraction of all (layer, head, token) slots kept.
  double keep_ratio() const;

 private:
  size_t index(int layer, int kvh, int32_t tok) const {
    return (static_cast<size_t>(layer) * n_head_kv + kvh) * static_cast<size_t>(n_tokens) + tok;
  }
};

}  // namespace kvs::inspect
