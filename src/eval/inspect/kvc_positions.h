// The kept positions of a .kvc file without loading its K/V rows: what `kvshrink inspect` needs,
// in memory proportional to the positions (a cache of many GB is walked through a read-only map).
// The file is walked and checked by load_cache's own reader (kvcache/cache_file.h,
// walk_cache_file: header fields, checksum, per head: length <= n_past, positions in 0..n_past-1
// and increasing, mass flag and values, every byte accounted for, the slot total); K/V values are
// skipped, not read. Errors are kvs::Error naming the file and head.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "eval/inspect/kept_map.h"

namespace kvs::inspect {

struct KvcPositions {
  nlohmann::json header;
  int n_layer = 0, n_head_kv = 0;
  int32_t n_past = 0;
  std::vector<std::vector<int32_t>> heads;  // [n_layer * n_head_kv] positions, layer-major
  // Positions < n_tokens as a KeptMap.
  KeptMap kept(int32_t n_tokens) const;
};

KvcPositions read_kvc_positions(const std::string& path);
KvcPositions read_kvc_positions(const uint8_t* data, size_t size, const std::string& name);

}  // namespace kvs::inspect
