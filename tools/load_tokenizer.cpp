#include "load_tokenizer.h"

#include <filesystem>

#include "core/error.h"
#include "core/paths.h"
#include "model/gguf/gguf.h"

namespace kvs::cli {

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) fail("{}: no such file or directory", path);
  require_regular_if_present(path, "a tokenizer (GGUF file or Hugging Face directory)", /*dir_ok=*/true);
  if (fs::is_directory(path, ec)) return Tokenizer::create(vocab_from_hf_dir(path));
  const std::string name = fs::path(path).filename().string();
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json", "tokenizer.model"})
    if (name == f) return Tokenizer::create(vocab_from_hf_dir(fs::path(path).parent_path().string()));
  const auto g = GgufFile::open(path);
  return Tokenizer::create(vocab_from_gguf(*g));
}

}  // namespace kvs::cli
