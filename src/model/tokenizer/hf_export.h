// Writing a vocabulary out in another format: the Hugging Face tokenizer files of a vocabulary
// read from anywhere (GGUF -> HF needs no source tokenizer.json), what a GGUF file must carry
// beyond tokenizer.ggml.*, and the probe that checks a converted tokenizer against its source.
//
//   auto tok = Tokenizer::create(vocab_from_gguf(*g));
//   std::string tj = hf_tokenizer_json(tok->spec());          // complete tokenizer.json
//   std::string tc = hf_tokenizer_config_json(tok->spec());   // tokenizer_config.json
#pragma once
#include <string>
#include <vector>

#include "model/tokenizer/tokenizer.h"

namespace kvs {

// The HF tokenizer.json "normalizer" value (JSON text) of normalizer steps; "null" for none.
// StripExtraSpaces becomes two regex Replace steps with the same effect.
std::string normalizer_json_text(const std::vector<NormalizerStep>& steps);

// SPM vocabularies: whether the pipeline puts U+2581 before the text (a Prepend normalizer, a
// Metaspace pre-tokenizer that prepends, or add_space_prefix for derived pipelines).
bool spm_adds_space_prefix(const VocabSpec& v);
// The normalizer steps of `v` that tokenizer.ggml.* cannot express, stored by kvshrink under
// kGgufNormalizerKey: BPE: all of them; SPM: those other than the ' ' -> U+2581 replacement and
// the U+2581 prefix (which GGUF's "llama" model implies), with remove_extra_whitespaces.
std::vector<NormalizerStep> gguf_extra_normalizers(const VocabSpec& v);

// SentencePiece-style vocabularies in the other representation: scores for a merges-only
// vocabulary (HF tokenizer.json; a token's score is minus the rank of the first merge making
// it), merges for a scores-only one (GGUF, tokenizer.model; every split of a token into two
// tokens, ordered by the token's score, highest first).
std::vector<float> spm_scores_from_merges(const VocabSpec& v);
std::vector<std::string> spm_merges_from_scores(const VocabSpec& v);

// Complete tokenizer.json for a prepared vocabulary (Tokenizer::spec()): byte-level BPE, or
// SentencePiece-style BPE with byte fallback. Throws kvs::Error for what tokenizer.json cannot
// express (a unigram model, tokens that are not valid UTF-8).
std::string hf_tokenizer_json(const VocabSpec& v);
// tokenizer_config.json: add_bos/add_eos, special tokens (null when absent), chat template.
std::string hf_tokenizer_config_json(const VocabSpec& v);

// Texts that exercise tokenizers (ASCII, contractions, digit runs, whitespace runs, NFD and NFC
// accents, Hangul jamo, CJK, emoji, code) and the first on which `a` and `b` give different ids,
// with and without special tokens parsed ("" when they agree on all of them).
const std::vector<std::string>& tokenizer_probe_texts();
std::string first_tokenization_difference(const Tokenizer& a, const Tokenizer& b);

}  // namespace kvs
