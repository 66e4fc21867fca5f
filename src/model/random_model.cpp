#include "model/random_model.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/ops.h"
#include "model/export.h"
#include "model/gguf/gguf_writer.h"
#include "model/model.h"

namespace kvs {
namespace {

// splitmix64: fast, seedable, good enough for weights.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }  // [0, 1)
};

std::vector<uint8_t> random_tensor(int64_t rows, int64_t cols, DType type, uint64_t seed, float std_dev, float mean) {
  Rng rng{seed};
  const float a = std_dev * std::sqrt(3.0f);
  const size_t rb = dtype_row_bytes(type, cols);
  std::vector<uint8_t> out(static_cast<size_t>(rows) * rb);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& x : row) x = mean + (2.0f * rng.uniform() - 1.0f) * a;
    kernels::quantize_row(type, row.data(), out.data() + static_cast<size_t>(r) * rb, cols);
  }
  return out;
}

}  // namespace

VocabSpec synthetic_spm_vocab(int n_vocab) {
  VocabSpec v;
  v.kind = TokenizerKind::SPM;
  auto add = [&](std::string t, float score, TokenType ty) {
    v.tokens.push_back(std::move(t));
    v.scores.push_back(score);
    v.types.push_back(static_cast<int32_t>(ty));
  };
  add("<unk>", 0, TokenType::Unknown);
  add("<s>", 0, TokenType::Control);
  add("</s>", 0, TokenType::Control);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    add(buf, 0, TokenType::Byte);
  }
  float score = -1.0f;
  for (char c = 33; c < 127 && static_cast<int>(v.tokens.size()) < n_vocab; ++c) add(std::string(1, c), score--, TokenType::Normal);
  for (char c = 33; c < 127 && static_cast<int>(v.tokens.size()) < n_vocab; ++c)
    add("\xe2\x96\x81" + std::string(1, c), score--, TokenType::Normal);
  if (static_cast<int>(v.tokens.size()) < n_vocab) add("\xe2\x96\x81", score--, TokenType::Normal);
  v.unk = 0;
  v.bos = 1;
  v.eos = 2;
  v.add_bos = true;
  return v;
}

void write_random_gguf(const HParams& hp, VocabSpec vocab, DType type, uint64_t seed, const std::string& name,
                       const std::string& path) {
  hp.validate("make-model");
  if (!kernels::dtype_computable(type)) fail("make-model: cannot write weights as {}", dtype_name(type));
  if (static_cast<int>(vocab.tokens.size()) > hp.n_vocab)
    fail("make-model: the vocabulary has {} tokens, more than the shape's {}", vocab.tokens.size(), hp.n_vocab);
  // Appends a token, keeping scores (when the vocabulary has them) and types beside it.
  auto append = [&](std::string t, float score, TokenType type) {
    vocab.tokens.push_back(std::move(t));
    if (!vocab.scores.empty() || vocab.kind == TokenizerKind::SPM) {
      vocab.scores.resize(vocab.tokens.size() - 1, 0.0f);
      vocab.scores.push_back(score);
    }
    vocab.types.resize(vocab.tokens.size() - 1, static_cast<int32_t>(TokenType::Normal));
    vocab.types.push_back(static_cast<int32_t>(type));
  };
  // Phi-3's added tokens (llama.cpp looks "<|endoftext|>" up in a model named phi-3 and fails
  // without it; the chat template needs the others), after the synthetic ones as in the real vocab.
  if (hp.arch == Arch::Phi3 && std::find(vocab.tokens.begin(), vocab.tokens.end(), "<|endoftext|>") == vocab.tokens.end())
    for (const char* t : {"<|endoftext|>", "<|assistant|>", "<|system|>", "<|end|>", "<|user|>"})
      if (static_cast<int>(vocab.tokens.size()) < hp.n_vocab) append(t, 0.0f, TokenType::Control);
  // Gemma's turn markers (its chat template; <end_of_turn> ends generation).
  if (hp.gemma_block && std::find(vocab.tokens.begin(), vocab.tokens.end(), "<start_of_turn>") == vocab.tokens.end())
    for (const char* t : {"<start_of_turn>", "<end_of_turn>"})
      if (static_cast<int>(vocab.tokens.size()) < hp.n_vocab) append(t, 0.0f, TokenType::Control);
  for (int i = static_cast<int>(vocab.tokens.size()); i < hp.n_vocab; ++i)
    append("[PAD" + std::to_string(i) + "]", -1e9f, TokenType::Unused);
  GgufWriter w;
  write_hparams_gguf(w, hp, name);
  write_vocab_gguf(w, vocab);
  uint64_t tensor_seed = seed * 1000003ull;
  const int64_t E = hp.n_embd, Q = int64_t{hp.n_head} * hp.head_dim, KV = int64_t{hp.n_head_kv} * hp.head_dim;
  auto matrix = [&](const std::string& nm, int64_t rows, int64_t cols) {
    const DType st = storage_type_for(type, cols);
    w.add_tensor(nm, st, {cols, rows}, random_tensor(rows, cols, st, ++tensor_seed, 0.02f, 0.0f));
  };
  auto vec = [&](const std::string& nm, int64_t n, float mean, float sd) {
    w.add_tensor(nm, DType::F32, {n}, random_tensor(1, n, DType::F32, ++tensor_seed, sd, mean));
  };
  add_rope_freqs_gguf(w, hp, detail::rope_inv_freq(hp));
  matrix("token_embd.weight", hp.n_vocab, E);
  for (int i = 0; i < hp.n_layer; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    vec(p + "attn_norm.weight", E, 1.0f, 0.05f);
    if (hp.arch == Arch::Phi3) {
      matrix(p + "attn_qkv.weight", Q + 2 * KV, E);
    } else {
      matrix(p + "attn_q.weight", Q, E);
      matrix(p + "attn_k.weight", KV, E);
      matrix(p + "attn_v.weight", KV, E);
    }
    if (hp.qkv_bias) {
      vec(p + "attn_q.bias", Q, 0.0f, 0.02f);
      vec(p + "attn_k.bias", KV, 0.0f, 0.02f);
      vec(p + "attn_v.bias", KV, 0.0f, 0.02f);
    }
    if (hp.qk_norm) {  // per-head norm weights, around 1 as trained ones are
      vec(p + "attn_q_norm.weight", hp.head_dim, 1.0f, 0.2f);
      vec(p + "attn_k_norm.weight", hp.head_dim, 1.0f, 0.2f);
    }
    matrix(p + "attn_output.weight", E, Q);
    if (hp.gemma_block) vec(p + "post_attention_norm.weight", E, 1.0f, 0.05f);
    vec(p + "ffn_norm.weight", E, 1.0f, 0.05f);
    if (hp.arch == Arch::Phi3) {
      matrix(p + "ffn_up.weight", 2 * int64_t{hp.n_ff}, E);  // gate | up
    } else {
      matrix(p + "ffn_gate.weight", hp.n_ff, E);
      matrix(p + "ffn_up.weight", hp.n_ff, E);
    }
    matrix(p + "ffn_down.weight", E, hp.n_ff);
    if (hp.gemma_block) vec(p + "post_ffw_norm.weight", E, 1.0f, 0.05f);
  }
  vec("output_norm.weight", E, 1.0f, 0.05f);
  if (!hp.tied_embeddings) matrix("output.weight", hp.n_vocab, E);
  w.write(path);
}

}  // namespace kvs
