#include "eval/inspect/kvc_positions.h"

#include <cstring>

#include "core/error.h"
#include "core/mapped_file.h"
#include "kvcache/cache_file.h"

namespace kvs::inspect {

namespace {

// Bounds-checked little-endian reads over [0, n).
class Cursor {
 public:
  Cursor(const uint8_t* d, size_t n, const std::string& name) : d_(d), n_(n), name_(name) {}
  const uint8_t* take(size_t k, const char* what) {
    if (k > n_ - pos_) fail("{}: truncated compressed-context file (reading {} at byte {})", name_, what, pos_);
    const uint8_t* p = d_ + pos_;
    pos_ += k;
    return p;
  }
  template <typename T>
  T get(const char* what) {
    T v;
    std::memcpy(&v, take(sizeof(T), what), sizeof(T));
    return v;
  }
  size_t pos() const { return pos_; }

 private:
  const uint8_t* d_;
  size_t n_, pos_ = 0;
  const std::string& name_;
};

}  // namespace

KeptMap KvcPositions::kept(int32_t n_tokens) const {
  KeptMap m(n_layer, n_head_kv, n_tokens);
  for (int l = 0; l < n_layer; ++l)
    for (int h = 0; h < n_head_kv; ++h)
      for (int32_t p : heads[static_cast<size_t>(l) * n_head_kv + h])
        if (p >= 0 && p < n_tokens) m.set(l, h, p);
  return m;
}

KvcPositions read_kvc_positions(const uint8_t* data, size_t size, const std::string& name) {
  KvcPositions out;
  out.header = parse_cache_header(data, size, name);  // magic, version, header JSON and its fields
  const CacheHeaderLayout h = check_cache_header(out.header, name);
  if (size < 8 + 16) fail("{}: too short for a compressed-context file ({} bytes)", name, size);
  uint64_t stored;
  std::memcpy(&stored, data + size - 8, 8);
  if (cache_file_checksum(data, size - 8) != stored) fail("{}: checksum mismatch: the file is corrupted or truncated", name);
  Cursor c(data, size - 8, name);
  c.take(8, "magic and version");
  const uint64_t hlen = c.get<uint64_t>("header length");
  c.take(static_cast<size_t>(hlen), "header");
  out.n_layer = h.n_layer;
  out.n_head_kv = h.n_head_kv;
  out.n_past = h.n_past;
  const size_t row = static_cast<size_t>(h.head_dim) * (h.dtype == DType::F16 ? 2 : 4);
  if (static_cast<uint64_t>(h.n_layer) * h.n_head_kv * 5 > size - 8 - c.pos())
    fail("{}: truncated compressed-context file: {} heads need at least {} bytes", name, int64_t{h.n_layer} * h.n_head_kv,
         uint64_t{5} * h.n_layer * h.n_head_kv);
  out.heads.resize(static_cast<size_t>(h.n_layer) * h.n_head_kv);
  uint64_t total = 0;
  for (int layer = 0; layer < h.n_layer; ++layer)
    for (int kvh = 0; kvh < h.n_head_kv; ++kvh) {
      const uint32_t len = c.get<uint32_t>("head length");
      if (len > static_cast<uint32_t>(h.n_past))
        fail("{}: head ({}, {}) holds {} tokens, more than n_past = {}", name, layer, kvh, len, h.n_past);
      total += len;
      if (total > h.slots) fail("{}: the heads hold more than the header's {} slots", name, h.slots);
      std::vector<int32_t>& pos = out.heads[static_cast<size_t>(layer) * h.n_head_kv + kvh];  // [len]
      pos.resize(len);
      const uint8_t* pb = c.take(size_t{len} * sizeof(int32_t), "positions");
      if (len > 0) std::memcpy(pos.data(), pb, size_t{len} * sizeof(int32_t));
      for (uint32_t i = 0; i < len; ++i) {
        if (pos[i] < 0 || pos[i] >= h.n_past)
          fail("{}: head ({}, {}) slot {} has position {}, outside 0..{}", name, layer, kvh, i, pos[i], h.n_past - 1);
        if (i > 0 && pos[i] <= pos[i - 1]) fail("{}: head ({}, {}) positions are not increasing", name, layer, kvh);
      }
      const uint8_t has_mass = c.get<uint8_t>("mass flag");
      if (has_mass > 1) fail("{}: head ({}, {}) has mass flag {} (expected 0 or 1)", name, layer, kvh, has_mass);
      if (has_mass) c.take(size_t{len} * sizeof(float), "mass");
      c.take(size_t{len} * row, "K rows");
      c.take(size_t{len} * row, "V rows");
    }
  if (c.pos() != size - 8) fail("{}: {} unexpected trailing bytes", name, size - 8 - c.pos());
  if (total != h.slots) fail("{}: the heads hold {} slots, the header says {}", name, total, h.slots);
  return out;
}

KvcPositions read_kvc_positions(const std::string& path) {
  MappedFile f(path);
  return read_kvc_positions(f.data(), f.size(), path);
}

}  // namespace kvs::inspect
