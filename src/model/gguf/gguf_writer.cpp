#include "model/gguf/gguf_writer.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/atomic_output.h"

namespace kvs {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint32_t kMaxAlignment = 1u << 20;
constexpr size_t kMaxKeyLen = 65535;
constexpr int64_t kMaxDim = int64_t{1} << 40;

bool valid_type(GgufType t) { return static_cast<uint32_t>(t) <= static_cast<uint32_t>(GgufType::FLOAT64); }

// True if the integer x (stored as GgufFile does: int64, unsigned 64-bit values reinterpreted)
// fits type t.
bool int_fits(GgufType t, int64_t x) {
  switch (t) {
    case GgufType::UINT8: return x >= 0 && x <= 0xFF;
    case GgufType::INT8: return x >= -128 && x <= 127;
    case GgufType::UINT16: return x >= 0 && x <= 0xFFFF;
    case GgufType::INT16: return x >= -32768 && x <= 32767;
    case GgufType::UINT32: return x >= 0 && x <= 0xFFFFFFFFll;
    case GgufType::INT32: return x >= std::numeric_limits<int32_t>::min() && x <= std::numeric_limits<int32_t>::max();
    case GgufType::UINT64: case GgufType::INT64: return true;
    case GgufType::BOOL: return true;  // any non-zero is true
    default: return false;
  }
}

bool is_unsigned_type(GgufType t) {
  return t == GgufType::UINT8 || t == GgufType::UINT16 || t == GgufType::UINT32 || t == GgufType::UINT64 ||
         t == GgufType::BOOL;
}
bool is_int_type(GgufType t) {
  switch (t) {
    case GgufType::UINT8: case GgufType::INT8: case GgufType::UINT16: case GgufType::INT16:
    case GgufType::UINT32: case GgufType::INT32: case GgufType::UINT64: case GgufType::INT64:
      return true;
    default:
      return false;
  }
}
bool is_float_type(GgufType t) { return t == GgufType::FLOAT32 || t == GgufType::FLOAT64; }
// A finite double beyond float's range would silently become infinity as float32.
bool float_fits(GgufType t, double f) {
  return t != GgufType::FLOAT32 || !std::isfinite(f) || std::fabs(f) <= std::numeric_limits<float>::max();
}

// Sinks for emit(): one counts/collects into memory, one streams to an AtomicOutput.
struct VectorSink {
  std::vector<uint8_t> bytes;
  void write(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    bytes.insert(bytes.end(), b, b + n);
  }
  void write_zeros(size_t n) { bytes.insert(bytes.end(), n, 0); }
  uint64_t size() const { return bytes.size(); }
};

template <typename Sink, typename T>
void put(Sink& s, T v) {
  s.write(&v, sizeof(T));
}
template <typename Sink>
void put_str(Sink& s, std::string_view str) {
  put<Sink, uint64_t>(s, str.size());
  s.write(str.data(), str.size());
}

// Writes one scalar of type t. For arrays, `x`/`f`/`str` come from the element.
template <typename Sink>
void put_scalar(Sink& s, GgufType t, int64_t x, double f, std::string_view str) {
  switch (t) {
    case GgufType::UINT8: put(s, static_cast<uint8_t>(x)); break;
    case GgufType::INT8: put(s, static_cast<int8_t>(x)); break;
    case GgufType::UINT16: put(s, static_cast<uint16_t>(x)); break;
    case GgufType::INT16: put(s, static_cast<int16_t>(x)); break;
    case GgufType::UINT32: put(s, static_cast<uint32_t>(x)); break;
    case GgufType::INT32: put(s, static_cast<int32_t>(x)); break;
    case GgufType::UINT64: put(s, static_cast<uint64_t>(x)); break;
    case GgufType::INT64: put(s, static_cast<int64_t>(x)); break;
    case GgufType::FLOAT32: put(s, static_cast<float>(f)); break;
    case GgufType::FLOAT64: put(s, f); break;
    case GgufType::BOOL: put(s, static_cast<uint8_t>(x != 0 ? 1 : 0)); break;
    case GgufType::STRING: put_str(s, str); break;
    case GgufType::ARRAY: KVS_ASSERT(false); break;
  }
}

template <typename Sink>
void put_value(Sink& s, const GgufValue& v) {
  put(s, static_cast<uint32_t>(v.type));
  if (v.type != GgufType::ARRAY) {
    const int64_t x = is_unsigned_type(v.type) ? static_cast<int64_t>(v.u) : v.i;
    put_scalar(s, v.type, x, v.f, v.s);
    return;
  }
  put(s, static_cast<uint32_t>(v.array_type));
  put<Sink, uint64_t>(s, v.array_size());
  if (v.array_type == GgufType::STRING) {
    for (const auto& str : v.strs) put_str(s, str);
  } else if (is_float_type(v.array_type)) {
    for (double f : v.floats) put_scalar(s, v.array_type, 0, f, {});
  } else {
    for (int64_t x : v.ints) put_scalar(s, v.array_type, x, 0, {});
  }
}

uint64_t pad_to(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

std::string ne_str(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", ne[i]);
  return s + "]";
}

}  // namespace

// ---------------------------------------------------------------- metadata

void GgufWriter::set(std::string_view key, GgufValue v) {
  if (key.empty()) fail("gguf writer: empty metadata key");
  if (key.size() > kMaxKeyLen) fail("gguf writer: metadata key of {} bytes is too long (max {})", key.size(), kMaxKeyLen);
  if (!valid_type(v.type)) fail("gguf writer: metadata '{}' has invalid type id {}", key, static_cast<uint32_t>(v.type));
  if (v.type == GgufType::ARRAY) {
    if (!valid_type(v.array_type) || v.array_type == GgufType::ARRAY)
      fail("gguf writer: metadata array '{}' has invalid element type id {}", key, static_cast<uint32_t>(v.array_type));
    // Only the vector matching the element type is written; the others must be empty so that
    // nothing the caller meant to store is silently dropped.
    const bool str = v.array_type == GgufType::STRING, flt = is_float_type(v.array_type);
    if ((!str && !v.strs.empty()) || (!flt && !v.floats.empty()) || ((str || flt) && !v.ints.empty()))
      fail("gguf writer: metadata array '{}' of {} has values in the wrong vector", key,
           gguf_type_name(v.array_type));
    if (flt) {
      for (size_t j = 0; j < v.floats.size(); ++j)
        if (!float_fits(v.array_type, v.floats[j]))
          fail("gguf writer: metadata array '{}' element {} = {} does not fit float32", key, j, v.floats[j]);
    }
    if (!str && !flt) {
      for (size_t j = 0; j < v.ints.size(); ++j)
        if (!int_fits(v.array_type, v.ints[j]))
          fail("gguf writer: metadata array '{}' element {} = {} does not fit {}", key, j, v.ints[j],
               gguf_type_name(v.array_type));
    }
  } else if (is_int_type(v.type)) {
    const bool u = is_unsigned_type(v.type);
    if (!int_fits(v.type, u ? static_cast<int64_t>(v.u) : v.i))
      fail("gguf writer: metadata '{}' value {} does not fit {}", key, u ? std::to_string(v.u) : std::to_string(v.i),
           gguf_type_name(v.type));
  }
  if (v.type == GgufType::FLOAT32 && !float_fits(v.type, v.f))
    fail("gguf writer: metadata '{}' value {} does not fit float32", key, v.f);
  if (key == "general.alignment") {
    if (v.type != GgufType::UINT32)
      fail("gguf writer: general.alignment must be uint32, got {}", gguf_type_name(v.type));
    if (v.u == 0 || (v.u & (v.u - 1)) != 0 || v.u > kMaxAlignment)
      fail("gguf writer: general.alignment must be a power of two in 1 .. {}, got {}", kMaxAlignment, v.u);
  }
  for (auto& [k, old] : kv_) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  kv_.emplace_back(std::string(key), std::move(v));
}

namespace {
GgufValue scalar(GgufType t, int64_t i, uint64_t u) {
  GgufValue v;
  v.type = t;
  v.i = i;
  v.u = u;
  return v;
}
}  // namespace

void GgufWriter::set_u8(std::string_view key, uint8_t v) { set(key, scalar(GgufType::UINT8, v, v)); }
void GgufWriter::set_i8(std::string_view key, int8_t v) { set(key, scalar(GgufType::INT8, v, static_cast<uint64_t>(v))); }
void GgufWriter::set_u16(std::string_view key, uint16_t v) { set(key, scalar(GgufType::UINT16, v, v)); }
void GgufWriter::set_i16(std::string_view key, int16_t v) { set(key, scalar(GgufType::INT16, v, static_cast<uint64_t>(v))); }
void GgufWriter::set_u32(std::string_view key, uint32_t v) { set(key, scalar(GgufType::UINT32, v, v)); }
void GgufWriter::set_i32(std::string_view key, int32_t v) { set(key, scalar(GgufType::INT32, v, static_cast<uint64_t>(v))); }
void GgufWriter::set_u64(std::string_view key, uint64_t v) { set(key, scalar(GgufType::UINT64, static_cast<int64_t>(v), v)); }
void GgufWriter::set_i64(std::string_view key, int64_t v) { set(key, scalar(GgufType::INT64, v, static_cast<uint64_t>(v))); }
void GgufWriter::set_bool(std::string_view key, bool v) { set(key, scalar(GgufType::BOOL, v, v)); }
void GgufWriter::set_f32(std::string_view key, float f) {
  GgufValue v;
  v.type = GgufType::FLOAT32;
  v.f = f;
  set(key, std::move(v));
}
void GgufWriter::set_f64(std::string_view key, double f) {
  GgufValue v;
  v.type = GgufType::FLOAT64;
  v.f = f;
  set(key, std::move(v));
}
void GgufWriter::set_str(std::string_view key, std::string s) {
  GgufValue v;
  v.type = GgufType::STRING;
  v.s = std::move(s);
  set(key, std::move(v));
}
void GgufWriter::set_array(std::string_view key, const std::vector<std::string>& values) {
  GgufValue v;
  v.type = GgufType::ARRAY;
  v.array_type = GgufType::STRING;
  v.strs = values;
  set(key, std::move(v));
}
void GgufWriter::set_bool_array(std::string_view key, const std::vector<bool>& values) {
  GgufValue v;
  v.type = GgufType::ARRAY;
  v.array_type = GgufType::BOOL;
  v.ints.assign(values.begin(), values.end());
  set(key, std::move(v));
}

bool GgufWriter::remove(std::string_view key) {
  for (auto it = kv_.begin(); it != kv_.end(); ++it) {
    if (it->first == key) {
      kv_.erase(it);
      return true;
    }
  }
  return false;
}

const GgufValue* GgufWriter::find(std::string_view key) const {
  for (const auto& [k, v] : kv_)
    if (k == key) return &v;
  return nullptr;
}

uint32_t GgufWriter::alignment() const {
  const GgufValue* a = find("general.alignment");
  return a ? static_cast<uint32_t>(a->u) : kDefaultAlignment;
}

// ---------------------------------------------------------------- tensors

void GgufWriter::add_checked(std::string name, DType type, std::vector<int64_t> ne, size_t nbytes, Tensor&& t) {
  if (name.empty()) fail("gguf writer: tensor with an empty name");
  if (name.size() > kMaxTensorName)
    fail("gguf writer: tensor name '{}' is {} bytes, llama.cpp allows at most {}", name, name.size(), kMaxTensorName);
  if (tensor_index_.count(name)) fail("gguf writer: duplicate tensor '{}'", name);
  if (!dtype_known(static_cast<uint32_t>(type)))
    fail("gguf writer: tensor '{}' has unknown type id {}", name, static_cast<uint32_t>(type));
  if (ne.empty() || ne.size() > 4)
    fail("gguf writer: tensor '{}' has {} dimensions (expected 1 to 4)", name, ne.size());
  unsigned __int128 nel = 1;
  for (size_t d = 0; d < ne.size(); ++d) {
    if (ne[d] < 1 || ne[d] > kMaxDim)
      fail("gguf writer: tensor '{}' shape {} has dimension {} = {} (expected 1 .. 2^40)", name, ne_str(ne), d, ne[d]);
    nel *= static_cast<uint64_t>(ne[d]);
    if (nel > (static_cast<unsigned __int128>(1) << 50)) fail("gguf writer: tensor '{}' shape {} is too large", name, ne_str(ne));
  }
  const auto& info = dtype_info(type);
  if (ne[0] % info.block_size != 0)
    fail("gguf writer: tensor '{}' of type {} has row length {}, not a multiple of its block size {}", name, info.name,
         ne[0], info.block_size);
  const size_t rows = static_cast<size_t>(nel / static_cast<uint64_t>(ne[0]));
  const size_t want = dtype_row_bytes(type, ne[0]) * rows;
  if (nbytes != want)
    fail("gguf writer: tensor '{}' ({} {}) needs {} bytes, got {}", name, info.name, ne_str(ne), want, nbytes);
  if (t.data == nullptr && nbytes > 0) fail("gguf writer: tensor '{}' has no data", name);
  t.name = name;
  t.type = type;
  t.ne = std::move(ne);
  t.nbytes = nbytes;
  tensor_index_[name] = tensors_.size();
  tensors_.push_back(std::move(t));
}

void GgufWriter::add_tensor(std::string name, DType type, std::vector<int64_t> ne, const void* data, size_t nbytes) {
  Tensor t;
  if (data != nullptr) {
    const auto* b = static_cast<const uint8_t*>(data);
    t.owned.assign(b, b + nbytes);
    t.data = t.owned.data();
  }
  add_checked(std::move(name), type, std::move(ne), nbytes, std::move(t));
}

void GgufWriter::add_tensor(std::string name, DType type, std::vector<int64_t> ne, std::vector<uint8_t> data) {
  Tensor t;
  const size_t n = data.size();
  t.owned = std::move(data);
  t.data = t.owned.data();
  add_checked(std::move(name), type, std::move(ne), n, std::move(t));
}

void GgufWriter::add_tensor(const TensorView& v) {
  std::vector<int64_t> ne(v.ne.begin(), v.ne.begin() + (v.n_dims < 1 ? 1 : v.n_dims));
  add_tensor(v.name, v.type, std::move(ne), v.data, v.nbytes);
}

void GgufWriter::add_tensor_borrowed(std::string name, DType type, std::vector<int64_t> ne, const void* data,
                                     size_t nbytes) {
  Tensor t;
  t.data = data;
  add_checked(std::move(name), type, std::move(ne), nbytes, std::move(t));
}

// ---------------------------------------------------------------- output

template <typename Sink>
void GgufWriter::emit(Sink& out) const {
  const uint64_t align = alignment();
  put(out, kMagic);
  put(out, kVersion);
  put<Sink, uint64_t>(out, tensors_.size());
  put<Sink, uint64_t>(out, kv_.size());
  for (const auto& [key, v] : kv_) {
    put_str(out, key);
    put_value(out, v);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    put_str(out, t.name);
    put(out, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) put(out, static_cast<uint64_t>(d));
    put(out, static_cast<uint32_t>(t.type));
    put(out, offset);
    offset += pad_to(t.nbytes, align);
  }
  out.write_zeros(pad_to(out.size(), align) - out.size());
  for (const auto& t : tensors_) {
    out.write(t.data, t.nbytes);
    out.write_zeros(pad_to(t.nbytes, align) - t.nbytes);
  }
}

std::vector<uint8_t> GgufWriter::serialize() const {
  VectorSink s;
  emit(s);
  return std::move(s.bytes);
}

void GgufWriter::write(const std::string& path) const {
  AtomicOutput f(path);
  emit(f);
  f.commit();
}

}  // namespace kvs
