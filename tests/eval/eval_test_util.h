// Shared by the eval tests: the stories260K model (its tokenizer fits the generated prompts) and
// the shared data directory. shared_path, stories_gguf and TempDir come from runtime/test_util.h.
#pragma once
#include <memory>
#include <string>

#include "model/model.h"
#include "runtime/test_util.h"

namespace kvs::test {

inline std::string data_dir() { return test_data("eval"); }

inline const Model& stories() {
  static std::unique_ptr<Model> m = Model::load(stories_gguf());
  return *m;
}

}  // namespace kvs::test
