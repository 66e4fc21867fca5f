// KVzip as press parts (the method and the choices where the paper is open: kvzip.h).
//
// The repeat pass: one probe forward per chunk (the whole model, attending to the whole cache);
// RepeatObserver sees every layer of it and recomputes, for the chunk's queries, the logits
// against the subsampled keys (sinks + the chunk's cache slots + the repeat input's own keys up to
// each query), softmax per query, and keeps per chunk slot the maximum probability over the
// queries and the query heads of the group. Tiles of 64 queries x the subsampled keys, through the
// prefill attention's tile kernel (kernels::qk_panels: the gathered keys transposed into panels
// once per layer and KV head); never a matrix larger than that. When the subsampled keys are every
// key the forward's queries see (one chunk covers the whole context after the sinks, or
// softmax=cache), the forward's own log-sum-exp normalises: only the chunk's columns are computed,
// and the maximum is kept as a log probability (max of logit - lse, one exp per slot at the end).
// Otherwise each row gets its max and sum of exp over the subsampled keys. The per-slot maximum
// over a tile's rows: kvzip_fold_max (press/math/kvzip_fold.h, AVX2). Extra memory while scoring:
// the probe's fork (the repeat input's K/V, one chunk) + per thread one tile and one maximum per
// chunk slot + the gathered keys of one layer (sinks + chunk + repeat input).
// precision=bf16 (KvzipOptions::bf16; default where the CPU has AVX512_BF16), a speed option: the
// probe forward's prefill attention and these tiles take their products from BF16 operands (the
// keys packed by pack_key_panels_bf16, the queries rounded per tile, qk_panels_bf16); logits,
// softmax and maxima stay f32 (docs/methods/kvzip.md compares it with the official BF16 code).
#include "press/methods/kvzip.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "kernels/ops.h"
#include "press/budget/global.h"
#include "press/math/kvzip_fold.h"
#include "press/scorers/scorers.h"

namespace kvs {

namespace {

constexpr int kQRows = 128;  // rows (query heads of a group x tokens) per scoring tile
constexpr float kInf = std::numeric_limits<float>::infinity();

const char* const kFirstPrompt = "\n\nRepeat the previous context exactly.";
const char* const kPartPrompt = "\n\nRepeat the part of the previous context exactly, starting with ";

// Ids of `text` as it continues a longer string (token-level concatenation after the context):
// the ids of "a" + text after those of "a" (the testbed's Tok.encode_cont; a SentencePiece
// tokenizer would otherwise add its word-start piece in front).
std::vector<int32_t> encode_continuation(ModelProbe& probe, const std::string& text) {
  const std::vector<int32_t> a = probe.encode("a", false), b = probe.encode("a" + text, false);
  if (b.size() > a.size() && std::equal(a.begin(), a.end(), b.begin())) return {b.begin() + static_cast<std::ptrdiff_t>(a.size()), b.end()};
  return probe.encode(text, false);
}

// text inside the chat template: (text's ids without the template head, the template's tail) —
// found as what encode(text, chat) does not share with encode("", chat) at either end.
std::pair<std::vector<int32_t>, std::vector<int32_t>> encode_chat(ModelProbe& probe, const std::string& text) {
  const std::vector<int32_t> e0 = probe.encode("", true), e1 = probe.encode(text, true);
  size_t head = 0;
  while (head < e0.size() && head < e1.size() && e0[head] == e1[head]) ++head;
  size_t tail = 0;
  while (tail < e0.size() - head && tail < e1.size() - head && e0[e0.size() - 1 - tail] == e1[e1.size() - 1 - tail])
    ++tail;
  return {{e1.begin() + static_cast<std::ptrdiff_t>(head), e1.end() - static_cast<std::ptrdiff_t>(tail)},
          {e1.end() - static_cast<std::ptrdiff_t>(tail), e1.end()}};
}

bool starts_with_at(std::span<const int32_t> ctx, size_t at, std::span<const int32_t> what) {
  return !what.empty() && at + what.size() <= ctx.size() && std::equal(what.begin(), what.end(), ctx.begin() + static_cast<std::ptrdiff_t>(at));
}

// Sees every layer of one chunk's repeat pass and folds the chunk's scores into `out`.
class RepeatObserver : public LayerObserver {
 public:
  RepeatObserver(const PressEnv& env, int32_t n_orig, int32_t sinks, int32_t p0, int32_t p1, bool softmax_cache,
                 Scores& out)
      : env_(env), n_orig_(n_orig), sinks_(sinks), p0_(p0), p1_(p1), softmax_cache_(softmax_cache), out_(out) {}

  void on_layer(const LayerView& v) override {
    const KvCache& c = *v.cache;  // the probe's fork: the original slots, then the repeat input's
    const KvLayout& l = env_.cache.layout();
    const AttnShape& s = *v.shape;
    const int H = s.n_head, Hkv = s.n_head_kv, D = s.head_dim, G = H / Hkv, T = v.n_tok;
    const int32_t last_pos = v.pos[T - 1];
    // Normalise by the forward's log-sum-exp when the subsampled keys are all the keys it saw
    // (the sinks and one chunk cover the whole original cache) — not with llama.cpp numerics,
    // whose attention rounds the queries to F16.
    const bool fwd_lse = softmax_cache_ || (p0_ == sinks_ && p1_ == n_orig_ && !s.f16_compat);
    // BF16 products when the forward's attention ran them (its shape says so: precision=bf16 and
    // an even head dim); with the forward's lse, only when this batch took the prefill path (a
    // batch of fewer than kAttnPrefillMinTokens queries took the f32 decode path).
    const bool bf16 = s.bf16_active() && (!fwd_lse || T >= kAttnPrefillMinTokens);
    // Per KV head: the subsampled keys [a sinks | m chunk slots | nrep repeat keys] gathered to f32.
    struct HeadKeys {
      int32_t a = 0, b = 0, m = 0, r0 = 0, nrep = 0;
      std::vector<float> K;         // [ceil((a + m + nrep) / 16)][D][16] keys as panels (kernels::pack_key_panels)
      std::vector<uint16_t> Kb;     // idem in BF16, dims in pairs (pack_key_panels_bf16), when bf16
      std::vector<int32_t> reppos;  // [nrep] positions of the repeat keys
    };
    std::vector<HeadKeys> hk(static_cast<size_t>(Hkv));
    int32_t max_cols = 0, max_m = 0;
    env_.pool.parallel_for(Hkv, [&](int64_t b0, int64_t e0) {
      for (int64_t kvh = b0; kvh < e0; ++kvh) {
        const auto& pos = c.head(v.layer, static_cast<int>(kvh)).pos;
        auto lb = [&](int32_t p) { return static_cast<int32_t>(std::lower_bound(pos.begin(), pos.end(), p) - pos.begin()); };
        HeadKeys& h = hk[static_cast<size_t>(kvh)];
        h.b = lb(p0_);
        h.m = lb(p1_) - h.b;
        if (!fwd_lse) {
          h.a = lb(sinks_);
          h.r0 = lb(n_orig_);
          h.nrep = static_cast<int32_t>(std::upper_bound(pos.begin(), pos.end(), last_pos) - pos.begin()) - h.r0;
        }
        const int32_t nk = h.a + h.m + h.nrep;
        std::vector<float> rows(static_cast<size_t>(nk) * D);  // [nk][D] before the transposition
        c.gather(v.layer, static_cast<int>(kvh), 0, h.a, rows.data(), nullptr);
        c.gather(v.layer, static_cast<int>(kvh), h.b, h.b + h.m, rows.data() + static_cast<size_t>(h.a) * D, nullptr);
        c.gather(v.layer, static_cast<int>(kvh), h.r0, h.r0 + h.nrep, rows.data() + static_cast<size_t>(h.a + h.m) * D,
                 nullptr);
        if (bf16) {
          h.Kb.resize(kernels::key_panels_floats(nk, D));
          kernels::pack_key_panels_bf16(rows.data(), nk, D, h.Kb.data());
        } else {
          h.K.resize(kernels::key_panels_floats(nk, D));
          kernels::pack_key_panels(rows.data(), nk, D, h.K.data());
        }
        h.reppos.assign(pos.begin() + h.r0, pos.begin() + h.r0 + h.nrep);
      }
    });
    for (const HeadKeys& h : hk) {
      max_cols = std::max(max_cols, h.a + h.m + h.nrep);
      max_m = std::max(max_m, h.m);
    }
    if (max_m == 0) return;
    // Score rows of stride lds: the tile kernel writes whole panels of 16 columns.
    const int64_t lds = (max_cols + kernels::kKeyPanel - 1) / kernels::kKeyPanel * kernels::kKeyPanel;
    // Tasks (KV head, query tile): the tile's queries of every head of the group stacked into one
    // matrix [G][nt][D] (row g * nt + i: head kvh * G + g, token t0 + i), so the gathered keys are
    // read once per group; every row folds into the same per-KV-head maxima.
    struct Task {
      int kvh, t0;
    };
    std::vector<Task> tasks;
    const int bq = std::max(8, kQRows / G);  // tokens per tile
    for (int kvh = 0; kvh < Hkv; ++kvh)
      for (int t0 = 0; t0 < T; t0 += bq) tasks.push_back({kvh, t0});
    const int nth = env_.pool.size();
    // best[thread][kvh][j]: max probability of chunk slot j seen by that thread (its log with fwd_lse).
    std::vector<std::vector<std::vector<float>>> best(static_cast<size_t>(nth));
    env_.pool.run([&](int ith, int n_threads) {
      auto& mine = best[static_cast<size_t>(ith)];
      mine.resize(static_cast<size_t>(Hkv));
      for (int kvh = 0; kvh < Hkv; ++kvh)
        mine[static_cast<size_t>(kvh)].assign(static_cast<size_t>(hk[kvh].m), fwd_lse ? -kInf : 0.0f);
      const size_t R = static_cast<size_t>(G) * bq;  // rows of a stacked tile
      std::vector<float> Q(R * D), S(R * static_cast<size_t>(lds));
      std::vector<uint16_t> Qh(bf16 ? R * D : 0);  // [R][D] Q rounded to BF16
      std::vector<float> mul(R), sub(R);  // [R] per-row map
      for (size_t ti = static_cast<size_t>(ith); ti < tasks.size(); ti += static_cast<size_t>(n_threads)) {
        const Task& tk = tasks[ti];
        const HeadKeys& h = hk[static_cast<size_t>(tk.kvh)];
        if (h.m == 0) continue;
        const int nt = std::min(bq, T - tk.t0), rows = G * nt;
        for (int g = 0; g < G; ++g)
          for (int i = 0; i < nt; ++i) {
            const float* src = v.q + (static_cast<size_t>(tk.t0 + i) * H + tk.kvh * G + g) * D;
            float* dst = Q.data() + static_cast<size_t>(g * nt + i) * D;
            for (int d = 0; d < D; ++d) dst[d] = src[d] * s.scale;
          }
        // Repeat keys visible to some query of the tile (the rest are masked for all of them).
        const int32_t tile_last = v.pos[tk.t0 + nt - 1];
        const int32_t nvis =
            static_cast<int32_t>(std::upper_bound(h.reppos.begin(), h.reppos.end(), tile_last) - h.reppos.begin());
        const int32_t ncols = h.a + h.m + nvis;
        const int np = (ncols + kernels::kKeyPanel - 1) / kernels::kKeyPanel;
        if (bf16) {
          kernels::to_bf16(Q.data(), Qh.data(), static_cast<int64_t>(rows) * D);
          kernels::qk_panels_bf16(Qh.data(), rows, D, h.Kb.data(), np, S.data(), lds);
        } else {
          kernels::qk_panels(Q.data(), rows, D, h.K.data(), np, S.data(), lds);
        }
        if (s.softcap > 0)  // Gemma 2's soft-capped logits, as the forward's attention
          for (int r = 0; r < rows; ++r)
            for (int32_t j = 0; j < ncols; ++j) S[r * lds + j] = s.logit(S[r * lds + j]);
        float* bst = mine[static_cast<size_t>(tk.kvh)].data();
        if (fwd_lse) {
          // log p = logit - lse (every column is a chunk slot: no sinks, no repeat keys).
          for (int r = 0; r < rows; ++r) {
            mul[static_cast<size_t>(r)] = 1.0f;
            sub[static_cast<size_t>(r)] = v.lse[static_cast<size_t>(tk.t0 + r % nt) * H + tk.kvh * G + r / nt];
          }
        } else {
          for (int r = 0; r < rows; ++r) {
            float* row = S.data() + r * lds;
            const int32_t qp = v.pos[tk.t0 + r % nt];
            for (int32_t j = nvis - 1; j >= 0 && h.reppos[static_cast<size_t>(j)] > qp; --j) row[h.a + h.m + j] = -kInf;
            const float mx = kernels::max_f32(row, ncols);
            mul[static_cast<size_t>(r)] = 1.0f / kernels::exp_sub_sum(row, ncols, mx);  // row := exp(row - mx)
            sub[static_cast<size_t>(r)] = 0.0f;
          }
        }
        kvzip_fold_max(S.data() + h.a, lds, rows, h.m, mul.data(), sub.data(), bst);
      }
    });
    for (int kvh = 0; kvh < Hkv; ++kvh) {
      const HeadKeys& h = hk[static_cast<size_t>(kvh)];
      std::vector<float>& o = out_.at(l, v.layer, kvh);
      // Fork slot -> original slot: a sliding-window layer of the fork may have dropped more leading
      // slots than the original (the repeat pass runs past the window); their scores stay 0.
      const int64_t off = c.head(v.layer, kvh).slid - env_.cache.head(v.layer, kvh).slid;
      for (int t = 0; t < nth; ++t) {
        const auto& b = best[static_cast<size_t>(t)];
        if (b.empty()) continue;
        const float* bk = b[static_cast<size_t>(kvh)].data();
        for (int32_t j = 0; j < h.m; ++j) {
          const size_t os = static_cast<size_t>(h.b + j + off);
          o[os] = std::max(o[os], fwd_lse ? std::exp(bk[j]) : bk[j]);
        }
      }
    }
  }

 private:
  const PressEnv& env_;
  int32_t n_orig_, sinks_, p0_, p1_;
  bool softmax_cache_;
  Scores& out_;
};

}  // namespace

int32_t kvzip_chat_head_tokens(ModelProbe& probe, std::span<const int32_t> ctx) {
  if (!probe.has_chat_template() || ctx.empty()) return 0;
  // The template's head: what the renderings of two different user texts share at the start.
  const std::vector<int32_t> ea = probe.encode("a", true), eb = probe.encode("b", true);
  size_t n = 0;
  while (n < ea.size() && n < eb.size() && ea[n] == eb[n]) ++n;
  if (n == 0) return 0;
  const std::span<const int32_t> head(ea.data(), n);
  // The context may start with BOS, which the probe's rendering leaves out.
  for (size_t at : {size_t{0}, size_t{1}}) {
    if (starts_with_at(ctx, at, head)) return static_cast<int32_t>(at + n);
    // Another system turn than the template's default (eval --system): the head's start, then
    // the user turn's opening (the head's last 3 tokens) somewhere after it.
    const size_t lead = std::min<size_t>(2, n), open = std::min<size_t>(3, n);
    if (n > open && starts_with_at(ctx, at, head.first(lead))) {
      const std::span<const int32_t> opener = head.last(open);
      const size_t limit = std::min<size_t>(ctx.size(), 8192);
      for (size_t i = at + lead; i + open <= limit; ++i)
        if (starts_with_at(ctx, i, opener)) return static_cast<int32_t>(i + open);
    }
  }
  return 0;
}

int32_t kvzip_protected_prefix(ModelProbe* probe, std::span<const int32_t> ctx, int32_t sinks, int32_t n_past) {
  const int32_t head = probe ? kvzip_chat_head_tokens(*probe, ctx.first(std::min<size_t>(ctx.size(), static_cast<size_t>(std::max(0, n_past))))) : 0;
  return std::min(std::max(sinks, head), n_past);
}

std::vector<int32_t> kvzip_repeat_input(ModelProbe& probe, std::span<const int32_t> ctx, int32_t p0, int32_t p1,
                                        bool first_chunk, const KvzipOptions& opt) {
  KVS_ASSERT(p0 >= 0 && p0 <= p1 && p1 <= static_cast<int32_t>(ctx.size()));
  // A rendering "in the template" of a model without one would be the bare text tokenized with
  // special tokens parsed: another tokenization than chat=no's, silently. Refused.
  if (opt.chat == "yes" && !probe.has_chat_template())
    fail("kvzip: chat=yes, but this model has no chat template (use chat=auto or chat=no)");
  const bool chat = opt.chat == "yes" || (opt.chat == "auto" && probe.has_chat_template());
  const std::string text = first_chunk ? kFirstPrompt : kPartPrompt;
  std::vector<int32_t> ids, tail;
  if (chat)
    std::tie(ids, tail) = encode_chat(probe, text);
  else
    ids = encode_continuation(probe, text);
  if (!first_chunk) {
    const int32_t q0 = std::max(0, p0 - opt.prev_tokens);
    ids.insert(ids.end(), ctx.begin() + q0, ctx.begin() + p0);
  }
  ids.insert(ids.end(), tail.begin(), tail.end());
  ids.insert(ids.end(), ctx.begin() + p0, ctx.begin() + p1);
  return ids;
}

Scores kvzip_pair_scores(const PressEnv& env, const KvzipOptions& opt) {
  if (!env.probe) fail("kvzip: needs the model (its repeat pass runs the model), which is not available here");
  if (opt.chunk < 1) fail("kvzip: chunk size {} (expected >= 1)", opt.chunk);
  const KvCache& c = env.cache;
  const std::span<const int32_t> ctx = env.probe->context_tokens();
  const int32_t n = c.n_past();
  if (static_cast<int32_t>(ctx.size()) < n)
    fail("kvzip: the context's tokens are not available ({} known, the cache holds {} positions): a cache loaded "
         "from a .kvc file cannot be scored again",
         ctx.size(), n);
  // The sinks, or the whole chat-template head when the context starts with one (the official
  // code's system prompt: never evicted, never repeated; model/wrapper.py keeps it as the sink).
  const int32_t sinks = kvzip_protected_prefix(env.probe, ctx, env.request.sinks, n);
  Scores sc = make_scores(c);
  const KvLayout& l = c.layout();
  for (int i = 0; i < l.n_heads_total(); ++i) {
    const HeadCache& h = c.head(i / l.n_head_kv, i % l.n_head_kv);
    for (int32_t s = 0; s < h.len() && h.pos[static_cast<size_t>(s)] < sinks; ++s) sc.s[static_cast<size_t>(i)][static_cast<size_t>(s)] = kInf;
  }
  for (int32_t p0 = sinks; p0 < n; p0 += opt.chunk) {
    const int32_t p1 = std::min(n, p0 + opt.chunk);
    const std::vector<int32_t> ids = kvzip_repeat_input(*env.probe, ctx, p0, p1, p0 == sinks, opt);
    RepeatObserver obs(env, n, sinks, p0, p1, opt.softmax_cache, sc);
    env.probe->probe_forward(c, ids, obs, opt.bf16);
  }
  return sc;
}

std::vector<std::vector<double>> kvzip_head_scores(const Scores& pair, const KvLayout& layout) {
  std::vector<std::vector<double>> hs(static_cast<size_t>(layout.n_layer), std::vector<double>(static_cast<size_t>(layout.n_head_kv), 0.0));
  for (int i = 0; i < layout.n_heads_total(); ++i) {
    double m = 0.0;
    for (float x : pair.s[static_cast<size_t>(i)])
      if (std::isfinite(x)) m = std::max(m, static_cast<double>(x));
    hs[static_cast<size_t>(i / layout.n_head_kv)][static_cast<size_t>(i % layout.n_head_kv)] = m;
  }
  return hs;
}

Scores KvzipHeadScorer::score(const PressEnv& env) const {
  const nlohmann::json* cal = env.probe ? env.probe->calibration("kvzip") : nullptr;
  if (!cal)
    fail("kvzip:level=head needs the model's head scores: run `kvshrink calibrate --press kvzip -m MODEL` first");
  const KvLayout& l = env.cache.layout();
  const auto it = cal->find("head_scores");
  const bool ok_shape = it != cal->end() && it->is_array() && it->size() == static_cast<size_t>(l.n_layer) &&
                        std::all_of(it->begin(), it->end(), [&](const nlohmann::json& r) {
                          return r.is_array() && r.size() == static_cast<size_t>(l.n_head_kv) &&
                                 std::all_of(r.begin(), r.end(), [](const nlohmann::json& x) {
                                   return x.is_number() && std::isfinite(x.get<double>());
                                 });
                        });
  if (!ok_shape)
    fail("kvzip calibration: 'head_scores' must be {} arrays (layers) of {} finite numbers (KV heads); "
         "run `kvshrink calibrate --press kvzip` again for this model",
         l.n_layer, l.n_head_kv);
  Scores sc = make_scores(env.cache);
  const int32_t sinks =
      env.probe ? kvzip_protected_prefix(env.probe, env.probe->context_tokens(), env.request.sinks, env.cache.n_past())
                : env.request.sinks;
  for (int i = 0; i < l.n_heads_total(); ++i) {
    const HeadCache& h = env.cache.head(i / l.n_head_kv, i % l.n_head_kv);
    const float v = (*it)[static_cast<size_t>(i / l.n_head_kv)][static_cast<size_t>(i % l.n_head_kv)].get<float>();
    auto& o = sc.s[static_cast<size_t>(i)];
    for (int32_t s = 0; s < h.len(); ++s) o[static_cast<size_t>(s)] = h.pos[static_cast<size_t>(s)] < sinks ? kInf : v;
  }
  return sc;
}

KvzipOptions kvzip_options(const Params& p) {
  const std::string& sm = p.get_str("softmax");
  const std::string& chat = p.get_str("chat");
  const std::string& prec = p.get_str("precision");
  if (sm != "chunk" && sm != "cache") fail("kvzip: softmax must be chunk or cache, got '{}'", sm);
  if (chat != "auto" && chat != "yes" && chat != "no") fail("kvzip: chat must be auto, yes or no, got '{}'", chat);
  if (prec != "auto" && prec != "bf16" && prec != "f32") fail("kvzip: precision must be auto, bf16 or f32, got '{}'", prec);
  KvzipOptions o;
  o.chunk = static_cast<int>(p.get_int("chunk"));
  o.softmax_cache = sm == "cache";
  o.chat = chat;
  o.bf16 = prec == "bf16" || (prec == "auto" && kernels::native_bf16());
  return o;
}

void add_kvzip_presses(std::vector<PressInfo>& presses) {
  using T = ParamSpec::Type;
  presses.push_back(
      {"kvzip", "Kim et al. 2025, arXiv:2505.23416",
       "query-agnostic: the max attention each KV pair receives while the model repeats the context (chunked "
       "repeat pass); pair level (global ranking) or calibrated head level",
       {{"level", T::String, "pair", "pair: score every KV pair by a repeat pass; head: the model's calibrated head "
                                     "scores (kvshrink calibrate --press kvzip), no scoring pass"},
        {"chunk", T::Int, "2048", "m: context tokens per repeat chunk", 1, 1 << 20},
        {"softmax", T::String, "chunk",
         "chunk: softmax over sinks + the chunk's slots + the repeat input (the official code); cache: over every key"},
        {"chat", T::String, "auto", "repeat prompt in the chat template: auto (when the model has one), yes, no"},
        {"precision", T::String, "auto",
         "products of the repeat pass's attention: bf16 (BF16 operands, f32 logits and softmax: a speed option, "
         "about twice as fast with AVX512_BF16), f32, or auto: bf16 where the CPU has AVX512_BF16, f32 elsewhere"}},
       4, 0, {}, "global", [](const Params& p) {
         const std::string& level = p.get_str("level");
         if (level != "pair" && level != "head") fail("kvzip: level must be pair or head, got '{}'", level);
         const KvzipOptions o = kvzip_options(p);
         Press press;
         press.name = "kvzip";
         if (level == "head")
           press.scorer = std::make_shared<KvzipHeadScorer>();
         else
           press.scorer = std::make_shared<KvzipScorer>(o);
         return press;
       }});
}

void add_kvzip_allocators(std::vector<AllocatorInfo>& allocators) {
  allocators.push_back({"global",
                        "one ranking of the scores of every head and layer: the total goes to the best tokens "
                        "wherever they are (KVzip's non-uniform budgets)",
                        {},
                        [](const Params&, const Scorer&) {
                          return std::make_shared<GlobalAllocator>(GlobalAllocator::Scope::Model);
                        }});
}

}  // namespace kvs
