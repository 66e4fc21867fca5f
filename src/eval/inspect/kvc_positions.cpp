#include "eval/inspect/kvc_positions.h"

#include "core/error.h"
#include "core/mapped_file.h"
#include "kvcache/cache_file.h"

namespace kvs::inspect {

KeptMap KvcPositions::kept(int32_t n_tokens) const {
  KeptMap m(n_layer, n_head_kv, n_tokens);
  for (int l = 0; l < n_layer; ++l)
    for (int h = 0; h < n_head_kv; ++h)
      for (int32_t p : heads[static_cast<size_t>(l) * n_head_kv + h])
        if (p >= 0 && p < n_tokens) m.set(l, h, p);
  return m;
}

KvcPositions read_kvc_positions(const uint8_t* data, size_t size, const std::string& name) {
  // The file's framing and checks are load_cache's (walk_cache_file); only the positions are kept.
  KvcPositions out;
  out.header = walk_cache_file(
      data, size, name,
      [&](const CacheHeaderLayout& h) {
        out.n_layer = h.n_layer;
        out.n_head_kv = h.n_head_kv;
        out.n_past = h.n_past;
        out.heads.resize(static_cast<size_t>(h.n_layer) * h.n_head_kv);
      },
      [&](const CacheFileHead& head) {
        out.heads[static_cast<size_t>(head.layer) * out.n_head_kv + head.kvh].assign(head.pos.begin(), head.pos.end());
      });
  return out;
}

KvcPositions read_kvc_positions(const std::string& path) {
  MappedFile f(path);
  return read_kvc_positions(f.data(), f.size(), path);
}

}  // namespace kvs::inspect
