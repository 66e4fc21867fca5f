#include "model/hf/safetensors_writer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>
#include <unordered_set>

#include "core/error.h"
#include "core/atomic_output.h"

namespace kvs {
namespace {

using json = nlohmann::json;

// JSON string literal (quoted, escaped); throws kvs::Error for invalid UTF-8.
std::string quote(const std::string& s, std::string_view what) {
  try {
    return json(s).dump();
  } catch (const json::exception&) {
    fail("safetensors writer: {} is not valid UTF-8", what);
  }
}

struct Plan {
  std::string header;          // padded JSON
  std::vector<size_t> order;   // data order (indices into the input)
};

Plan plan(const std::vector<SafetensorsTensorIn>& tensors, const SafetensorsMetadata& metadata) {
  std::unordered_set<std::string> names;
  for (const auto& t : tensors) {
    if (t.name == "__metadata__") fail("safetensors writer: '__metadata__' is reserved and cannot name a tensor");
    if (!names.insert(t.name).second) fail("safetensors writer: duplicate tensor '{}'", t.name);
    unsigned __int128 nel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) fail("safetensors writer: tensor '{}' has negative dimension {}", t.name, d);
      nel *= static_cast<uint64_t>(d);
      if (nel > (static_cast<unsigned __int128>(1) << 62)) fail("safetensors writer: tensor '{}' is too large", t.name);
    }
    const unsigned __int128 bits = nel * static_cast<unsigned>(st_dtype_bits(t.dtype));
    if (bits % 8 != 0 || bits / 8 != t.nbytes)
      fail("safetensors writer: tensor '{}' ({} [{}]) needs {} bits, got {} bytes", t.name, st_dtype_name(t.dtype),
           fmt::join(t.shape, ", "), static_cast<uint64_t>(bits), t.nbytes);
    if (t.data == nullptr && t.nbytes > 0) fail("safetensors writer: tensor '{}' has no data", t.name);
  }
  Plan p;
  p.order.resize(tensors.size());
  std::iota(p.order.begin(), p.order.end(), size_t{0});
  std::stable_sort(p.order.begin(), p.order.end(), [&](size_t a, size_t b) {
    return st_dtype_bits(tensors[a].dtype) > st_dtype_bits(tensors[b].dtype);
  });

  std::string h = "{";
  bool first = true;
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    std::unordered_set<std::string> keys;
    for (size_t i = 0; i < metadata.size(); ++i) {
      if (!keys.insert(metadata[i].first).second)
        fail("safetensors writer: duplicate metadata key '{}'", metadata[i].first);
      if (i) h += ',';
      h += quote(metadata[i].first, "a metadata key");
      h += ':';
      h += quote(metadata[i].second, fmt::format("metadata value of '{}'", metadata[i].first));
    }
    h += '}';
    first = false;
  }
  uint64_t off = 0;
  for (size_t i : p.order) {
    const auto& t = tensors[i];
    if (!first) h += ',';
    first = false;
    h += quote(t.name, "a tensor name");
    h += fmt::format(":{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}", st_dtype_name(t.dtype),
                     fmt::join(t.shape, ","), off, off + t.nbytes);
    off += t.nbytes;
  }
  h += '}';
  h.append((8 - (8 + h.size()) % 8) % 8, ' ');
  p.header = std::move(h);
  return p;
}

template <typename Sink>
void emit(Sink& out, const std::vector<SafetensorsTensorIn>& tensors, const Plan& p) {
  const uint64_t n = p.header.size();
  out.write(&n, 8);
  out.write(p.header.data(), p.header.size());
  for (size_t i : p.order) out.write(tensors[i].data, tensors[i].nbytes);
}

struct VectorSink {
  std::vector<uint8_t> bytes;
  void write(const void* d, size_t n) {
    const auto* b = static_cast<const uint8_t*>(d);
    bytes.insert(bytes.end(), b, b + n);
  }
};

}  // namespace

SafetensorsTensorIn safetensors_input(const TensorView& t) {
  SafetensorsTensorIn in;
  in.name = t.name;
  if (!st_dtype_from_dtype(t.type, &in.dtype))
    fail("safetensors writer: tensor '{}' has type {}, which safetensors cannot store", t.name, dtype_name(t.type));
  const int nd = t.n_dims < 1 ? 1 : t.n_dims;
  for (int i = nd - 1; i >= 0; --i) in.shape.push_back(t.ne[i]);  // GGML -> row-major
  in.data = t.data;
  in.nbytes = t.nbytes;
  return in;
}

std::vector<uint8_t> serialize_safetensors(const std::vector<SafetensorsTensorIn>& tensors,
                                           const SafetensorsMetadata& metadata) {
  const Plan p = plan(tensors, metadata);
  VectorSink s;
  emit(s, tensors, p);
  return std::move(s.bytes);
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsTensorIn>& tensors,
                       const SafetensorsMetadata& metadata) {
  Plan p;
  try {
    p = plan(tensors, metadata);
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());
  }
  AtomicOutput f(path);
  emit(f, tensors, p);
  f.commit();
}

void write_safetensors_index(const std::string& path,
                             const std::vector<std::pair<std::string, std::string>>& weight_map,
                             uint64_t total_size) {
  json j;
  j["metadata"] = {{"total_size", total_size}};
  json wm = json::object();
  for (const auto& [name, shard] : weight_map) wm[name] = shard;
  j["weight_map"] = std::move(wm);
  std::string text;
  try {
    text = j.dump(2) + "\n";
  } catch (const json::exception& e) {
    fail("{}: cannot encode the index: {}", path, e.what());
  }
  AtomicOutput f(path);
  f.write(text.data(), text.size());
  f.commit();
}

}  // namespace kvs
