#include "kvcache/attention_probs.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/error.h"
#include "kernels/vexp.h"

namespace kvs {
namespace {
constexpr int kBq = 64;
constexpr int kBk = 512;
}  // namespace

void for_each_prob_tile(const KvCache& c, int layer, const AttnShape& s, const float* q, const int32_t* qpos,
                        const float* lse, int n_tok, int t_begin, ThreadPool& pool, const ProbSink& sink) {
  if (t_begin >= n_tok) return;
  const int H = s.n_head, Hkv = s.n_head_kv, D = s.head_dim, G = H / Hkv;
  std::vector<float> own_lse;
  if (lse == nullptr) {
    own_lse.resize(static_cast<size_t>(n_tok) * H);
    std::vector<float> out(static_cast<size_t>(n_tok) * H * D);
    AttnScratch scr;
    attention(c, layer, s, q, qpos, n_tok, out.data(), own_lse.data(), pool, scr);
    lse = own_lse.data();
  }
  // Every KV head's visible keys gathered to f32 once: [Hkv][Lmax][D].
  std::vector<int32_t> L(static_cast<size_t>(Hkv));
  int32_t Lmax = 0;
  for (int kvh = 0; kvh < Hkv; ++kvh) {
    const HeadCache& h = c.head(layer, kvh);
    L[kvh] = static_cast<int32_t>(std::upper_bound(h.pos.begin(), h.pos.end(), qpos[n_tok - 1]) - h.pos.begin());
    Lmax = std::max(Lmax, L[kvh]);
  }
  if (Lmax == 0) return;
  AlignedBuffer<float> K(static_cast<size_t>(Hkv) * Lmax * D);
  pool.parallel_for(Hkv, [&](int64_t b, int64_t e) {
    for (int64_t kvh = b; kvh < e; ++kvh)
      c.gather(layer, static_cast<int>(kvh), 0, L[kvh], K.data() + static_cast<size_t>(kvh) * Lmax * D, nullptr);
  });
  const int32_t window = s.window(layer);
  struct Task {
    int kvh, qh, t0;
  };
  std::vector<Task> tasks;
  for (int kvh = 0; kvh < Hkv; ++kvh)
    for (int g = 0; g < G; ++g)
      for (int t0 = t_begin; t0 < n_tok; t0 += kBq) tasks.push_back({kvh, kvh * G + g, t0});
  pool.run([&](int ith, int nth) {
    AlignedBuffer<float> Q(static_cast<size_t>(kBq) * D), S(static_cast<size_t>(kBq) * kBk);
    for (size_t ti = static_cast<size_t>(ith); ti < tasks.size(); ti += static_cast<size_t>(nth)) {
      const Task& tk = tasks[ti];
      const HeadCache& h = c.head(layer, tk.kvh);
      const float* Kh = K.data() + static_cast<size_t>(tk.kvh) * Lmax * D;
      const int t0 = tk.t0, nt = std::min(kBq, n_tok - t0), qh = tk.qh;
      for (int i = 0; i < nt; ++i) {
        const float* src = q + (static_cast<size_t>(t0 + i) * H + qh) * D;
        for (int d = 0; d < D; ++d) Q[static_cast<size_t>(i) * D + d] = src[d] * s.scale;
      }
      const int32_t kend = static_cast<int32_t>(
          std::upper_bound(h.pos.begin(), h.pos.begin() + L[tk.kvh], qpos[t0 + nt - 1]) - h.pos.begin());
      for (int32_t k0 = 0; k0 < kend; k0 += kBk) {
        const int32_t nk = std::min<int32_t>(kBk, kend - k0);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nt, nk, D, 1.0f, Q.data(), D,
                    Kh + static_cast<size_t>(k0) * D, D, 0.0f, S.data(), kBk);
        for (int i = 0; i < nt; ++i) {
          float* row = S.data() + static_cast<size_t>(i) * kBk;
          const float l = lse[static_cast<size_t>(t0 + i) * H + qh];
          const int32_t qp = qpos[t0 + i];
          if (!std::isfinite(l)) {
            std::fill(row, row + nk, 0.0f);
            continue;
          }
          if (s.softcap > 0)
            for (int32_t j = 0; j < nk; ++j) row[j] = s.logit(row[j]);
          for (int32_t j = nk - 1; j >= 0 && h.pos[static_cast<size_t>(k0 + j)] > qp; --j)
            row[j] = -std::numeric_limits<float>::infinity();
          if (window > 0)  // sliding-window layer: keys at or before qp - window are not visible
            for (int32_t j = 0; j < nk && h.pos[static_cast<size_t>(k0 + j)] <= qp - window; ++j)
              row[j] = -std::numeric_limits<float>::infinity();
          kernels::exp_sub_sum(row, nk, l);
        }
        sink(ProbTile{ith, tk.kvh, qh, t0, nt, k0, nk, S.data(), kBk});
      }
    }
  });
}

}  // namespace kvs
