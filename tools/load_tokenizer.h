// A model's tokenizer without its weights: `tokenize`, `detokenize` and `inspect` need no more.
#pragma once
#include <memory>
#include <string>

#include "model/tokenizer/tokenizer.h"

namespace kvs::cli {

// path: a GGUF file (its tokenizer.ggml.* keys; the tensors are not read), a Hugging Face
// directory holding tokenizer.json or tokenizer.model (+ tokenizer_config.json; no config.json or
// weights needed), or one of those files inside such a directory. Throws kvs::Error naming the
// path.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);

}  // namespace kvs::cli
