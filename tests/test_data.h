// The data the tests read lives in tests/data (what and where from: tests/data/PROVENANCE.md); a
// clone needs nothing beside it. test_data("eval") is a folder in the layout `kvshrink eval --data`
// reads (its NIAH and RULER parts are the shipped default data in eval/data).
#pragma once
#include <string>

namespace kvs::test {

inline std::string test_data(const std::string& rel) { return std::string(KVS_SOURCE_DIR) + "/tests/data/" + rel; }

}  // namespace kvs::test
