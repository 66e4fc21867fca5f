#include "press/math/chunk_attention.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/ops.h"

namespace kvs::math {

std::vector<float> chunk_attention_scores(std::span<const float> q, std::span<const float> k, int64_t n,
                                          int n_head, int n_head_kv, int head_dim,
                                          const ChunkAttentionOptions& opt) {
  if (n < 0) fail("chunk_attention_scores: n = {} tokens is negative", n);
  if (n_head < 1 || n_head_kv < 1 || n_head % n_head_kv != 0)
    fail("chunk_attention_scores: {} query heads for {} KV heads (expected a positive multiple)", n_head, n_head_kv);
  if (head_dim < 1) fail("chunk_attention_scores: head_dim {} (expected >= 1)", head_dim);
  if (opt.chunk < 1) fail("chunk_attention_scores: chunk size {} (expected >= 1)", opt.chunk);
  const size_t D = static_cast<size_t>(head_dim);
  if (q.size() != static_cast<size_t>(n) * n_head * D)
    fail("chunk_attention_scores: queries hold {} floats, expected n * n_head * head_dim = {}", q.size(),
         static_cast<size_t>(n) * n_head * D);
  if (k.size() != static_cast<size_t>(n) * n_head_kv * D)
    fail("chunk_attention_scores: keys hold {} floats, expected n * n_head_kv * head_dim = {}", k.size(),
         static_cast<size_t>(n) * n_head_kv * D);

  const int G = n_head / n_head_kv;
  const int C = static_cast<int>(std::min<int64_t>(opt.chunk, std::max<int64_t>(n, 1)));
  std::vector<float> out(static_cast<size_t>(n_head_kv) * n, 0.0f);
  std::vector<float> kbuf(static_cast<size_t>(C) * D);                 // [C][D] one KV head's chunk keys
  std::vector<float> logits(static_cast<size_t>(C) * C);               // [C][C] one query head's chunk
  std::vector<float> acc(static_cast<size_t>(C));                      // [C] column sums of the chunk
  const float inv_g = 1.0f / static_cast<float>(G);
  const int lda = n_head * head_dim;  // a query head's rows are n_head * head_dim apart
  for (int kvh = 0; kvh < n_head_kv; ++kvh) {
    float* o = out.data() + static_cast<size_t>(kvh) * n;
    for (int64_t c0 = 0; c0 < n; c0 += C) {
      const int m = static_cast<int>(std::min<int64_t>(C, n - c0));
      for (int j = 0; j < m; ++j)
        std::copy_n(k.data() + (static_cast<size_t>(c0 + j) * n_head_kv + kvh) * D, D, kbuf.data() + j * D);
      std::fill(acc.begin(), acc.begin() + m, 0.0f);
      for (int g = 0; g < G; ++g) {
        const float* qh = q.data() + (static_cast<size_t>(c0) * n_head + static_cast<size_t>(kvh) * G + g) * D;
        // logits[i][j] = scale * q_i . k_j over the chunk (no mask: non-causal)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, m, head_dim, opt.scale, qh, lda, kbuf.data(),
                    head_dim, 0.0f, logits.data(), m);
        for (int i = 0; i < m; ++i) {
          float* row = logits.data() + static_cast<size_t>(i) * m;
          kernels::softmax(row, m);
          kernels::add_f32(acc.data(), row, m);
        }
      }
      for (int j = 0; j < m; ++j) o[c0 + j] = acc[j] * inv_g;
    }
  }
  return out;
}

void zscore(std::span<float> x) {
  if (x.empty()) return;
  double s = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) fail("zscore: entry {} is {} (expected finite scores)", i, x[i]);
    s += x[i];
  }
  const double mean = s / static_cast<double>(x.size());
  double v = 0.0;
  for (float xi : x) v += (xi - mean) * (xi - mean);
  const double sd = std::sqrt(v / static_cast<double>(x.size()));
  if (!(sd > 0.0)) {
    std::fill(x.begin(), x.end(), 0.0f);
    return;
  }
  const double inv = 1.0 / sd;
  for (float& xi : x) xi = static_cast<float>((xi - mean) * inv);
}

std::vector<float> blend_scores(std::span<const float> a, std::span<const float> o, double lambda) {
  if (a.size() != o.size()) fail("blend_scores: attention scores ({}) and outlier scores ({}) differ in length", a.size(), o.size());
  if (!std::isfinite(lambda)) fail("blend_scores: lambda {} is not finite", lambda);
  std::vector<float> za(a.begin(), a.end()), zo(o.begin(), o.end());
  zscore(za);
  zscore(zo);
  for (size_t i = 0; i < za.size(); ++i) za[i] = static_cast<float>(za[i] + lambda * zo[i]);
  return za;
}

}  // namespace kvs::math
