// VocabSpec from GGUF tokenizer.ggml.* metadata (llama.cpp's key names and defaults).
#include "core/error.h"
#include "model/gguf/gguf.h"
#include "model/tokenizer/hf_vocab.h"
#include "model/tokenizer/tokenizer.h"

namespace kvs {

namespace {

// Special-token id keys: absent, negative or 0xFFFFFFFF (llama.cpp's "none") mean unset.
int32_t read_id(const GgufFile& f, const char* key, int32_t dflt, size_t n_tokens) {
  auto v = f.get_int_opt(key);
  if (!v) return dflt;
  if (*v < 0 || *v == 0xFFFFFFFFll) return -1;
  if (*v >= static_cast<int64_t>(n_tokens))
    fail("{}: {} = {} is out of range (expected < {}, the number of tokens)", f.path(), key, *v, n_tokens);
  return static_cast<int32_t>(*v);
}

}  // namespace

VocabSpec vocab_from_gguf(const GgufFile& f) {
  VocabSpec s;
  s.source = f.path();
  const std::string model = f.get_str("tokenizer.ggml.model");
  if (model == "llama") {
    s.kind = TokenizerKind::SPM;
  } else if (model == "gpt2") {
    s.kind = TokenizerKind::BPE;
  } else {
    fail("{}: tokenizer.ggml.model = '{}' is not supported (expected 'llama' or 'gpt2')", f.path(), model);
  }
  s.tokens = f.get_str_array("tokenizer.ggml.tokens");
  const size_t n = s.tokens.size();
  if (n == 0) fail("{}: tokenizer.ggml.tokens is empty", f.path());
  if (f.has("tokenizer.ggml.scores")) {
    s.scores = f.get_f32_array("tokenizer.ggml.scores");
    if (s.scores.size() != n)
      fail("{}: tokenizer.ggml.scores has {} entries, expected {} (one per token)", f.path(), s.scores.size(), n);
  }
  if (f.has("tokenizer.ggml.token_type")) {
    const auto types = f.get_int_array("tokenizer.ggml.token_type");
    if (types.size() != n)
      fail("{}: tokenizer.ggml.token_type has {} entries, expected {} (one per token)", f.path(), types.size(), n);
    s.types.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      if (types[i] < 1 || types[i] > 6)
        fail("{}: tokenizer.ggml.token_type[{}] = {} (expected 1..6)", f.path(), i, types[i]);
      s.types.push_back(static_cast<int32_t>(types[i]));
    }
  }
  if (s.kind == TokenizerKind::BPE) {
    if (!f.has("tokenizer.ggml.merges"))
      fail("{}: tokenizer.ggml.merges is missing (required for tokenizer.ggml.model 'gpt2')", f.path());
    s.merges = f.get_str_array("tokenizer.ggml.merges");
    s.pre = f.get_str_opt("tokenizer.ggml.pre").value_or("default");
    s.add_space_prefix = false;
    s.add_bos = s.pre == "llama3" || s.pre == "llama-v3" || s.pre == "llama-bpe" || s.pre == "falcon3";
  } else {
    s.add_bos = true;
  }
  const bool spm = s.kind == TokenizerKind::SPM;
  s.bos = read_id(f, "tokenizer.ggml.bos_token_id", spm ? 1 : -1, n);
  s.eos = read_id(f, "tokenizer.ggml.eos_token_id", spm ? 2 : -1, n);
  s.unk = read_id(f, "tokenizer.ggml.unknown_token_id", spm ? 0 : -1, n);
  s.pad = read_id(f, "tokenizer.ggml.padding_token_id", -1, n);
  s.eot = read_id(f, "tokenizer.ggml.eot_token_id", -1, n);
  if (auto v = f.get_bool_opt("tokenizer.ggml.add_bos_token")) s.add_bos = *v;
  if (auto v = f.get_bool_opt("tokenizer.ggml.add_eos_token")) s.add_eos = *v;
  if (auto v = f.get_bool_opt("tokenizer.ggml.add_space_prefix")) s.add_space_prefix = *v;
  if (auto v = f.get_str_opt("tokenizer.chat_template")) s.chat_template = *v;
  // Normalizer: GGUF has no key for it. kvshrink stores the steps tokenizer.ggml.* cannot express;
  // files from elsewhere get the one their pre-tokenizer's HF tokenizer.json has (Qwen2/3: NFC).
  const auto stored = f.get_str_opt(kGgufNormalizerKey);
  if (stored) {
    s.base_normalizers = tok::normalizer_from_json_text(*stored, f.path() + ": " + kGgufNormalizerKey);
  } else if (s.kind == TokenizerKind::BPE && s.pre == "qwen2") {
    s.base_normalizers.push_back({NormalizerStep::Kind::NFC, "", false, ""});
    s.normalizer_note = "NFC, implied by tokenizer.ggml.pre 'qwen2' (Qwen2/Qwen3's tokenizer.json normalizes to NFC; "
                        "llama.cpp does not)";
  }
  if (s.kind == TokenizerKind::SPM) {
    s.unigram = f.get_bool_opt(kGgufUnigramKey).value_or(false);
    // SentencePiece's remove_extra_whitespaces is stored as two regex Replace steps (see
    // normalizer_json_text); back as the option, it reaches tokenizer.model again on export.
    auto& b = s.base_normalizers;
    auto is = [](const NormalizerStep& st, const char* pat, const char* to) {
      return st.kind == NormalizerStep::Kind::Replace && st.regex && st.pattern == pat && st.content == to;
    };
    const size_t nb = b.size();
    if (nb >= 2 && is(b[nb - 2], R"(\A +| +\z)", "") && is(b[nb - 1], " {2,}", " ")) {
      b.resize(nb - 2);  // the derived pipeline applies it after the base steps, as before
      s.remove_extra_whitespaces = true;
    }
  }
  if (stored && !s.base_normalizers.empty())
    s.normalizer_note = fmt::format("{}, from {}", describe_normalizers(s.base_normalizers), kGgufNormalizerKey);
  return s;
}

}  // namespace kvs
