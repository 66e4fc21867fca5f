#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "core/fp16.h"
#include "queries_as_scored.h"
#include "kvcache/attention.h"

namespace kvs {
namespace {

struct Setup {
  KvLayout l;
  std::unique_ptr<PagePool> pool;
  std::unique_ptr<KvCache> cache;
  AttnShape s;
};

// A cache with n_ctx random tokens, then per-head random eviction so heads differ in length.
Setup make(DType dt, int n_ctx, bool evict, uint64_t seed, int H = 6, int Hkv = 2, int D = 16) {
  Setup st;
  st.l.n_layer = 1;
  st.l.n_head_kv = Hkv;
  st.l.head_dim = D;
  st.l.dtype = dt;
  st.l.page_tokens = 8;
  st.pool = std::make_unique<PagePool>(st.l.page_bytes());
  st.cache = std::make_unique<KvCache>(*st.pool, st.l);
  st.s = {H, Hkv, D, 1.0f / std::sqrt(static_cast<float>(D))};
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> k(static_cast<size_t>(n_ctx) * Hkv * D), v(k.size());
  for (auto& x : k) x = 2.0f * nd(rng);
  for (auto& x : v) x = nd(rng);
  std::vector<int32_t> pos(static_cast<size_t>(n_ctx));
  for (int i = 0; i < n_ctx; ++i) pos[i] = i;
  if (n_ctx > 0) {
    EXPECT_TRUE(st.cache->append(0, n_ctx, k.data(), v.data(), pos.data()));
  }
  if (evict) {
    CacheEdit e(st.l);
    for (int h = 0; h < Hkv; ++h) {
      auto& he = e.at(st.l, 0, h);
      he.active = true;
      for (int i = 0; i < n_ctx; ++i)
        if (rng() % (h + 2) == 0) he.keep.push_back(i);
    }
    EXPECT_TRUE(st.cache->apply(e));
  }
  return st;
}

// Appends n_tok random tokens and makes their queries. With k_new / v_new, the tokens' slots are
// only reserved (KvCache::append_slots) and their rows handed back [n_tok][Hkv][D], for an
// AttnJob that writes them.
void append_queries(Setup& st, int n_tok, std::vector<float>& q, std::vector<int32_t>& qpos, uint64_t seed,
                    std::vector<float>* k_new = nullptr, std::vector<float>* v_new = nullptr) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int H = st.s.n_head, Hkv = st.s.n_head_kv, D = st.s.head_dim;
  q.resize(static_cast<size_t>(n_tok) * H * D);
  for (auto& x : q) x = nd(rng);
  std::vector<float> k(static_cast<size_t>(n_tok) * Hkv * D), v(k.size());
  for (auto& x : k) x = nd(rng);
  for (auto& x : v) x = nd(rng);
  qpos.resize(static_cast<size_t>(n_tok));
  for (int i = 0; i < n_tok; ++i) qpos[i] = st.cache->n_past() + i;
  if (k_new) {
    ASSERT_TRUE(st.cache->append_slots(0, n_tok, qpos.data()));
    *k_new = k;
    *v_new = v;
    return;
  }
  ASSERT_TRUE(st.cache->append(0, n_tok, k.data(), v.data(), qpos.data()));
}

void check(DType dt, int n_ctx, int n_tok, bool evict, int threads, int H = 6, int Hkv = 2, int D = 16) {
  Setup st = make(dt, n_ctx, evict, 1000 + n_ctx * 7 + n_tok, H, Hkv, D);
  std::vector<float> q;
  std::vector<int32_t> qpos;
  append_queries(st, n_tok, q, qpos, 77 + n_tok);
  const size_t n_out = q.size();
  std::vector<float> out(n_out), ref(n_out), lse(static_cast<size_t>(n_tok) * st.s.n_head), lse_ref(lse.size());
  ThreadPool pool(threads);
  AttnScratch scr;
  attention(*st.cache, 0, st.s, q.data(), qpos.data(), n_tok, out.data(), lse.data(), pool, scr);
  attention_ref(*st.cache, 0, st.s, q.data(), qpos.data(), n_tok, ref.data(), lse_ref.data());
  for (size_t i = 0; i < n_out; ++i) ASSERT_NEAR(out[i], ref[i], 2e-5f) << "i=" << i << " n_ctx=" << n_ctx << " n_tok=" << n_tok;
  for (size_t i = 0; i < lse.size(); ++i) ASSERT_NEAR(lse[i], lse_ref[i], 2e-5f * std::max(1.0f, std::fabs(lse_ref[i])));
}

// Brute force written here from the definition (not attention_ref): for query t and head qh,
// o = sum_j p_j v_j with p = softmax over the slots j of KV head qh / G that the query sees
// (pos_j <= qpos_t and pos_j > qpos_t - window when window > 0) of cap * tanh(scale q.k_j / cap)
// (scale q.k_j when cap is 0). Double accumulation.
// bf16: the definition of BF16 products (AttnShape::bf16_products) instead — logits from
// bf16(q * scale) . bf16(k), probabilities exp(logit - max) whose unrounded sum normalises, the
// product with V from bf16(p) . bf16(v). lse (optional) [T][H]: log of the sum of exp(logit).
float bf(float x) { return bf16_to_fp32(fp32_to_bf16(x)); }

std::vector<double> brute_force(const Setup& st, const std::vector<float>& q, const std::vector<int32_t>& qpos,
                                int32_t window, float cap, bool bf16 = false, std::vector<double>* lse = nullptr) {
  const int H = st.s.n_head, Hkv = st.s.n_head_kv, D = st.s.head_dim, G = H / Hkv;
  const int T = static_cast<int>(qpos.size());
  std::vector<double> out(static_cast<size_t>(T) * H * D, 0.0);
  if (lse) lse->assign(static_cast<size_t>(T) * H, 0.0);
  std::vector<float> k(static_cast<size_t>(D)), v(static_cast<size_t>(D));
  for (int t = 0; t < T; ++t)
    for (int qh = 0; qh < H; ++qh) {
      const HeadCache& h = st.cache->head(0, qh / G);
      std::vector<double> logit;
      std::vector<int32_t> slot;
      for (int32_t j = 0; j < h.len(); ++j) {
        const int32_t kp = h.pos[static_cast<size_t>(j)];
        if (kp > qpos[t] || (window > 0 && qpos[t] - kp >= window)) continue;
        st.cache->read_k(0, qh / G, j, k.data());
        const float* qv = q.data() + (static_cast<size_t>(t) * H + qh) * D;
        double d = 0;
        for (int i = 0; i < D; ++i)
          d += bf16 ? static_cast<double>(bf(qv[i] * st.s.scale)) * bf(k[i]) : static_cast<double>(qv[i]) * k[i];
        if (!bf16) d *= st.s.scale;
        logit.push_back(cap > 0 ? cap * std::tanh(d / cap) : d);
        slot.push_back(j);
      }
      if (logit.empty()) continue;
      const double m = *std::max_element(logit.begin(), logit.end());
      double z = 0;
      for (double& x : logit) z += (x = std::exp(x - m));
      if (lse) (*lse)[static_cast<size_t>(t) * H + qh] = m + std::log(z);
      for (size_t j = 0; j < slot.size(); ++j) {
        st.cache->read_v(0, qh / G, slot[j], v.data());
        const double p = bf16 ? bf(static_cast<float>(logit[j])) : logit[j];
        for (int i = 0; i < D; ++i)
          out[(static_cast<size_t>(t) * H + qh) * D + i] += p / z * (bf16 ? bf(v[i]) : v[i]);
      }
    }
  return out;
}

// Sliding window and soft-capping (Gemma 2's local layers): both paths against the brute force,
// at head_dim 64 with 4 KV heads (GQA 2), on a compressed cache (heads of different lengths, so
// window starts fall at different slots per head) and a plain one.
void check_window(int n_ctx, int n_tok, int32_t window, float cap, bool evict) {
  Setup st = make(DType::F32, n_ctx, evict, 500 + n_ctx + n_tok + window, 8, 4, 64);
  st.s.n_swa = window;
  st.s.swa_period = 0;  // every layer local
  st.s.softcap = cap;
  std::vector<float> q;
  std::vector<int32_t> qpos;
  append_queries(st, n_tok, q, qpos, 91 + n_tok);
  for (auto& x : q) x *= 4.0f;  // logits of several units, so that a cap of 2 bites
  std::vector<float> out(q.size());
  ThreadPool pool(2);
  AttnScratch scr;
  attention(*st.cache, 0, st.s, q.data(), qpos.data(), n_tok, out.data(), nullptr, pool, scr);
  const std::vector<double> ref = brute_force(st, q, qpos, window, cap);
  for (size_t i = 0; i < out.size(); ++i)
    ASSERT_NEAR(out[i], ref[i], 2e-5) << "i=" << i << " n_ctx=" << n_ctx << " n_tok=" << n_tok << " window=" << window;
  // And the brute force differs from plain causal attention (the window and cap do something here).
  if (window > 0 && n_ctx + n_tok > window + 1) {
    const std::vector<double> plain = brute_force(st, q, qpos, 0, cap);
    double diff = 0;
    for (size_t i = 0; i < plain.size(); ++i) diff = std::max(diff, std::fabs(plain[i] - ref[i]));
    EXPECT_GT(diff, 1e-3);
  }
}

}  // namespace

TEST(Attention, SlidingWindowAndSoftcapMatchBruteForce) {
  for (bool evict : {false, true})
    for (int n_tok : {1, 3, 8, 70, 130})    // decode (< 8 queries) and the blocked prefill path
      for (int32_t window : {1, 17, 100, 600})  // 600: longer than some contexts (no effect there)
        check_window(300, n_tok, window, 0.0f, evict);
  for (int n_tok : {1, 70}) check_window(1100, n_tok, 520, 2.0f, false);  // several key blocks, capped
  check_window(0, 100, 30, 2.0f, false);  // the window inside the prefill batch itself
}

TEST(Attention, DecodeMatchesReference) {
  for (int n_ctx : {0, 1, 7, 100, 1500})
    for (int n_tok : {1, 3}) check(DType::F32, n_ctx, n_tok, false, 2);
}

TEST(Attention, PrefillMatchesReference) {
  for (int n_ctx : {0, 5, 300})
    for (int n_tok : {8, 70, 130}) check(DType::F32, n_ctx, n_tok, false, 2);
  check(DType::F32, 1100, 64, false, 3);  // more than one key block
}

// The prefill path stacks the query heads of a GQA group into one matrix per task, in query blocks
// of ~256 / G tokens: group sizes 1 (MHA, 128-token blocks), 4, 7 and 8, head dims 64 and 128,
// several query blocks with the causal diagonal inside, compressed heads of different lengths.
TEST(Attention, PrefillGroupedQueryShapesMatchReference) {
  struct Shape { int H, Hkv, D; };
  for (const Shape sh : {Shape{4, 4, 64}, Shape{16, 4, 64}, Shape{14, 2, 64}, Shape{16, 2, 128}})
    for (bool evict : {false, true}) {
      check(DType::F16, 0, 150, evict, 2, sh.H, sh.Hkv, sh.D);
      check(DType::F16, 600, 150, evict, 2, sh.H, sh.Hkv, sh.D);
    }
}

TEST(Attention, PerHeadCompressedCacheMatchesReference) {
  for (int n_tok : {1, 2, 9, 100}) check(DType::F32, 700, n_tok, true, 2);
}

TEST(Attention, F16CacheMatchesReference) {
  for (int n_tok : {1, 40}) check(DType::F16, 600, n_tok, true, 2);
}

TEST(Attention, SingleThreadMatchesReference) { check(DType::F32, 900, 1, true, 1); }

}  // namespace kvs

namespace kvs {
namespace {

// Several sequences' attention in one attention_batch call (batched decoding): each job against
// the brute force above (written from the definition), and bit for bit against one attention()
// call per job. head_dim 64, 8 query heads on 2 KV heads (GQA 4); the caches differ in length
// (empty, 1 token, several key ranges), compression (heads of different lengths) and page type
// (F32 / F16 / Q8_0 beside each other); decode-sized jobs of 1-3 queries and one prefill-sized job.
// rows_in_jobs: the new tokens' slots only reserved and their rows written by attention_batch
// (AttnJob::writes: the decode tasks whose key range holds them, the prefill job before its
// attention); the outputs and every cache row must then be bit for bit those of the same batch
// over caches appended beforehand.
void check_batch(int threads, int32_t window, bool rows_in_jobs = false) {
  struct Seq {
    DType dt;
    int n_ctx, n_tok;
    bool evict;
  };
  // Key ranges per head (decode_splits): 1500 -> 2 of 750, 700 -> 1, 1100 -> 2, 2100 -> 2 of 1050.
  const std::vector<Seq> seqs = {{DType::F16, 1500, 1, true}, {DType::F32, 0, 1, false}, {DType::Q8_0, 700, 3, true},
                                 {DType::F16, 1, 2, false},   {DType::F16, 300, 40, true}, {DType::F32, 1100, 1, false},
                                 {DType::F16, 2100, 1, false}};
  std::vector<Setup> st, twin;
  std::vector<std::vector<float>> q(seqs.size()), k_new(seqs.size()), v_new(seqs.size());
  std::vector<std::vector<int32_t>> qpos(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    st.push_back(make(seqs[i].dt, seqs[i].n_ctx, seqs[i].evict, 900 + i, 8, 2, 64));
    st.back().s.n_swa = window;
    append_queries(st.back(), seqs[i].n_tok, q[i], qpos[i], 31 + i, rows_in_jobs ? &k_new[i] : nullptr,
                   rows_in_jobs ? &v_new[i] : nullptr);
    if (rows_in_jobs) {
      twin.push_back(make(seqs[i].dt, seqs[i].n_ctx, seqs[i].evict, 900 + i, 8, 2, 64));
      std::vector<float> tq;
      std::vector<int32_t> tpos;
      append_queries(twin.back(), seqs[i].n_tok, tq, tpos, 31 + i);
    }
  }
  const AttnShape& shape = st[0].s;
  std::vector<std::vector<float>> out(seqs.size()), lse(seqs.size());
  std::vector<AttnJob> jobs;
  for (size_t i = 0; i < seqs.size(); ++i) {
    out[i].assign(q[i].size(), -7.0f);
    lse[i].assign(static_cast<size_t>(seqs[i].n_tok) * shape.n_head, -7.0f);
    jobs.push_back({st[i].cache.get(), q[i].data(), qpos[i].data(), seqs[i].n_tok, out[i].data(), lse[i].data()});
    if (rows_in_jobs) {
      jobs.back().writes = st[i].cache.get();
      jobs.back().k_new = k_new[i].data();
      jobs.back().v_new = v_new[i].data();
    }
  }
  ThreadPool pool(threads);
  AttnScratch scr;
  attention_batch(jobs, 0, shape, pool, scr);
  if (rows_in_jobs) {
    std::vector<AttnJob> twin_jobs;
    std::vector<std::vector<float>> twin_out(seqs.size()), twin_lse(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i) {
      twin_out[i].assign(q[i].size(), -7.0f);
      twin_lse[i].assign(lse[i].size(), -7.0f);
      twin_jobs.push_back({twin[i].cache.get(), q[i].data(), qpos[i].data(), seqs[i].n_tok, twin_out[i].data(),
                           twin_lse[i].data()});
    }
    AttnScratch twin_scr;
    attention_batch(twin_jobs, 0, shape, pool, twin_scr);
    for (size_t i = 0; i < seqs.size(); ++i) {
      EXPECT_EQ(out[i], twin_out[i]) << "sequence " << i << " threads=" << threads;
      EXPECT_EQ(lse[i], twin_lse[i]) << "sequence " << i;
      const KvCache &a = *st[i].cache, &b = *twin[i].cache;
      for (int h = 0; h < 2; ++h) {
        ASSERT_EQ(a.head(0, h).pos, b.head(0, h).pos);
        for (int32_t sl = 0; sl < a.len(0, h); ++sl) {
          const size_t n = a.layout().row_bytes();
          ASSERT_EQ(std::memcmp(a.k_row(0, h, sl), b.k_row(0, h, sl), n), 0) << "sequence " << i << " slot " << sl;
          ASSERT_EQ(std::memcmp(a.v_row(0, h, sl), b.v_row(0, h, sl), n), 0) << "sequence " << i << " slot " << sl;
        }
      }
    }
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    // The brute force scores the queries the engine does (Q8_0 decode: int16-rounded), and the
    // engine's int16 P.V weights may add up to pv_i16_bound (queries_as_scored.h).
    const std::vector<float> qs = test::queries_as_scored(*st[i].cache, q[i], seqs[i].n_tok);
    const std::vector<double> ref = brute_force(st[i], qs, qpos[i], window, 0.0f);
    const std::vector<double> pv = test::pv_i16_bound(*st[i].cache, 0, shape, qs, qpos[i].data(), seqs[i].n_tok, window);
    for (size_t x = 0; x < ref.size(); ++x)
      ASSERT_NEAR(out[i][x], ref[x], 2e-5 + pv[x]) << "sequence " << i << " x=" << x << " threads=" << threads;
    std::vector<float> one(q[i].size()), one_lse(lse[i].size());
    AttnScratch scr1;
    attention(*st[i].cache, 0, shape, q[i].data(), qpos[i].data(), seqs[i].n_tok, one.data(), one_lse.data(), pool, scr1);
    EXPECT_EQ(one, out[i]) << "sequence " << i;
    EXPECT_EQ(one_lse, lse[i]) << "sequence " << i;
  }
}

}  // namespace

TEST(Attention, BatchOfSequencesMatchesBruteForceAndSingleCalls) {
  for (int threads : {1, 2, 3}) check_batch(threads, 0);
  check_batch(2, 100);  // a sliding-window layer
}

TEST(Attention, BatchWritesEachJobsNewRowsBeforeReadingThem) {
  for (int threads : {1, 2, 3}) check_batch(threads, 0, true);
  check_batch(2, 100, true);
}

namespace {

// BF16 products (AttnShape::bf16_products, KVzip's repeat pass) against the brute force of their
// definition (brute_force with bf16 = true). Head dims 64 and 128 (whose scale is not a power of
// two), 2 and 4 KV heads, a compressed cache. The prefill path must follow
// the rounded definition (within the online softmax's re-rounding), and differ from f32 attention
// by more than that: evidence the BF16 products ran.
TEST(Attention, Bf16ProductsFollowTheirDefinition) {
  for (int D : {64, 128})
    for (int Hkv : {2, 4}) {
      auto st = make(DType::F32, 1200, true, 4242 + D + Hkv, 3 * Hkv, Hkv, D);
      std::vector<float> q;
      std::vector<int32_t> qpos;
      append_queries(st, 70, q, qpos, 99 + D);
      ThreadPool pool(2);
      AttnScratch scr;
      std::vector<float> out(q.size()), out32(q.size()), lse(static_cast<size_t>(70) * 3 * Hkv);
      attention(*st.cache, 0, st.s, q.data(), qpos.data(), 70, out32.data(), nullptr, pool, scr);
      AttnShape s16 = st.s;
      s16.bf16_products = true;
      attention(*st.cache, 0, s16, q.data(), qpos.data(), 70, out.data(), lse.data(), pool, scr);
      std::vector<double> want_lse;
      const std::vector<double> want = brute_force(st, q, qpos, 0, 0.0f, true, &want_lse);
      // The log-sum-exp (KVzip's scores subtract it from BF16 logits) sums unrounded probabilities.
      for (size_t i = 0; i < lse.size(); ++i) ASSERT_NEAR(lse[i], want_lse[i], 1e-4 * std::max(1.0, std::fabs(want_lse[i]))) << i;
      // A probability near a BF16 rounding boundary may round the other way here than in the
      // brute force (f32 exp vs double, the online softmax's running max): one element off by
      // 2^-8 relative, so single outputs may differ by up to 2^-8 max|v|; on average they must sit
      // on the definition, an order of magnitude closer than to f32 attention.
      double err = 0, dev = 0, worst = 0, vmax = 0;  // mean |out - definition|, mean |out - f32|, worst
      for (size_t i = 0; i < out.size(); ++i) {
        err += std::fabs(out[i] - want[i]) / out.size();
        dev += std::fabs(out[i] - out32[i]) / out.size();
        worst = std::max(worst, std::fabs(out[i] - want[i]));
      }
      for (int h = 0; h < Hkv; ++h) {
        std::vector<float> v(static_cast<size_t>(D));
        for (int32_t j = 0; j < st.cache->head(0, h).len(); ++j) {
          st.cache->read_v(0, h, j, v.data());
          for (float x : v) vmax = std::max(vmax, static_cast<double>(std::fabs(x)));
        }
      }
      EXPECT_LT(worst, 0x1p-8 * vmax) << "D=" << D << " Hkv=" << Hkv;
      EXPECT_GT(dev, 10 * err) << "D=" << D << " Hkv=" << Hkv << ": BF16 output not closer to its definition than to f32";
      EXPECT_LT(dev, 1e-2) << "D=" << D << " Hkv=" << Hkv;
      std::printf("D=%d Hkv=%d: mean |bf16 - definition| %.2e (worst %.2e), mean |bf16 - f32| %.2e\n", D, Hkv, err, worst, dev);
    }
}

}  // namespace

}  // namespace kvs

namespace kvs {
namespace {

// The decode path's softmax runs online across blocks of pages (and is merged across key
// ranges): known answers that a missing or wrong rescale cannot pass. 1,300 slots in pages of
// 32 (several blocks and three key ranges), head_dim 64, 6 query heads on 2 KV heads. Values are
// one-hot, v_j = e_(j mod 64). KV head 0: keys zero except "spikes" 320 e_0, which the queries
// e_0 (scale 1/8) score 40 against 0 elsewhere, so the output is the spikes' values (the others
// weigh e^-40 each); with m updated but acc not rescaled, the 1,299 zero logits would dominate.
// KV head 1: all keys zero, a flat softmax over every slot: out[d] = (slots with j mod 64 = d)
// / 1,300. lse: 40 + log(number of spikes), and log(1,300).
void check_online_softmax(DType dt, int threads, const std::vector<int32_t>& spikes, float tol) {
  constexpr int kN = 1600, D = 64, Hkv = 2, H = 6;  // 3 key ranges per head (decode_splits): [0, 533), [533, 1066), [1066, 1600)
  KvLayout l{1, Hkv, D, dt, 32};
  PagePool pool(l.page_bytes());
  KvCache c(pool, l);
  std::vector<float> k(static_cast<size_t>(kN) * Hkv * D, 0.0f), v(k.size(), 0.0f);  // [j][kvh][D]
  std::vector<int32_t> pos(kN);
  for (int j = 0; j < kN; ++j) {
    pos[j] = j;
    for (int h = 0; h < Hkv; ++h) v[(static_cast<size_t>(j) * Hkv + h) * D + j % D] = 1.0f;
  }
  for (int32_t j : spikes) k[static_cast<size_t>(j) * Hkv * D] = 320.0f;
  ASSERT_TRUE(c.append(0, kN, k.data(), v.data(), pos.data()));
  AttnShape s{H, Hkv, D, 0.125f};
  std::vector<float> q(static_cast<size_t>(H) * D, 0.0f), out(q.size()), lse(H);
  for (int qh = 0; qh < H; ++qh) q[static_cast<size_t>(qh) * D] = 1.0f;
  const int32_t qpos = kN;
  ThreadPool tp(threads);
  AttnScratch scr;
  attention(c, 0, s, q.data(), &qpos, 1, out.data(), lse.data(), tp, scr);
  for (int qh = 0; qh < H; ++qh) {
    const float* o = out.data() + static_cast<size_t>(qh) * D;
    for (int d = 0; d < D; ++d) {
      double want = 0;
      if (qh < 3) {
        for (int32_t j : spikes) want += (j % D == d) ? 1.0 / spikes.size() : 0.0;
      } else {
        want = static_cast<double>(kN / D + (d < kN % D ? 1 : 0)) / kN;
      }
      ASSERT_NEAR(o[d], want, tol) << dtype_name(dt) << " head " << qh << " d " << d << " spike " << spikes[0];
    }
    const double want_lse = qh < 3 ? 40.0 + std::log(static_cast<double>(spikes.size())) : std::log(static_cast<double>(kN));
    EXPECT_NEAR(lse[qh], want_lse, dt == DType::Q8_0 ? 0.2 : 1e-4) << dtype_name(dt) << " head " << qh;
  }
}

}  // namespace

TEST(Attention, DecodeSoftmaxAcrossPagesAndRangesKnownAnswers) {
  for (DType dt : {DType::F32, DType::F16, DType::Q8_0, DType::Q4_0})
    for (int threads : {1, 2}) {
      const float tol = dt == DType::Q8_0 ? 2e-3f : 1e-5f;
      check_online_softmax(dt, threads, {3}, tol);            // the first page: never rescaled
      check_online_softmax(dt, threads, {1590}, tol);         // the last page of the last range
      check_online_softmax(dt, threads, {40, 45}, tol);       // one page, two spikes
      check_online_softmax(dt, threads, {5, 700, 1100}, tol);  // three ranges, each its block
    }
}

}  // namespace kvs
