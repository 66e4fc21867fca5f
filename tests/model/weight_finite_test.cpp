// Weights that are not finite are refused at load, naming the tensor and the block (or element):
// a NaN or infinite fp16 scale (d, and dmin / m where the type has one) of any block type, a NaN or
// infinite value of a plain type, in GGUF files and Hugging Face folders. And a tensor whose
// declared type does not fill its bytes exactly (a damaged type code) is refused by the reader.
// The block layouts below are written out from ggml-common.h, not taken from the code under test.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "model/export.h"
#include "model/gguf/gguf.h"
#include "model/gguf/gguf_writer.h"
#include "model/hf/safetensors.h"
#include "model/model.h"
#include "model/presets.h"
#include "model/random_model.h"

namespace kvs {
namespace {

namespace fs = std::filesystem;

struct Field {
  const char* name;
  int offset;  // byte offset of the fp16 field in the block
};
struct BlockType {
  DType type;
  int elems;  // per block
  int bytes;  // per block
  std::vector<Field> fields;
};

// ggml-common.h: block_q8_0 {d; qs[32]}, block_q4_0 {d; qs[16]}, block_q4_1 {d; m; qs[16]},
// block_q5_0 {d; qh[4]; qs[16]}, block_q5_1 {d; m; qh[4]; qs[16]}, block_q2_K {scales[16]; qs[64];
// d; dmin}, block_q3_K {hmask[32]; qs[64]; scales[12]; d}, block_q4_K {d; dmin; scales[12];
// qs[128]}, block_q5_K {d; dmin; scales[12]; qh[32]; qs[128]}, block_q6_K {ql[128]; qh[64];
// scales[16]; d}, block_iq4_nl {d; qs[16]}, block_iq4_xs {d; scales_h; scales_l[4]; qs[128]}.
const std::vector<BlockType>& block_types() {
  static const std::vector<BlockType> v = {
      {DType::Q8_0, 32, 34, {{"d", 0}}},
      {DType::Q4_0, 32, 18, {{"d", 0}}},
      {DType::Q4_1, 32, 20, {{"d", 0}, {"m", 2}}},
      {DType::Q5_0, 32, 22, {{"d", 0}}},
      {DType::Q5_1, 32, 24, {{"d", 0}, {"m", 2}}},
      {DType::Q2_K, 256, 84, {{"d", 80}, {"dmin", 82}}},
      {DType::Q3_K, 256, 110, {{"d", 108}}},
      {DType::Q4_K, 256, 144, {{"d", 0}, {"dmin", 2}}},
      {DType::Q5_K, 256, 176, {{"d", 0}, {"dmin", 2}}},
      {DType::Q6_K, 256, 210, {{"d", 208}}},
      {DType::IQ4_NL, 32, 18, {{"d", 0}}},
      {DType::IQ4_XS, 256, 136, {{"d", 0}}},
  };
  return v;
}

// fp16 bit patterns and how the message prints them.
struct Bad {
  uint16_t f16;
  uint16_t bf16;
  uint32_t f32;
  const char* text;
};
const Bad kBad[] = {{0x7E00, 0x7FC0, 0x7FC00000u, "nan"}, {0x7C00, 0x7F80, 0x7F800000u, "inf"},
                    {0xFC00, 0xFF80, 0xFF800000u, "-inf"}};

// A small Llama whose every matrix has rows of 256 (whole K-quant super-blocks).
HParams shape256() {
  HParams hp = shape_preset("tiny").hp;
  hp.n_embd = 256;
  hp.n_head = 4;
  hp.n_head_kv = 2;
  hp.head_dim = 64;
  hp.rope_dim = 64;
  hp.n_ff = 256;
  return hp;
}

struct TempDir {
  fs::path p;
  TempDir() {
    p = fs::temp_directory_path() / ("kvs_weight_finite_" + std::to_string(::getpid()));
    fs::remove_all(p);
    fs::create_directories(p);
  }
  ~TempDir() { fs::remove_all(p); }
};

std::vector<uint8_t> read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}
void write_all(const fs::path& p, const std::vector<uint8_t>& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// Byte offset in the file of a GGUF tensor's data.
size_t gguf_tensor_offset(const fs::path& file, const std::string& name) {
  auto g = GgufFile::open(file.string());
  const TensorView* t = g->tensor(name);
  EXPECT_NE(t, nullptr) << name;
  return static_cast<size_t>(static_cast<const uint8_t*>(t->data) - g->mapped_data());
}

std::string load_error(const fs::path& p) {
  try {
    auto m = Model::load(p.string());
  } catch (const Error& e) {
    return e.what();
  }
  return "<loaded>";
}

void put16(std::vector<uint8_t>& b, size_t at, uint16_t v) { std::memcpy(b.data() + at, &v, 2); }
void put32(std::vector<uint8_t>& b, size_t at, uint32_t v) { std::memcpy(b.data() + at, &v, 4); }

TEST(WeightFinite, EveryBlockTypeRefusesANonFiniteScaleNamingTensorAndBlock) {
  TempDir dir;
  const HParams hp = shape256();
  const std::string tensor = "blk.1.ffn_down.weight";  // [256 cols, 256 rows]
  for (const BlockType& bt : block_types()) {
    SCOPED_TRACE(std::string(dtype_name(bt.type)));
    const fs::path good = dir.p / "good.gguf";
    write_random_gguf(hp, synthetic_spm_vocab(hp.n_vocab), bt.type, 3, "t", good.string());
    ASSERT_EQ(load_error(good), "<loaded>");
    {  // the tensor is stored in the type asked for (the damage below hits a real block)
      auto g = GgufFile::open(good.string());
      ASSERT_EQ(g->tensor(tensor)->type, bt.type);
    }
    const std::vector<uint8_t> img = read_all(good);
    const size_t base = gguf_tensor_offset(good, tensor);
    const int per_row = 256 / bt.elems;
    const int row = 3, col_block = per_row - 1;  // the last block of row 3
    const size_t block = static_cast<size_t>(row) * per_row + col_block;
    for (const Field& f : bt.fields) {
      for (const Bad& bad : kBad) {
        SCOPED_TRACE(std::string(f.name) + " = " + bad.text);
        std::vector<uint8_t> b = img;
        put16(b, base + block * bt.bytes + f.offset, bad.f16);
        const fs::path p = dir.p / "bad.gguf";
        write_all(p, b);
        const std::string e = load_error(p);
        EXPECT_NE(e.find(p.string()), std::string::npos) << e;
        EXPECT_NE(e.find("tensor '" + tensor + "'"), std::string::npos) << e;
        EXPECT_NE(e.find(fmt::format("block {} (row {}, block {} of the row)", block, row, col_block)),
                  std::string::npos)
            << e;
        EXPECT_NE(e.find(fmt::format(": {} = {};", f.name, bad.text)), std::string::npos) << e;
      }
    }
    // The same value in a quant byte (not a scale) is an ordinary value: the model loads.
    if (bt.fields.front().offset == 0) {
      std::vector<uint8_t> b = img;
      put16(b, base + block * bt.bytes + bt.bytes - 2, 0x7C00);
      const fs::path p = dir.p / "quants.gguf";
      write_all(p, b);
      EXPECT_EQ(load_error(p), "<loaded>");
    }
  }
}

TEST(WeightFinite, PlainTypesRefuseANonFiniteValueNamingTensorAndElement) {
  TempDir dir;
  const HParams hp = shape256();
  for (DType type : {DType::F32, DType::F16, DType::BF16}) {
    SCOPED_TRACE(std::string(dtype_name(type)));
    const fs::path good = dir.p / "good.gguf";
    write_random_gguf(hp, synthetic_spm_vocab(hp.n_vocab), type, 4, "t", good.string());
    ASSERT_EQ(load_error(good), "<loaded>");
    const std::vector<uint8_t> img = read_all(good);
    const std::string tensor = "blk.0.attn_q.weight";
    const size_t base = gguf_tensor_offset(good, tensor);
    const size_t el = 2 * 256 + 7;  // row 2, column 7
    for (const Bad& bad : kBad) {
      SCOPED_TRACE(bad.text);
      std::vector<uint8_t> b = img;
      if (type == DType::F32) put32(b, base + el * 4, bad.f32);
      else put16(b, base + el * 2, type == DType::F16 ? bad.f16 : bad.bf16);
      const fs::path p = dir.p / "bad.gguf";
      write_all(p, b);
      const std::string e = load_error(p);
      EXPECT_NE(e.find("tensor '" + tensor + "'"), std::string::npos) << e;
      EXPECT_NE(e.find(fmt::format("non-finite value, {}, at element {} (row 2, column 7)", bad.text, el)),
                std::string::npos)
          << e;
    }
    // A norm weight (f32 whatever the matrices' type).
    std::vector<uint8_t> b = img;
    put32(b, gguf_tensor_offset(good, "blk.1.ffn_norm.weight") + 5 * 4, kBad[0].f32);
    const fs::path p = dir.p / "norm.gguf";
    write_all(p, b);
    const std::string e = load_error(p);
    EXPECT_NE(e.find("tensor 'blk.1.ffn_norm.weight'"), std::string::npos) << e;
    EXPECT_NE(e.find("at element 5 (row 0, column 5)"), std::string::npos) << e;
  }
}

TEST(WeightFinite, HuggingFaceFolderRefusesANonFiniteValue) {
  TempDir dir;
  const HParams hp = shape256();
  const fs::path gg = dir.p / "m.gguf";
  write_random_gguf(hp, synthetic_spm_vocab(hp.n_vocab), DType::F32, 5, "t", gg.string());
  for (DType type : {DType::F16, DType::BF16, DType::F32}) {
    SCOPED_TRACE(std::string(dtype_name(type)));
    const fs::path hf = dir.p / "hf";
    export_hf(*Model::load(gg.string()), hf.string(), type);
    ASSERT_EQ(load_error(hf), "<loaded>");
    const fs::path st = hf / "model.safetensors";
    const std::vector<uint8_t> img = read_all(st);
    auto f = SafetensorsFile::open(st.string());
    const SafetensorsEntry* e = f->find("model.layers.1.mlp.up_proj.weight");  // [256 rows][256 cols]
    ASSERT_NE(e, nullptr);
    const size_t at = f->data_offset() + e->begin + (4 * 256 + 9) * (type == DType::F32 ? 4 : 2);
    f.reset();
    std::vector<uint8_t> b = img;
    if (type == DType::F32) put32(b, at, kBad[1].f32);
    else put16(b, at, type == DType::F16 ? kBad[1].f16 : kBad[1].bf16);
    write_all(st, b);
    const std::string err = load_error(hf);
    EXPECT_NE(err.find("tensor 'model.layers.1.mlp.up_proj.weight'"), std::string::npos) << err;
    EXPECT_NE(err.find("non-finite value, inf, at element 1033 (row 4, column 9)"), std::string::npos) << err;
  }
}

// A GGUF image with two tensors of 4 rows of 256 columns in `type` (zero bytes: scale 0), then
// the offset of tensor `name`'s type field in the header.
std::vector<uint8_t> two_tensor_image(DType first, DType second) {
  GgufWriter w;
  w.set_str("general.architecture", "llama");
  for (auto [name, t] : {std::pair{"a", first}, std::pair{"b", second}}) {
    const size_t n = dtype_row_bytes(t, 256) * 4;
    w.add_tensor(name, t, {256, 4}, std::vector<uint8_t>(n, 0));
  }
  return w.serialize();
}
size_t type_field(const std::vector<uint8_t>& img, const std::string& name) {
  // Tensor info: u64 name length, name, u32 n_dims (2), 2 x u64 ne, u32 type.
  const std::string key = std::string("\x01\0\0\0\0\0\0\0", 8) + name + std::string("\x02\0\0\0", 4);
  auto it = std::search(img.begin(), img.end(), key.begin(), key.end());
  EXPECT_NE(it, img.end());
  return static_cast<size_t>(it - img.begin()) + key.size() + 16;
}
std::string parse_error(const std::vector<uint8_t>& img) {
  try {
    GgufFile::parse(img.data(), img.size(), "flip.gguf");
  } catch (const Error& e) {
    return e.what();
  }
  return "<parsed>";
}

TEST(WeightFinite, ATypeCodeWhoseBlocksAreSmallerIsRefusedByName) {
  // (stored, read as): each pair's rows have the same block length and fewer bytes read as.
  const std::pair<DType, DType> flips[] = {{DType::Q8_0, DType::Q4_0}, {DType::Q5_1, DType::Q4_1},
                                           {DType::Q6_K, DType::Q4_K}, {DType::F16, DType::Q8_0},
                                           {DType::Q4_K, DType::Q2_K}};
  for (auto [stored, as] : flips) {
    SCOPED_TRACE(fmt::format("{} read as {}", dtype_name(stored), dtype_name(as)));
    const auto img = two_tensor_image(stored, stored);
    ASSERT_EQ(parse_error(img), "<parsed>");
    for (const char* name : {"a", "b"}) {  // before another tensor, and last in the file
      std::vector<uint8_t> b = img;
      put32(b, type_field(b, name), static_cast<uint32_t>(as));
      const std::string e = parse_error(b);
      EXPECT_NE(e.find(fmt::format("tensor '{}' is declared {} [256, 4]", name, dtype_name(as))), std::string::npos)
          << e;
      EXPECT_NE(e.find("does not match its data"), std::string::npos) << e;
    }
  }
  // A gap between tensors, and bytes after the last one's padding, are refused too.
  std::vector<uint8_t> img = two_tensor_image(DType::Q8_0, DType::Q8_0);
  img.resize(img.size() + 64, 0);
  EXPECT_NE(parse_error(img).find("up to the end of the file"), std::string::npos) << parse_error(img);
}

}  // namespace
}  // namespace kvs
