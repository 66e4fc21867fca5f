// Saving and loading a (compressed) KV cache: `kvshrink compress ... -o ctx.kvc`, then
// `kvshrink ask ctx.kvc "question"` without the original text.
//
// Format, version 1, little-endian:
//   "KVSC" | u32 version | u64 header bytes | header JSON (layout, n_past, and the caller's
//   metadata: model fingerprint and name, press and parameters, ...)
//   per (layer, kv head), layer-major: u32 len | i32 pos[len] | u8 has_mass | f32 mass[len]?
//   | K rows [len][head_dim] | V rows [len][head_dim] (in the header's dtype)
//   | u64 FNV-1a checksum of every preceding byte.
// Header JSON fields: n_layer, n_head_kv, head_dim (integers 1..4096), dtype ("f32" | "f16" | "q8_0" | "q4_0";
// quantised rows are GGUF blocks of 32 along head_dim, head_dim a multiple of 32),
// n_past (integer 0..2^30), slots (integer, the sum of the head lengths) — then whatever the
// caller stored (see runtime/kvc_meta.h); optional keep_chosen (number in [0, 1] or null) and
// press_state (object). Unknown fields are kept and ignored.
// Loading validates before trusting or allocating anything: magic, version, header size and
// nesting, every header field's type and range (check_cache_header), the checksum, the shape
// against the model's, then per head: length <= n_past, positions in 0..n_past-1 and increasing,
// mass flag 0/1, masses finite and > 0, K/V values finite, and the slot total equal to `slots`.
// Every refusal is a kvs::Error naming the file and the field or head.
#pragma once
#include <functional>
#include <span>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "kvcache/kv_cache.h"

namespace kvs {

constexpr uint32_t kCacheFileVersion = 1;     // written
constexpr uint32_t kCacheFileMinVersion = 1;  // oldest read

// Limits of a header (larger values are refused before anything is allocated).
constexpr int kMaxCacheLayers = 4096, kMaxCacheKvHeads = 4096, kMaxCacheHeadDim = 4096;
constexpr int32_t kMaxCachePositions = 1 << 30;          // n_past
constexpr uint64_t kMaxCacheHeaderBytes = uint64_t{64} << 20;

// The layout fields of a validated header.
struct CacheHeaderLayout {
  int n_layer = 0, n_head_kv = 0, head_dim = 0;
  DType dtype = DType::F32;
  int32_t n_past = 0;
  uint64_t slots = 0;
  KvLayout layout(int page_tokens = 32) const;  // the KvLayout the file was written with
};
// Checks the header's own fields (types, ranges, slots <= n_layer * n_head_kv * n_past); throws
// "FILE: header field 'n_past' must be an integer, got string" and the like.
CacheHeaderLayout check_cache_header(const nlohmann::json& header, const std::string& file);

// Writes `cache` with `meta` (any JSON object; the layout and n_past are added) atomically.
void save_cache(const std::string& path, const KvCache& cache, const nlohmann::json& meta);
// The same file's bytes in memory (a shared context store writes them to Redis).
std::vector<uint8_t> encode_cache(const KvCache& cache, const nlohmann::json& meta);

struct LoadedCache {
  nlohmann::json meta;  // everything the header holds
  std::unique_ptr<KvCache> cache;
};

// Reads and validates the header only (to check the model before allocating); does not read
// the body or verify the checksum.
nlohmann::json read_cache_header(const std::string& path);
// Loads into pages of `pool`, converting rows to `layout.dtype` if the file's differs. The
// file's n_layer / n_head_kv / head_dim must equal `layout`'s.
LoadedCache load_cache(const std::string& path, PagePool& pool, const KvLayout& layout);

// The same from bytes in memory (fuzzing; a server reading uploads); `name` is used in messages.
nlohmann::json parse_cache_header(const uint8_t* data, size_t n, const std::string& name);
LoadedCache load_cache(const uint8_t* data, size_t n, const std::string& name, PagePool& pool, const KvLayout& layout);
// One head of a .kvc body as walk_cache_file hands it over: positions [len] (checked: in
// 0..n_past-1, increasing), merge mass [len] or empty (checked: finite, > 0), and the K and V rows
// [len][head_dim] in the file's dtype, pointing into the file (values not checked).
struct CacheFileHead {
  int layer = 0, kvh = 0;
  std::span<const int32_t> pos;
  std::span<const float> mass;
  const uint8_t* k = nullptr;
  const uint8_t* v = nullptr;
};
// The one reader of the .kvc framing, for load_cache and for readers that need less (inspect's
// positions): length, header (parsed and checked), checksum, then on_header(layout) once and
// on_head for every (layer, KV head) in order, with every byte accounted for and the slot total
// matching the header. Returns the header. Errors name the file (`name`) and the head.
nlohmann::json walk_cache_file(const uint8_t* data, size_t n, const std::string& name,
                               const std::function<void(const CacheHeaderLayout&)>& on_header,
                               const std::function<void(const CacheFileHead&)>& on_head);
// The trailing checksum of a file whose other bytes are data[0..n).
uint64_t cache_file_checksum(const void* data, size_t n);

}  // namespace kvs
