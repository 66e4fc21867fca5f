#include "kvcache/cache_file.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/atomic_output.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/hash.h"
#include "core/mapped_file.h"
#include "kernels/ops.h"
#include "kvcache/header_fields.h"

namespace kvs {
namespace {

constexpr char kMagic[4] = {'K', 'V', 'S', 'C'};

class Writer {
 public:
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    buf_.insert(buf_.end(), b, b + n);
  }
  template <typename T>
  void put(T v) {
    bytes(&v, sizeof v);
  }
  std::vector<uint8_t>& buf() { return buf_; }

 private:
  std::vector<uint8_t> buf_;
};

class Reader {
 public:
  Reader(const uint8_t* d, size_t n, const std::string& path) : d_(d), n_(n), path_(path) {}
  const uint8_t* take(size_t k, const char* what) {
    if (k > n_ - pos_) fail("{}: truncated compressed-context file: {} needs {} bytes at offset {}, {} left", path_, what, k, pos_, n_ - pos_);
    const uint8_t* p = d_ + pos_;
    pos_ += k;
    return p;
  }
  template <typename T>
  T get(const char* what) {
    T v;
    std::memcpy(&v, take(sizeof v, what), sizeof v);
    return v;
  }
  size_t pos() const { return pos_; }

 private:
  const uint8_t* d_;
  size_t n_, pos_ = 0;
  const std::string& path_;
};

// Nesting deeper than this in a header is refused while parsing (a crafted "[[[[..." must not
// exhaust the stack of anything that walks the JSON later).
constexpr int kMaxHeaderDepth = 64;

nlohmann::json parse_header(Reader& r, const std::string& path) {
  const uint8_t* m = r.take(4, "magic");
  if (std::memcmp(m, kMagic, 4) != 0) fail("{}: not a kvshrink compressed-context file (bad magic)", path);
  const uint32_t ver = r.get<uint32_t>("version");
  if (ver < kCacheFileMinVersion || ver > kCacheFileVersion)
    fail("{}: compressed-context file version {} is not supported (this build reads {}..{})", path, ver,
         kCacheFileMinVersion, kCacheFileVersion);
  const uint64_t hlen = r.get<uint64_t>("header length");
  if (hlen > kMaxCacheHeaderBytes) fail("{}: header length {} exceeds the limit of {} bytes", path, hlen, kMaxCacheHeaderBytes);
  const uint8_t* h = r.take(static_cast<size_t>(hlen), "header");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(h, h + hlen, [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
      if (depth > kMaxHeaderDepth) fail("{}: header JSON is nested deeper than {} levels", path, kMaxHeaderDepth);
      return true;
    });
  } catch (const nlohmann::json::exception& e) {
    fail("{}: corrupt header JSON: {}", path, e.what());
  }
  check_cache_header(j, path);
  return j;
}

// A K or V value that is NaN or infinite would poison every attention that reads it.
bool all_finite_f32(const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}

// The same for n_rows rows in their stored type (row_bytes each, any alignment), without
// converting them: F32 and F16 values are checked one by one; Q8_0 and Q4_0 values are int x the
// block's F16 scale, finite exactly when the scale is (the scale is each block's first 2 bytes).
bool rows_finite(DType t, const uint8_t* rows, size_t n_rows, size_t row_bytes) {
  const uint8_t* end = rows + n_rows * row_bytes;
  auto f16_finite = [](const uint8_t* p) {
    uint16_t b;
    std::memcpy(&b, p, 2);
    return (b & 0x7C00u) != 0x7C00u;
  };
  switch (t) {
    case DType::F32:
      for (const uint8_t* p = rows; p < end; p += 4) {
        float x;
        std::memcpy(&x, p, 4);
        if (!std::isfinite(x)) return false;
      }
      return true;
    case DType::F16:
      for (const uint8_t* p = rows; p < end; p += 2)
        if (!f16_finite(p)) return false;
      return true;
    case DType::Q8_0:
    case DType::Q4_0: {
      const size_t bs = static_cast<size_t>(dtype_info(t).type_size);
      for (const uint8_t* p = rows; p < end; p += bs)
        if (!f16_finite(p)) return false;
      return true;
    }
    default: KVS_ASSERT(false); return false;
  }
}

}  // namespace

std::vector<uint8_t> encode_cache(const KvCache& cache, const nlohmann::json& meta) {
  const KvLayout& l = cache.layout();
  nlohmann::json h = meta.is_object() ? meta : nlohmann::json::object();
  h["n_layer"] = l.n_layer;
  h["n_head_kv"] = l.n_head_kv;
  h["head_dim"] = l.head_dim;
  h["dtype"] = std::string(dtype_name(l.dtype));  // f32, f16, q8_0, q4_0
  h["n_past"] = cache.n_past();
  h["slots"] = cache.total_slots();
  const std::string hs = h.dump();
  Writer w;
  w.bytes(kMagic, 4);
  w.put<uint32_t>(kCacheFileVersion);
  w.put<uint64_t>(hs.size());
  w.bytes(hs.data(), hs.size());
  const size_t rb = l.row_bytes();
  for (int layer = 0; layer < l.n_layer; ++layer) {
    for (int kvh = 0; kvh < l.n_head_kv; ++kvh) {
      const HeadCache& hc = cache.head(layer, kvh);
      w.put<uint32_t>(static_cast<uint32_t>(hc.len()));
      w.bytes(hc.pos.data(), hc.pos.size() * sizeof(int32_t));
      w.put<uint8_t>(hc.mass.empty() ? 0 : 1);
      if (!hc.mass.empty()) w.bytes(hc.mass.data(), hc.mass.size() * sizeof(float));
      for (int32_t s = 0; s < hc.len(); ++s) w.bytes(cache.k_row(layer, kvh, s), rb);
      for (int32_t s = 0; s < hc.len(); ++s) w.bytes(cache.v_row(layer, kvh, s), rb);
    }
  }
  w.put<uint64_t>(fnv1a(kFnv1aInit, w.buf().data(), w.buf().size()));
  return std::move(w.buf());
}

void save_cache(const std::string& path, const KvCache& cache, const nlohmann::json& meta) {
  const std::vector<uint8_t> bytes = encode_cache(cache, meta);
  write_file_atomic(path, bytes.data(), bytes.size());  // unique temporary, fsync, rename
}

CacheHeaderLayout check_cache_header(const nlohmann::json& j, const std::string& path) {
  const HeaderFields f(j, path);
  CacheHeaderLayout h;
  h.n_layer = static_cast<int>(f.integer("n_layer", 1, kMaxCacheLayers));
  h.n_head_kv = static_cast<int>(f.integer("n_head_kv", 1, kMaxCacheKvHeads));
  h.head_dim = static_cast<int>(f.integer("head_dim", 1, kMaxCacheHeadDim));
  const std::string dt = f.string("dtype");
  if (dt == "f32") h.dtype = DType::F32;
  else if (dt == "f16") h.dtype = DType::F16;
  else if (dt == "q8_0") h.dtype = DType::Q8_0;
  else if (dt == "q4_0") h.dtype = DType::Q4_0;
  else f.bad("dtype", fmt::format("must be \"f32\", \"f16\", \"q8_0\" or \"q4_0\", got '{}'", dt.substr(0, 32)));
  if (h.head_dim % dtype_info(h.dtype).block_size != 0)
    f.bad("head_dim", fmt::format("{} is not a multiple of {}'s block of {}", h.head_dim, dt,
                                  dtype_info(h.dtype).block_size));
  h.n_past = static_cast<int32_t>(f.integer("n_past", 0, kMaxCachePositions));
  // Each head holds distinct positions in [0, n_past), so at most n_past slots.
  const int64_t max_slots = int64_t{h.n_layer} * h.n_head_kv * h.n_past;
  h.slots = static_cast<uint64_t>(f.integer("slots", 0, max_slots));
  // Optional fields with a fixed meaning (written by newer code; checked when present).
  f.number_or_null("keep_chosen", 0.0, 1.0);
  f.object_if_present("press_state");
  return h;
}

KvLayout CacheHeaderLayout::layout(int page_tokens) const {
  KvLayout l;
  l.n_layer = n_layer;
  l.n_head_kv = n_head_kv;
  l.head_dim = head_dim;
  l.dtype = dtype;
  l.page_tokens = page_tokens;
  return l;
}

uint64_t cache_file_checksum(const void* data, size_t n) { return fnv1a(kFnv1aInit, data, n); }

nlohmann::json parse_cache_header(const uint8_t* data, size_t n, const std::string& name) {
  Reader r(data, n, name);
  return parse_header(r, name);
}

nlohmann::json read_cache_header(const std::string& path) {
  MappedFile f(path);
  return parse_cache_header(f.data(), f.size(), path);
}

nlohmann::json walk_cache_file(const uint8_t* data, size_t size, const std::string& path,
                               const std::function<void(const CacheHeaderLayout&)>& on_header,
                               const std::function<void(const CacheFileHead&)>& on_head) {
  if (size < 8 + 16) fail("{}: too short for a compressed-context file ({} bytes)", path, size);
  Reader r(data, size - 8, path);
  nlohmann::json meta = parse_header(r, path);
  uint64_t stored;
  std::memcpy(&stored, data + size - 8, 8);
  if (cache_file_checksum(data, size - 8) != stored) fail("{}: checksum mismatch: the file is corrupted or truncated", path);
  const CacheHeaderLayout h = check_cache_header(meta, path);
  const int nl = h.n_layer, nh = h.n_head_kv;
  on_header(h);
  // Every head takes at least its length and mass flag (5 bytes): refuse a body too short for the
  // header's shape before anything is allocated for it.
  const size_t body = size - 8 - r.pos();
  if (static_cast<uint64_t>(nl) * nh * 5 > body)
    fail("{}: truncated compressed-context file: {} heads need at least {} bytes, the body has {}", path,
         int64_t{nl} * nh, uint64_t{5} * nl * nh, body);
  const size_t frb = dtype_row_bytes(h.dtype, h.head_dim);
  std::vector<int32_t> pos;
  std::vector<float> mass;
  uint64_t total = 0;
  for (int layer = 0; layer < nl; ++layer) {
    for (int kvh = 0; kvh < nh; ++kvh) {
      const uint32_t len = r.get<uint32_t>("head length");
      if (len > static_cast<uint32_t>(h.n_past))
        fail("{}: head ({}, {}) holds {} tokens, more than n_past = {}", path, layer, kvh, len, h.n_past);
      total += len;
      if (total > h.slots) fail("{}: the heads hold more than the header's {} slots", path, h.slots);
      const uint8_t* pb = r.take(len * sizeof(int32_t), "positions");  // [len]
      pos.resize(len);
      if (len > 0) std::memcpy(pos.data(), pb, len * sizeof(int32_t));  // (an empty vector's data() may be null)
      for (uint32_t i = 0; i < len; ++i) {
        if (pos[i] < 0 || pos[i] >= h.n_past)
          fail("{}: head ({}, {}) slot {} has position {}, outside 0..n_past-1 = 0..{}", path, layer, kvh, i, pos[i],
               h.n_past - 1);
        if (i > 0 && pos[i] <= pos[i - 1]) fail("{}: head ({}, {}) positions are not increasing", path, layer, kvh);
      }
      const uint8_t has_mass = r.get<uint8_t>("mass flag");
      if (has_mass > 1) fail("{}: head ({}, {}) has mass flag {} (expected 0 or 1)", path, layer, kvh, has_mass);
      mass.clear();
      if (has_mass) {
        const uint8_t* mb = r.take(len * sizeof(float), "mass");  // [len]
        mass.resize(len);
        if (len > 0) std::memcpy(mass.data(), mb, len * sizeof(float));
        for (uint32_t i = 0; i < len; ++i)
          if (!(std::isfinite(mass[i]) && mass[i] > 0))
            fail("{}: head ({}, {}) slot {} has merge mass {} (expected a finite number > 0)", path, layer, kvh, i, mass[i]);
      }
      CacheFileHead head;
      head.layer = layer;
      head.kvh = kvh;
      head.pos = pos;
      head.mass = mass;
      head.k = r.take(len * frb, "K rows");  // [len][head_dim]
      head.v = r.take(len * frb, "V rows");  // [len][head_dim]
      on_head(head);
    }
  }
  if (r.pos() != size - 8) fail("{}: {} unexpected trailing bytes", path, size - 8 - r.pos());
  if (total != h.slots) fail("{}: the heads hold {} slots, the header says {}", path, total, h.slots);
  return meta;
}

LoadedCache load_cache(const uint8_t* data, size_t size, const std::string& path, PagePool& pool, const KvLayout& layout) {
  LoadedCache out;
  CacheHeaderLayout h;
  size_t frb = 0;
  std::vector<float> kf, vf;  // [len][head_dim]
  std::vector<uint8_t> row;   // one row in the file's type
  out.meta = walk_cache_file(
      data, size, path,
      [&](const CacheHeaderLayout& hl) {
        h = hl;
        if (h.n_layer != layout.n_layer || h.n_head_kv != layout.n_head_kv || h.head_dim != layout.head_dim)
          fail("{}: cache shape {} layers x {} KV heads x {} dims does not match the model's {} x {} x {}", path, h.n_layer,
               h.n_head_kv, h.head_dim, layout.n_layer, layout.n_head_kv, layout.head_dim);
        frb = dtype_row_bytes(h.dtype, h.head_dim);
        out.cache = std::make_unique<KvCache>(pool, layout);
      },
      [&](const CacheFileHead& head) {
        const int hd = h.head_dim;
        const size_t len = head.pos.size();
        const float* mass = head.mass.empty() ? nullptr : head.mass.data();
        // A file of the cache's own type: its rows are copied as they are (the blocks bit for bit,
        // no dequantise-requantise pass; the values checked in place).
        if (h.dtype == layout.dtype) {
          if (!rows_finite(h.dtype, head.k, len, frb) || !rows_finite(h.dtype, head.v, len, frb))
            fail("{}: head ({}, {}) holds a K or V value that is not finite", path, head.layer, head.kvh);
          if (!out.cache->load_head_rows(head.layer, head.kvh, head.k, head.v, head.pos.data(), static_cast<int32_t>(len),
                                         mass))
            fail("{}: the KV memory cap is too small to load this cache", path);
          return;
        }
        // Rows to float, then to the cache's type: a file of another type is converted — F16 into
        // a Q8_0 cache is quantised, Q8_0 into F16 dequantised. Rows are copied out first: in the
        // file they may sit at any byte offset.
        kf.resize(len * hd);
        vf.resize(kf.size());
        row.resize(frb);
        for (size_t s = 0; s < len; ++s) {
          std::memcpy(row.data(), head.k + s * frb, frb);
          kernels::dequantize_row(h.dtype, row.data(), &kf[s * hd], hd);
          std::memcpy(row.data(), head.v + s * frb, frb);
          kernels::dequantize_row(h.dtype, row.data(), &vf[s * hd], hd);
        }
        if (!all_finite_f32(kf.data(), kf.size()) || !all_finite_f32(vf.data(), vf.size()))
          fail("{}: head ({}, {}) holds a K or V value that is not finite", path, head.layer, head.kvh);
        if (!out.cache->load_head(head.layer, head.kvh, kf.data(), vf.data(), head.pos.data(), static_cast<int32_t>(len),
                                  mass))
          fail("{}: the KV memory cap is too small to load this cache", path);
      });
  out.cache->set_n_past(h.n_past);
  return out;
}

LoadedCache load_cache(const std::string& path, PagePool& pool, const KvLayout& layout) {
  MappedFile f(path);
  return load_cache(f.data(), f.size(), path, pool, layout);
}

}  // namespace kvs
