// KVzip's score pass: the fold kernel (press/math/kvzip_fold.h) against a scalar reference, every
// dispatch path, odd sizes; and the whole repeat-pass scores (kvzip_pair_scores) against a
// brute-force max over the explicitly materialised subsampled attention, with several query heads
// per KV group, sinks, F32 and F16 KV, one chunk (normalised by the forward's log-sum-exp) and
// several (each row's own softmax).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "core/fp16.h"
#include "fake_probe.h"
#include "kvzip_brute_force.h"
#include "kernels/cpu_features.h"
#include "press/math/kvzip_fold.h"
#include "press/methods/kvzip.h"
#include "press_test_util.h"

namespace kvs {
namespace {

using FoldFn = void (*)(const float*, int64_t, int, int64_t, const float*, const float*, float*);

// best[j] = max(best[j], max_i S[i][j] * mul[i] - sub[i]), the plain loop.
void fold_ref(const std::vector<float>& S, int64_t lds, int nrows, int64_t n, const std::vector<float>& mul,
              const std::vector<float>& sub, std::vector<float>& best) {
  for (int64_t j = 0; j < n; ++j)
    for (int i = 0; i < nrows; ++i) {
      const float x = S[static_cast<size_t>(i * lds + j)] * mul[static_cast<size_t>(i)] - sub[static_cast<size_t>(i)];
      if (best[static_cast<size_t>(j)] < x) best[static_cast<size_t>(j)] = x;
    }
}

TEST(KvzipFold, EveryPathEqualsTheScalarLoopForBothUses) {
  std::vector<std::pair<const char*, FoldFn>> paths = {{"dispatched", kvzip_fold_max},
                                                       {"generic", kvzip_fold_max_generic}};
  if (kernels::cpu_features().avx2 && kernels::cpu_features().fma) paths.push_back({"avx2", kvzip_fold_max_avx2});
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (const auto& [name, fn] : paths)
    for (int nrows : {1, 3, 64})
      for (int64_t n : {1, 7, 8, 9, 31, 32, 33, 70, 2047})
        for (int use : {0, 1}) {  // 0: probabilities (mul = 1/sum, sub = 0); 1: log (mul = 1, sub = lse)
          SCOPED_TRACE(testing::Message() << name << " rows " << nrows << " n " << n << " use " << use);
          const int64_t lds = n + 5;  // the fold reads a column range of a wider tile
          std::vector<float> S(static_cast<size_t>(nrows * lds)), mul(static_cast<size_t>(nrows)),
              sub(static_cast<size_t>(nrows));
          for (auto& x : S) x = use ? nd(rng) : std::exp(nd(rng) - 9.0f);
          for (int i = 0; i < nrows; ++i) {
            mul[static_cast<size_t>(i)] = use ? 1.0f : 1.0f / (1.0f + std::abs(nd(rng)));
            sub[static_cast<size_t>(i)] = use ? nd(rng) + 4.0f : 0.0f;
          }
          if (!use) S[static_cast<size_t>(n / 2)] = 0.0f;  // a masked key (exp(-inf) = 0)
          const float init = use ? -std::numeric_limits<float>::infinity() : 0.0f;
          std::vector<float> want(static_cast<size_t>(n), init), got = want;
          if (n > 2) got[1] = want[1] = 1e9f;  // an earlier tile's larger maximum is kept
          fold_ref(S, lds, nrows, n, mul, sub, want);
          fn(S.data(), lds, nrows, n, mul.data(), sub.data(), got.data());
          for (int64_t j = 0; j < n; ++j) ASSERT_EQ(got[static_cast<size_t>(j)], want[static_cast<size_t>(j)]) << "key " << j;
        }
}

// A cache of n tokens, H query heads in groups of H / Hkv, keys and queries from hashes; KV in
// `dt` (F16 keys are rounded by the cache: the brute force reads them back from it, and the
// repeat keys are made F16-exact).
struct GroupCase {
  static constexpr int D = 16, H = 6, Hkv = 2, n = 150, n_layer = 2;
  test::Synth s;
  test::FakeProbe probe;
  static float h01(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return static_cast<float>(x % 10000) / 10000.0f - 0.5f;
  }
  static float key(int layer, int h, int32_t tok, int d) {
    return fp16_to_fp32(fp32_to_fp16(2.0f * h01(static_cast<uint32_t>(layer * 7919 + h * 131 + tok * 17 + d))));
  }
  explicit GroupCase(DType dt)
      : s(test::Synth::make(n_layer, H, Hkv, D, n, [](int layer, int h, int pos, int d) { return key(layer, h, 1000 + pos, d); })),
        probe(n_layer, s.shape, *s.threads) {
    if (dt != DType::F32) {  // the same keys in a cache of `dt`
      s.layout.dtype = dt;
      s.cache.reset();  // its pages go back to the old pool first
      s.pool = std::make_unique<PagePool>(s.layout.page_bytes());
      s.cache = std::make_unique<KvCache>(*s.pool, s.layout);
      std::vector<float> k(static_cast<size_t>(n) * Hkv * D), v(k.size(), 0.0f);
      std::vector<int32_t> pos(static_cast<size_t>(n));
      for (int layer = 0; layer < n_layer; ++layer) {
        for (int t = 0; t < n; ++t) {
          pos[static_cast<size_t>(t)] = t;
          for (int h = 0; h < Hkv; ++h)
            for (int d = 0; d < D; ++d) k[(static_cast<size_t>(t) * Hkv + h) * D + d] = key(layer, h, 1000 + t, d);
        }
        s.cache->append(layer, n, k.data(), v.data(), pos.data());
      }
    }
    for (int i = 0; i < n; ++i) probe.ctx.push_back(1000 + i);
    probe.key_of = [](int layer, int32_t tok, float* k) {
      for (int h = 0; h < Hkv; ++h)
        for (int d = 0; d < D; ++d) k[h * D + d] = key(layer, h, tok, d);
    };
    probe.query_of = [](int layer, int32_t tok, float* q) {
      for (int h = 0; h < H; ++h)
        for (int d = 0; d < D; ++d) q[h * D + d] = 6.0f * h01(static_cast<uint32_t>(layer * 31 + tok * 7 + h * 3 + d * 101));
    };
  }
};

TEST(KvzipFold, PairScoresEqualTheBruteForceWithGroupsSinksAndF16OrF32Kv) {
  for (DType dt : {DType::F32, DType::F16})
    for (int chunk : {2048, 61}) {  // one chunk (the forward's log-sum-exp), three chunks (own softmax)
      SCOPED_TRACE(testing::Message() << (dt == DType::F16 ? "f16" : "f32") << " chunk " << chunk);
      GroupCase c(dt);
      CompressRequest r;
      r.sinks = 3;
      const PressEnv env{*c.s.cache, c.s.shape, nullptr, *c.s.threads, r, &c.probe, nullptr};
      KvzipOptions o;
      o.chunk = chunk;
      const Scores sc = kvzip_pair_scores(env, o);
      EXPECT_EQ(c.probe.forwards, chunk == 2048 ? 1 : 3);
      for (int layer = 0; layer < GroupCase::n_layer; ++layer) {
        const auto want = test::kvzip_brute_force(c, layer, chunk, 3);
        for (int h = 0; h < GroupCase::Hkv; ++h) {
          const auto& got = sc.at(c.s.layout, layer, h);
          for (int s = 0; s < GroupCase::n; ++s) {
            if (s < 3) {
              EXPECT_TRUE(std::isinf(got[static_cast<size_t>(s)])) << "sink " << s;
              continue;
            }
            EXPECT_NEAR(got[static_cast<size_t>(s)], want[static_cast<size_t>(h)][static_cast<size_t>(s)],
                        1e-6 + 1e-4 * want[static_cast<size_t>(h)][static_cast<size_t>(s)])
                << "layer " << layer << " head " << h << " slot " << s;
          }
        }
      }
    }
}

}  // namespace
}  // namespace kvs
