#include <algorithm>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "model/gguf/gguf.h"

namespace kvs {

std::string_view gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::UINT8: return "uint8";
    case GgufType::INT8: return "int8";
    case GgufType::UINT16: return "uint16";
    case GgufType::INT16: return "int16";
    case GgufType::UINT32: return "uint32";
    case GgufType::INT32: return "int32";
    case GgufType::FLOAT32: return "float32";
    case GgufType::BOOL: return "bool";
    case GgufType::STRING: return "string";
    case GgufType::ARRAY: return "array";
    case GgufType::UINT64: return "uint64";
    case GgufType::INT64: return "int64";
    case GgufType::FLOAT64: return "float64";
  }
  return "unknown";
}

bool GgufValue::is_int() const {
  switch (type) {
    case GgufType::UINT8: case GgufType::INT8: case GgufType::UINT16: case GgufType::INT16:
    case GgufType::UINT32: case GgufType::INT32: case GgufType::UINT64: case GgufType::INT64:
      return true;
    default:
      return false;
  }
}
bool GgufValue::is_float() const { return type == GgufType::FLOAT32 || type == GgufType::FLOAT64; }
size_t GgufValue::array_size() const {
  if (type != GgufType::ARRAY) return 0;
  if (array_type == GgufType::STRING) return strs.size();
  if (array_type == GgufType::FLOAT32 || array_type == GgufType::FLOAT64) return floats.size();
  return ints.size();
}

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint64_t kMaxStringLen = 1ull << 30;

// What a read is for, for error messages: the pieces are only joined when a read fails, so the
// hot path (millions of array elements in a large vocabulary) builds no strings.
struct What {
  std::string_view a, b, c;
  What(const char* s) : a(s) {}  // NOLINT: implicit from a literal
  What(const std::string& s) : a(s) {}  // NOLINT
  What(std::string_view x, std::string_view y, std::string_view z) : a(x), b(y), c(z) {}
  std::string str() const { return std::string(a) + std::string(b) + std::string(c); }
};

// Bounds-checked little-endian cursor over the file image.
class Cursor {
 public:
  Cursor(const uint8_t* d, size_t n, const std::string& name) : d_(d), n_(n), name_(name) {}
  size_t pos() const { return pos_; }
  size_t remaining() const { return n_ - pos_; }

  void need(size_t k, const What& what) const {
    if (k > n_ - pos_)
      fail("{}: truncated file: need {} bytes for {} at offset {}, only {} left", name_, k, what.str(), pos_,
           n_ - pos_);
  }
  template <typename T>
  T read(const What& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, d_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_str(const What& what) {
    uint64_t len = read<uint64_t>(what);
    if (len > kMaxStringLen)
      fail("{}: {} at offset {} has absurd string length {}", name_, what.str(), pos_ - 8, len);
    need(static_cast<size_t>(len), what);
    std::string s(reinterpret_cast<const char*>(d_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }

 private:
  const uint8_t* d_;
  size_t n_;
  size_t pos_ = 0;
  const std::string& name_;
};

bool valid_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::FLOAT64); }

size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::UINT8: case GgufType::INT8: case GgufType::BOOL: return 1;
    case GgufType::UINT16: case GgufType::INT16: return 2;
    case GgufType::UINT32: case GgufType::INT32: case GgufType::FLOAT32: return 4;
    case GgufType::UINT64: case GgufType::INT64: case GgufType::FLOAT64: return 8;
    case GgufType::STRING: return 8;  // at least the length prefix
    default: return 0;
  }
}

// Reads one scalar of type t into v (as scalar, or appended to v's array vectors when `into_array`).
void read_scalar(Cursor& c, GgufType t, GgufValue& v, bool into_array, const std::string& key) {
  auto put_i = [&](int64_t x) {
    if (into_array) v.ints.push_back(x); else { v.i = x; v.u = static_cast<uint64_t>(x); }
  };
  auto put_u = [&](uint64_t x) {
    if (into_array) v.ints.push_back(static_cast<int64_t>(x)); else { v.u = x; v.i = static_cast<int64_t>(x); }
  };
  auto put_f = [&](double x) {
    if (into_array) v.floats.push_back(x); else v.f = x;
  };
  const What what("value of '", key, "'");
  switch (t) {
    case GgufType::UINT8: put_u(c.read<uint8_t>(what)); break;
    case GgufType::INT8: put_i(c.read<int8_t>(what)); break;
    case GgufType::UINT16: put_u(c.read<uint16_t>(what)); break;
    case GgufType::INT16: put_i(c.read<int16_t>(what)); break;
    case GgufType::UINT32: put_u(c.read<uint32_t>(what)); break;
    case GgufType::INT32: put_i(c.read<int32_t>(what)); break;
    case GgufType::UINT64: put_u(c.read<uint64_t>(what)); break;
    case GgufType::INT64: put_i(c.read<int64_t>(what)); break;
    case GgufType::FLOAT32: put_f(c.read<float>(what)); break;
    case GgufType::FLOAT64: put_f(c.read<double>(what)); break;
    case GgufType::BOOL: {
      uint8_t b = c.read<uint8_t>(what);
      put_u(b != 0);
      break;
    }
    case GgufType::STRING:
      if (into_array) v.strs.push_back(c.read_str(what)); else v.s = c.read_str(what);
      break;
    case GgufType::ARRAY:
      break;  // handled by caller
  }
}

}  // namespace

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
  auto file = std::make_unique<MappedFile>(path);
  std::unique_ptr<GgufFile> g(new GgufFile());
  g->name_ = path;
  g->data_ = file->data();
  g->size_ = file->size();
  g->file_ = std::move(file);
  g->parse_all();
  return g;
}

std::unique_ptr<GgufFile> GgufFile::parse(const uint8_t* data, size_t size, const std::string& name) {
  std::unique_ptr<GgufFile> g(new GgufFile());
  g->name_ = name;
  g->data_ = data;
  g->size_ = size;
  g->parse_all();
  return g;
}

void GgufFile::parse_all() {
  Cursor c(data_, size_, name_);
  if (size_ < 4) fail("{}: not a GGUF file: {} bytes, too short for the magic", name_, size_);
  uint32_t magic = c.read<uint32_t>("magic");
  if (magic != kMagic) fail("{}: not a GGUF file: bad magic 0x{:08x} (expected 'GGUF')", name_, magic);
  version_ = c.read<uint32_t>("version");
  if (version_ == 1) fail("{}: GGUF version 1 is not supported (expected 2 or 3)", name_);
  if (version_ != 2 && version_ != 3) {
    if ((version_ & 0xFFFF) == 0) fail("{}: GGUF version {} looks big-endian; only little-endian files are supported", name_, version_);
    fail("{}: unsupported GGUF version {} (expected 2 or 3)", name_, version_);
  }
  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t n_kv = c.read<uint64_t>("metadata count");
  // Each kv needs >= 8 (key len) + 4 (type) + 1 bytes; each tensor info >= 8 + 4 + 8 + 4 + 8.
  if (n_kv > c.remaining() / 13) fail("{}: metadata count {} is impossible for a {}-byte file", name_, n_kv, size_);
  if (n_tensors > c.remaining() / 32) fail("{}: tensor count {} is impossible for a {}-byte file", name_, n_tensors, size_);

  kv_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = c.read_str(fmt::format("key of metadata entry {}", k));
    uint32_t t = c.read<uint32_t>("value type of '" + key + "'");
    if (!valid_type(t)) fail("{}: metadata '{}' has unknown value type {}", name_, key, t);
    GgufValue v;
    v.type = static_cast<GgufType>(t);
    if (v.type == GgufType::ARRAY) {
      uint32_t at = c.read<uint32_t>("array type of '" + key + "'");
      if (!valid_type(at)) fail("{}: metadata array '{}' has unknown element type {}", name_, key, at);
      v.array_type = static_cast<GgufType>(at);
      if (v.array_type == GgufType::ARRAY) fail("{}: metadata '{}' is a nested array (not supported)", name_, key);
      uint64_t n = c.read<uint64_t>("array length of '" + key + "'");
      if (n > c.remaining() / scalar_size(v.array_type))
        fail("{}: metadata array '{}' claims {} elements of {}, more than the file holds", name_, key, n,
             gguf_type_name(v.array_type));
      if (v.array_type == GgufType::STRING) v.strs.reserve(n);
      else if (v.array_type == GgufType::FLOAT32 || v.array_type == GgufType::FLOAT64) v.floats.reserve(n);
      else v.ints.reserve(n);
      for (uint64_t j = 0; j < n; ++j) read_scalar(c, v.array_type, v, true, key);
    } else {
      read_scalar(c, v.type, v, false, key);
    }
    if (kv_index_.count(key)) fail("{}: duplicate metadata key '{}'", name_, key);
    kv_index_[key] = kv_.size();
    kv_.emplace_back(std::move(key), std::move(v));
  }

  if (auto a = find("general.alignment")) {
    if (!a->is_int() || a->u == 0 || (a->u & (a->u - 1)) != 0 || a->u > (1u << 20))
      fail("{}: general.alignment must be a power-of-two integer, got {}", name_,
           a->is_int() ? std::to_string(a->u) : std::string(gguf_type_name(a->type)));
    alignment_ = static_cast<size_t>(a->u);
  }

  struct Info {
    uint64_t offset;
  };
  std::vector<Info> infos;
  tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    TensorView tv;
    tv.name = c.read_str(fmt::format("name of tensor {}", k));
    uint32_t nd = c.read<uint32_t>("dims of tensor '" + tv.name + "'");
    if (nd == 0 || nd > 4) fail("{}: tensor '{}' has {} dimensions (expected 1 to 4)", name_, tv.name, nd);
    tv.n_dims = static_cast<int>(nd);
    for (uint32_t d = 0; d < nd; ++d) {
      uint64_t ne = c.read<uint64_t>("shape of tensor '" + tv.name + "'");
      if (ne == 0 || ne > (1ull << 40)) fail("{}: tensor '{}' dimension {} is {} (expected 1 .. 2^40)", name_, tv.name, d, ne);
      tv.ne[d] = static_cast<int64_t>(ne);
    }
    uint32_t t = c.read<uint32_t>("type of tensor '" + tv.name + "'");
    if (!dtype_known(t)) fail("{}: tensor '{}' has unknown tensor type id {}", name_, tv.name, t);
    tv.type = static_cast<DType>(t);
    const auto& info = dtype_info(tv.type);
    if (tv.ne[0] % info.block_size != 0)
      fail("{}: tensor '{}' of type {} has row length {}, not a multiple of its block size {}", name_, tv.name,
           info.name, tv.ne[0], info.block_size);
    // Overflow-safe element count: checked after every factor (each <= 2^40, so the running
    // product stays below 2^90). Multiplying all four first overflowed even 128 bits (2^160).
    unsigned __int128 nel = 1;
    for (int d = 0; d < 4; ++d) {
      nel *= static_cast<uint64_t>(tv.ne[d]);
      if (nel > (static_cast<unsigned __int128>(1) << 50))
        fail("{}: tensor '{}' is impossibly large (shape {})", name_, tv.name, shape_str(tv));
    }
    tv.nbytes = static_cast<size_t>(nel / info.block_size) * static_cast<size_t>(info.type_size);
    uint64_t off = c.read<uint64_t>("data offset of tensor '" + tv.name + "'");
    if (off % alignment_ != 0)
      fail("{}: tensor '{}' data offset {} is not a multiple of the alignment {}", name_, tv.name, off, alignment_);
    if (tensor_index_.count(tv.name)) fail("{}: duplicate tensor name '{}'", name_, tv.name);
    tensor_index_[tv.name] = tensors_.size();
    tensors_.push_back(std::move(tv));
    infos.push_back({off});
  }

  size_t pos = c.pos();
  data_offset_ = (pos + alignment_ - 1) / alignment_ * alignment_;
  if (n_tensors > 0 && data_offset_ > size_)
    fail("{}: truncated file: tensor data should start at offset {} but the file has {} bytes", name_, data_offset_, size_);
  const size_t data_size = size_ > data_offset_ ? size_ - data_offset_ : 0;
  for (size_t k = 0; k < tensors_.size(); ++k) {
    auto& tv = tensors_[k];
    const uint64_t off = infos[k].offset;
    if (off > data_size || tv.nbytes > data_size - off)
      fail("{}: truncated file: tensor '{}' ({} {}, {} bytes at data offset {}) extends past the end of the file "
           "({} data bytes)",
           name_, tv.name, dtype_name(tv.type), shape_str(tv), tv.nbytes, off, data_size);
    tv.data = data_ + data_offset_ + off;
  }
  // Each tensor's bytes fill exactly its slot: sorted by offset, the first starts at 0, each next
  // one at this one's end rounded up to the alignment, and the file ends within the last one's
  // padding. The byte size follows from the declared type and shape only, so a damaged type code
  // whose blocks are smaller (q8_0 read as q4_0) would otherwise load on reinterpreted bytes.
  // llama.cpp's reader also requires file order (gguf.cpp: offset == running padded size); any
  // order is accepted here, gaps are not.
  std::vector<size_t> order(tensors_.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return infos[a].offset < infos[b].offset; });
  const auto padded = [&](size_t n) { return (n + alignment_ - 1) / alignment_ * alignment_; };
  const auto mismatch = [&](size_t a, uint64_t from, uint64_t to, const std::string& before) {
    const TensorView& t = tensors_[a];
    fail("{}: tensor '{}' is declared {} {} ({} bytes at data offset {}), but bytes [{}, {}) of the data section "
         "after it belong to no tensor{}: its type or shape does not match its data (a damaged header?)",
         name_, t.name, dtype_name(t.type), shape_str(t), t.nbytes, infos[a].offset, from, to, before);
  };
  if (!order.empty() && infos[order[0]].offset != 0)
    fail("{}: bytes [0, {}) of the data section belong to no tensor (the first tensor, '{}', starts at data offset {})",
         name_, infos[order[0]].offset, tensors_[order[0]].name, infos[order[0]].offset);
  for (size_t k = 1; k < order.size(); ++k) {
    const size_t a = order[k - 1], b = order[k];
    if (infos[a].offset + tensors_[a].nbytes > infos[b].offset)
      fail("{}: tensor '{}' (data offset {}, {} bytes) overlaps tensor '{}' (data offset {})", name_, tensors_[a].name,
           infos[a].offset, tensors_[a].nbytes, tensors_[b].name, infos[b].offset);
    const uint64_t end = infos[a].offset + padded(tensors_[a].nbytes);
    if (end != infos[b].offset) mismatch(a, end, infos[b].offset, fmt::format(" (before tensor '{}')", tensors_[b].name));
  }
  if (!order.empty()) {
    const size_t last = order.back();
    const uint64_t end = infos[last].offset + padded(tensors_[last].nbytes);
    if (data_size > end) mismatch(last, end, data_size, " (up to the end of the file)");
  }
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(std::string(key));
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const TensorView* GgufFile::tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

void GgufFile::type_error(std::string_view key, const GgufValue& v, std::string_view want) const {
  std::string got(gguf_type_name(v.type));
  if (v.type == GgufType::ARRAY) got += fmt::format(" of {}", gguf_type_name(v.array_type));
  fail("{}: metadata '{}' has type {}, expected {}", name_, key, got, want);
}

std::optional<std::string> GgufFile::get_str_opt(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::STRING) type_error(key, *v, "string");
  return v->s;
}
std::string GgufFile::get_str(std::string_view key) const {
  auto v = get_str_opt(key);
  if (!v) fail("{}: missing metadata '{}' (string)", name_, key);
  return *v;
}
std::optional<int64_t> GgufFile::get_int_opt(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_int()) type_error(key, *v, "an integer");
  return v->i;
}
int64_t GgufFile::get_int(std::string_view key) const {
  auto v = get_int_opt(key);
  if (!v) fail("{}: missing metadata '{}' (integer)", name_, key);
  return *v;
}
std::optional<double> GgufFile::get_float_opt(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->is_float()) return v->f;
  if (v->is_int()) return static_cast<double>(v->i);
  type_error(key, *v, "a number");
}
double GgufFile::get_float(std::string_view key) const {
  auto v = get_float_opt(key);
  if (!v) fail("{}: missing metadata '{}' (number)", name_, key);
  return *v;
}
std::optional<bool> GgufFile::get_bool_opt(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::BOOL) type_error(key, *v, "bool");
  return v->u != 0;
}
bool GgufFile::get_bool(std::string_view key) const {
  auto v = get_bool_opt(key);
  if (!v) fail("{}: missing metadata '{}' (bool)", name_, key);
  return *v;
}
std::vector<std::string> GgufFile::get_str_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) fail("{}: missing metadata '{}' (array of strings)", name_, key);
  if (v->type != GgufType::ARRAY || v->array_type != GgufType::STRING) type_error(key, *v, "array of string");
  return v->strs;
}
std::vector<float> GgufFile::get_f32_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) fail("{}: missing metadata '{}' (array of numbers)", name_, key);
  if (v->type != GgufType::ARRAY) type_error(key, *v, "array of numbers");
  std::vector<float> out;
  if (v->array_type == GgufType::FLOAT32 || v->array_type == GgufType::FLOAT64) {
    out.assign(v->floats.begin(), v->floats.end());
  } else if (v->array_type != GgufType::STRING) {
    for (auto x : v->ints) out.push_back(static_cast<float>(x));
  } else {
    type_error(key, *v, "array of numbers");
  }
  return out;
}
std::vector<int64_t> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) fail("{}: missing metadata '{}' (array of integers)", name_, key);
  if (v->type != GgufType::ARRAY || v->array_type == GgufType::STRING || v->array_type == GgufType::FLOAT32 ||
      v->array_type == GgufType::FLOAT64)
    type_error(key, *v, "array of integers");
  return v->ints;
}

}  // namespace kvs
