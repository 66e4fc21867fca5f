// The tokenizer part of model export: tokenizer.ggml.* (+ kvshrink's normalizer key) for GGUF,
// tokenizer.json / tokenizer_config.json / tokenizer.model for HF folders. Every conversion is
// checked: the tokenizer a reader rebuilds from what was written must tokenize the probe texts
// exactly as the source does.
#include <algorithm>
#include <filesystem>

#include "core/atomic_output.h"
#include "core/error.h"
#include "core/paths.h"
#include "model/export.h"
#include "model/gguf/gguf.h"
#include "model/gguf/gguf_writer.h"
#include "model/tokenizer/hf_export.h"
#include "model/tokenizer/hf_vocab.h"
#include "model/tokenizer/text_pipeline.h"

namespace kvs {

namespace {

void put_vocab(GgufWriter& w, const VocabSpec& v, const std::string& pre) {
  const bool spm = v.kind == TokenizerKind::SPM;
  w.set_str("tokenizer.ggml.model", spm ? "llama" : "gpt2");
  if (!spm) w.set_str("tokenizer.ggml.pre", pre);
  w.set_array("tokenizer.ggml.tokens", v.tokens);
  if (spm) {
    // GGUF's SentencePiece model is driven by scores; a merges-only vocabulary (HF tokenizer.json)
    // gets scores that rank its merges.
    std::vector<float> scores = !v.scores.empty() || v.merges.empty() ? v.scores : spm_scores_from_merges(v);
    scores.resize(v.tokens.size(), 0.0f);
    w.set_array("tokenizer.ggml.scores", scores);
  }
  std::vector<int32_t> types = v.types;
  types.resize(v.tokens.size(), static_cast<int32_t>(TokenType::Normal));
  w.set_array("tokenizer.ggml.token_type", types);
  if (!spm) w.set_array("tokenizer.ggml.merges", v.merges);
  auto id = [&](const char* key, int32_t x) {
    if (x >= 0) w.set_u32(key, static_cast<uint32_t>(x));
  };
  id("tokenizer.ggml.bos_token_id", v.bos);
  id("tokenizer.ggml.eos_token_id", v.eos);
  id("tokenizer.ggml.unknown_token_id", v.unk);
  id("tokenizer.ggml.padding_token_id", v.pad);
  id("tokenizer.ggml.eot_token_id", v.eot);
  w.set_bool("tokenizer.ggml.add_bos_token", v.add_bos);
  w.set_bool("tokenizer.ggml.add_eos_token", v.add_eos);
  if (spm) w.set_bool("tokenizer.ggml.add_space_prefix", spm_adds_space_prefix(v));
  if (!v.chat_template.empty()) w.set_str("tokenizer.chat_template", v.chat_template);
  // Always written (also "null"): its presence tells a reader not to infer a normalizer from `pre`.
  w.set_str(kGgufNormalizerKey, normalizer_json_text(gguf_extra_normalizers(v)));
  if (spm && v.unigram) w.set_bool(kGgufUnigramKey, true);
}

// The tokenizer a GGUF reader rebuilds from put_vocab(v, pre).
std::unique_ptr<Tokenizer> through_gguf(const VocabSpec& v, const std::string& pre) {
  GgufWriter w;
  put_vocab(w, v, pre);
  const std::vector<uint8_t> image = w.serialize();
  auto g = GgufFile::parse(image.data(), image.size(), v.source + " (as GGUF)");
  return Tokenizer::create(vocab_from_gguf(*g));
}

// The `tokenizer.ggml.pre` name of a HF byte-level pre-tokenizer pipeline llama.cpp knows, by its
// structure (the regexes are those of the models' tokenizer.json files); "" if none.
std::string known_pre_name(const VocabSpec& v) {
  using K = PreTokenizerStep::Kind;
  const auto& p = v.pre_tokenizers;
  auto byte_level = [](const PreTokenizerStep& s, bool regex) {
    return s.kind == K::ByteLevel && !s.add_prefix_space && s.use_regex == regex;
  };
  if (p.size() == 1 && byte_level(p[0], true)) return "gpt-2";
  if (p.size() == 2 && p[0].kind == K::Digits && p[0].individual_digits && byte_level(p[1], true)) return "smollm";
  if (p.size() == 2 && p[0].kind == K::Split && p[0].regex && p[0].behavior == SplitBehavior::Isolated &&
      !p[0].invert && byte_level(p[1], false)) {
    for (const char* name : {"llama-bpe", "qwen2"}) {
      bool ignore = false;
      const auto preset = tok::pre_tokenizer_preset(name, &ignore, name);
      if (preset.size() == 1 && preset[0].pattern == p[0].pattern) return name;
    }
  }
  return "";
}

// GGUF names byte-level BPE pre-tokenizers (llama.cpp's `tokenizer.ggml.pre`); a HF tokenizer.json
// spells out its pipeline. Pick the name under which the GGUF tokenizes the probe texts exactly
// as the source does (normalizer included, through kvshrink's key).
std::string gguf_pre_for(const VocabSpec& v, const Tokenizer& ref) {
  if (!v.explicit_pipeline) return v.pre;
  // The name the pipeline's structure gives first (a small vocabulary may tokenize the probe
  // alike under several names), then the others.
  std::vector<std::string> cands;
  if (std::string k = known_pre_name(v); !k.empty()) cands.push_back(k);
  for (const char* c : {"smollm", "llama-bpe", "qwen2", "gpt-2"})
    if (std::find(cands.begin(), cands.end(), c) == cands.end()) cands.push_back(c);
  std::string tried;
  for (const std::string& cand : cands) {
    try {
      const std::string diff = first_tokenization_difference(ref, *through_gguf(v, cand));
      if (diff.empty()) return cand;
      tried += fmt::format("\n  as '{}': {}", cand, diff);
    } catch (const Error& e) {
      tried += fmt::format("\n  as '{}': {}", cand, e.what());
    }
  }
  fail("{}: this tokenizer's pre-tokenizer matches none that GGUF can name (smollm, llama-bpe, qwen2, gpt-2):{}",
       v.source, tried);
}

}  // namespace

void write_vocab_gguf(GgufWriter& w, const VocabSpec& v) {
  std::string pre = v.pre;
  if (v.kind == TokenizerKind::BPE && v.explicit_pipeline) {
    const auto ref = Tokenizer::create(v);
    pre = gguf_pre_for(v, *ref);
  }
  put_vocab(w, v, pre);
}

void write_hf_tokenizer_files(AtomicDir& out, const VocabSpec& v, const std::string& tokenizer_json_src) {
  namespace fs = std::filesystem;
  const bool spm = v.kind == TokenizerKind::SPM;
  out.write_file("tokenizer_config.json", hf_tokenizer_config_json(v));
  if (spm) out.write_file("tokenizer.model", sentencepiece_model_proto(v));
  bool generated = false;
  if (!tokenizer_json_src.empty()) {
    require_regular_file(tokenizer_json_src, "the tokenizer.json to copy");
    out.write_file("tokenizer.json", tok::read_file(tokenizer_json_src));
  } else if (!spm) {
    out.write_file("tokenizer.json", hf_tokenizer_json(v));
    generated = true;
  } else if (!v.unigram) {
    // Optional for SentencePiece vocabularies (tokenizer.model holds them exactly): skipped when
    // tokenizer.json cannot hold the vocabulary (a token that is not valid UTF-8).
    std::string text;
    try {
      text = hf_tokenizer_json(v);
    } catch (const Error&) {
    }
    if (!text.empty()) {
      out.write_file("tokenizer.json", text);
      generated = true;
    }
  }
  // What a reader of the folder gets must tokenize like the source.
  const auto ref = Tokenizer::create(v);
  auto differs = [&] {
    return first_tokenization_difference(*ref, *Tokenizer::create(vocab_from_hf_dir(out.staging())));
  };
  std::string diff = differs();
  if (!diff.empty() && spm && generated) {
    // Merges derived from scores can differ from score-driven merging where scores tie;
    // tokenizer.model (exact) is then the tokenizer of the folder.
    fs::remove(out.path("tokenizer.json"));
    diff = differs();
  }
  if (!diff.empty())
    fail("{}: the tokenizer written does not tokenize like the model's own: {}", out.dir(), diff);
}

}  // namespace kvs
