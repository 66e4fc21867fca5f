// What the public-API tests (test_api) share; they link libkvshrink.so and see include/kvshrink only.
#pragma once
#include <fstream>
#include <sstream>
#include <string>

namespace kvs_api_test {

// The README's needle example context (eval/examples/needle_context.txt).
inline std::string needle_context() {
  std::ifstream in(std::string(KVS_SOURCE_DIR) + "/eval/examples/needle_context.txt");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace kvs_api_test
