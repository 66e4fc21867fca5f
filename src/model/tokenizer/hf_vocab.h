// Readers for the tokenizer files of a HF model directory (internal to the tokenizer module).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer/tokenizer.h"

namespace kvs::tok {

// HF tokenizers' tokenizer.json (model.type BPE). `name` is used in error messages.
VocabSpec vocab_from_tokenizer_json(std::string_view json_text, const std::string& name);
// A tokenizer.json "normalizer" value (JSON text; "null" gives no steps). `name` is used in errors.
std::vector<NormalizerStep> normalizer_from_json_text(std::string_view text, const std::string& name);
// SentencePiece ModelProto (tokenizer.model).
VocabSpec vocab_from_sp_model(std::string_view bytes, const std::string& name);

// Whole file into memory; throws kvs::Error naming the path.
std::string read_file(const std::string& path);

}  // namespace kvs::tok
