#include "test_data.h"
#include "model/hf/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "core/error.h"
#include "model/gguf/gguf.h"
#include "model/hf/safetensors_model.h"
#include "model/hf/safetensors_writer.h"

namespace kvs {
namespace {

namespace fs = std::filesystem;
static std::string stories_file() { return kvs::test::test_data("models/stories260K/stories260K.gguf"); }

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

// A file image from a raw JSON header and data bytes.
std::vector<uint8_t> image(const std::string& header, const std::vector<uint8_t>& data = {}) {
  std::vector<uint8_t> b(8);
  const uint64_t n = header.size();
  std::memcpy(b.data(), &n, 8);
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

std::string parse_error(const std::vector<uint8_t>& img) {
  return error_of([&] { SafetensorsFile::parse(img.data(), img.size(), "bad.safetensors"); });
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kvs_st_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write_bytes(const std::string& p, const std::vector<uint8_t>& b) {
    std::ofstream f(p, std::ios::binary);
    f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
  fs::path dir_;
};

// ---------------------------------------------------------------- round trips

TEST_F(SafetensorsTest, RoundTripsEveryKindOfTensor) {
  auto f32 = random_bytes(3 * 4 * 4, 1), f16 = random_bytes(2 * 3 * 4 * 2, 2), bf16 = random_bytes(5 * 2, 3),
       i64 = random_bytes(2 * 8, 4), u8 = random_bytes(3, 5), sc = random_bytes(4, 6);
  std::vector<SafetensorsTensorIn> ts = {
      {"u8", StDType::U8, {3}, u8.data(), u8.size()},          // odd size first: writer must reorder
      {"w.f32", StDType::F32, {3, 4}, f32.data(), f32.size()},
      {"w.f16", StDType::F16, {2, 3, 4}, f16.data(), f16.size()},
      {"w.bf16", StDType::BF16, {5}, bf16.data(), bf16.size()},
      {"ids", StDType::I64, {2}, i64.data(), i64.size()},
      {"scalar", StDType::F32, {}, sc.data(), sc.size()},
      {"empty", StDType::F32, {0, 4}, nullptr, 0},
      {"n\xc3\xa4me \"quoted\"", StDType::F32, {1}, sc.data(), sc.size()},
  };
  const std::string p = path("model.safetensors");
  write_safetensors(p, ts, {{"format", "pt"}, {"note", "h\xc3\xa9"}});
  auto f = SafetensorsFile::open(p);
  EXPECT_EQ(f->data_offset() % 8, 0u);
  ASSERT_EQ(f->metadata().size(), 2u);
  EXPECT_EQ(*f->find_metadata("format"), "pt");
  EXPECT_EQ(*f->find_metadata("note"), "h\xc3\xa9");
  EXPECT_EQ(f->find_metadata("nope"), nullptr);
  ASSERT_EQ(f->entries().size(), ts.size());

  TensorView v = f->tensor("w.f32");
  EXPECT_EQ(v.type, DType::F32);
  EXPECT_EQ(v.n_dims, 2);
  EXPECT_EQ(v.ne, (std::array<int64_t, 4>{4, 3, 1, 1}));  // [rows=3, cols=4] -> ne {4, 3}
  ASSERT_EQ(v.nbytes, f32.size());
  EXPECT_EQ(std::memcmp(v.data, f32.data(), f32.size()), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data) % 4, 0u);

  v = f->tensor("w.f16");
  EXPECT_EQ(v.type, DType::F16);
  EXPECT_EQ(v.n_dims, 3);
  EXPECT_EQ(v.ne, (std::array<int64_t, 4>{4, 3, 2, 1}));
  EXPECT_EQ(std::memcmp(v.data, f16.data(), f16.size()), 0);

  v = f->tensor("w.bf16");
  EXPECT_EQ(v.type, DType::BF16);
  EXPECT_EQ(v.ne[0], 5);
  EXPECT_EQ(std::memcmp(v.data, bf16.data(), bf16.size()), 0);

  v = f->tensor("scalar");
  EXPECT_EQ(v.n_dims, 1);
  EXPECT_EQ(v.ne[0], 1);
  EXPECT_EQ(std::memcmp(v.data, sc.data(), 4), 0);

  v = f->tensor("empty");
  EXPECT_EQ(v.nbytes, 0u);
  EXPECT_EQ(v.ne[0], 4);
  EXPECT_EQ(v.ne[1], 0);
  EXPECT_EQ(v.n_elements(), 0);

  EXPECT_EQ(f->tensor("n\xc3\xa4me \"quoted\"").nbytes, 4u);

  // I64 and U8 are listed, their bytes are checked, but they cannot be viewed.
  const SafetensorsEntry* e = f->find("ids");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->dtype, StDType::I64);
  EXPECT_FALSE(e->viewable());
  EXPECT_EQ(std::memcmp(e->data, i64.data(), i64.size()), 0);
  const std::string err = error_of([&] { f->tensor("ids"); });
  EXPECT_NE(err.find(p), std::string::npos) << err;
  EXPECT_NE(err.find("unsupported dtype I64"), std::string::npos) << err;
  EXPECT_EQ(f->views().size(), 6u);  // all but ids and u8
  EXPECT_NE(error_of([&] { f->tensor("missing"); }).find("no tensor 'missing'"), std::string::npos);
}

TEST_F(SafetensorsTest, ConvertsStories260KAndBack) {
  auto g = GgufFile::open(stories_file());
  std::vector<SafetensorsTensorIn> ts;
  for (const auto& t : g->tensors()) ts.push_back(safetensors_input(t));
  ASSERT_EQ(ts.size(), 48u);
  EXPECT_EQ(ts[0].shape.size(), static_cast<size_t>(g->tensors()[0].n_dims));
  const std::string p = path("stories.safetensors");
  write_safetensors(p, ts);
  auto m = SafetensorsModel::open(p);
  EXPECT_FALSE(m->sharded());
  ASSERT_EQ(m->names().size(), 48u);
  for (const auto& t : g->tensors()) {
    SCOPED_TRACE(t.name);
    TensorView v = m->tensor(t.name);
    EXPECT_EQ(v.type, t.type);
    EXPECT_EQ(v.n_dims, t.n_dims);
    EXPECT_EQ(v.ne, t.ne);
    ASSERT_EQ(v.nbytes, t.nbytes);
    EXPECT_EQ(std::memcmp(v.data, t.data, t.nbytes), 0);
  }
}

TEST_F(SafetensorsTest, WriterRejectsBadInput) {
  auto b = random_bytes(64, 7);
  auto w = [&](std::vector<SafetensorsTensorIn> ts) { return error_of([&] { serialize_safetensors(ts); }); };
  EXPECT_NE(w({{"a", StDType::F32, {2, 2}, b.data(), 15}}).find("needs 128 bits, got 15 bytes"), std::string::npos);
  EXPECT_NE(w({{"a", StDType::F32, {1}, b.data(), 4}, {"a", StDType::F32, {1}, b.data(), 4}}).find("duplicate tensor 'a'"),
            std::string::npos);
  EXPECT_NE(w({{"__metadata__", StDType::F32, {1}, b.data(), 4}}).find("reserved"), std::string::npos);
  EXPECT_NE(w({{"a", StDType::F32, {-1}, b.data(), 4}}).find("negative dimension"), std::string::npos);
  EXPECT_NE(w({{"\xff", StDType::F32, {1}, b.data(), 4}}).find("not valid UTF-8"), std::string::npos);
  TensorView q{"q", DType::Q8_0, 1, {32, 1, 1, 1}, b.data(), 34};
  EXPECT_NE(error_of([&] { safetensors_input(q); }).find("cannot store"), std::string::npos);
  const std::string bad = path("nodir/x.safetensors");
  EXPECT_NE(error_of([&] { write_safetensors(bad, {{"a", StDType::F32, {1}, b.data(), 4}}); }).find(bad),
            std::string::npos);
}

// ---------------------------------------------------------------- sharded models

TEST_F(SafetensorsTest, ShardedModelLooksUpAcrossShards) {
  auto a = random_bytes(16, 8), b = random_bytes(8, 9);
  write_safetensors(path("model-00001-of-00002.safetensors"), {{"x", StDType::F32, {2, 2}, a.data(), a.size()}});
  write_safetensors(path("model-00002-of-00002.safetensors"), {{"y", StDType::BF16, {4}, b.data(), b.size()}});
  write_safetensors_index(path("model.safetensors.index.json"),
                          {{"x", "model-00001-of-00002.safetensors"}, {"y", "model-00002-of-00002.safetensors"}}, 24);
  auto m = SafetensorsModel::open(dir_.string());
  EXPECT_TRUE(m->sharded());
  EXPECT_EQ(m->shards().size(), 2u);
  EXPECT_EQ(m->names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_TRUE(m->has("y"));
  EXPECT_FALSE(m->has("z"));
  TensorView y = m->tensor("y");
  EXPECT_EQ(y.type, DType::BF16);
  EXPECT_EQ(std::memcmp(y.data, b.data(), 8), 0);
  EXPECT_EQ(std::memcmp(m->tensor("x").data, a.data(), 16), 0);
  const std::string err = error_of([&] { m->tensor("z"); });
  EXPECT_NE(err.find("no tensor 'z'"), std::string::npos) << err;
  EXPECT_NE(err.find("model.safetensors.index.json"), std::string::npos) << err;

  // A single model.safetensors takes precedence over the index.
  write_safetensors(path("model.safetensors"), {{"only", StDType::F32, {1}, a.data(), 4}});
  m = SafetensorsModel::open(dir_.string());
  EXPECT_FALSE(m->sharded());
  EXPECT_EQ(m->names(), (std::vector<std::string>{"only"}));
}

TEST_F(SafetensorsTest, ShardedModelErrorsNameShardAndTensor) {
  auto a = random_bytes(16, 8);
  write_safetensors(path("s1.safetensors"), {{"x", StDType::F32, {4}, a.data(), a.size()}});
  const std::string idx = path("model.safetensors.index.json");

  write_safetensors_index(idx, {{"x", "s1.safetensors"}, {"y", "s2.safetensors"}}, 32);
  std::string err = error_of([&] { SafetensorsModel::open(dir_.string()); });
  EXPECT_NE(err.find(idx), std::string::npos) << err;
  EXPECT_NE(err.find("missing shard 's2.safetensors'"), std::string::npos) << err;
  EXPECT_NE(err.find("'y'"), std::string::npos) << err;

  write_safetensors_index(idx, {{"x", "s1.safetensors"}, {"w", "s1.safetensors"}}, 32);
  err = error_of([&] { SafetensorsModel::open(idx); });
  EXPECT_NE(err.find("tensor 'w' is mapped to shard 's1.safetensors', which does not contain it"), std::string::npos)
      << err;

  write_safetensors_index(idx, {{"x", "../s1.safetensors"}}, 32);
  EXPECT_NE(error_of([&] { SafetensorsModel::open(idx); }).find("inside the model directory"), std::string::npos);

  write_bytes(idx, {'{', '"', 'w'});
  err = error_of([&] { SafetensorsModel::open(idx); });
  EXPECT_NE(err.find(idx + ": bad JSON"), std::string::npos) << err;

  write_bytes(idx, {'{', '}'});
  EXPECT_NE(error_of([&] { SafetensorsModel::open(idx); }).find("weight_map"), std::string::npos);

  fs::remove(idx);
  err = error_of([&] { SafetensorsModel::open(dir_.string()); });
  EXPECT_NE(err.find("no model.safetensors or model.safetensors.index.json"), std::string::npos) << err;
  err = error_of([&] { SafetensorsModel::open(path("absent.safetensors")); });
  EXPECT_NE(err.find("absent.safetensors"), std::string::npos) << err;
}

// ---------------------------------------------------------------- malformed files

const std::string kOne = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";

TEST(SafetensorsMalformed, ValidMinimalFileParses) {
  auto img = image(kOne, random_bytes(8, 1));
  auto f = SafetensorsFile::parse(img.data(), img.size(), "ok");
  EXPECT_EQ(f->entries().size(), 1u);
  auto empty = image("{}");
  EXPECT_EQ(SafetensorsFile::parse(empty.data(), empty.size(), "ok")->entries().size(), 0u);
  auto padded = image("{}      ");  // trailing-space padding is allowed
  EXPECT_EQ(SafetensorsFile::parse(padded.data(), padded.size(), "ok")->entries().size(), 0u);
  // Unknown fields of a tensor are ignored, whatever their value.
  auto extra = image(R"({"t":{"x":{"a":[1,{"b":null}]},"dtype":"F32","shape":[2],"y":-1.5,"data_offsets":[0,8]}})",
                     random_bytes(8, 1));
  EXPECT_EQ(SafetensorsFile::parse(extra.data(), extra.size(), "ok")->entries().size(), 1u);
  auto minus_zero = image(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[-0,8]}})", random_bytes(8, 1));
  EXPECT_EQ(SafetensorsFile::parse(minus_zero.data(), minus_zero.size(), "ok")->find("t")->begin, 0u);
}

struct Case {
  const char* what;
  std::vector<uint8_t> img;
  const char* expect;
};

TEST(SafetensorsMalformed, EveryMalformationGivesANamedError) {
  const auto d8 = random_bytes(8, 2);
  std::vector<uint8_t> huge_len(16, 0);
  huge_len[7] = 0x10;  // 2^60
  std::vector<uint8_t> past_end = image(kOne, d8);
  past_end[0] = 0xff;  // header length larger than the file
  std::vector<uint8_t> truncated_data = image(kOne, d8);
  truncated_data.resize(truncated_data.size() - 3);
  std::string many_dims = R"({"t":{"dtype":"F32","data_offsets":[0,4],"shape":[1)";
  for (int i = 0; i < 64; ++i) many_dims += ",1";
  many_dims += "]}}";
  std::vector<Case> cases = {
      {"short file", {1, 2, 3}, "too short for the 8-byte header length"},
      {"absurd header length", huge_len, "exceeds the 100000000-byte limit"},
      {"truncated header", past_end, "truncated header"},
      {"not an object", image("[1,2]"), "does not start with '{'"},
      {"bad json", image(R"({"t":{"dtype":"F32",)"), "bad JSON at header byte"},
      {"bad json 2", image(R"({"t" 1})"), "bad JSON"},
      {"trailing garbage", image(R"({} x)"), "bad JSON"},
      {"invalid utf-8", image("{\"\xff\":{}}"), "bad JSON"},
      {"entry not object", image(R"({"t":[1]})"), "header entry 't' is an array, expected an object"},
      {"duplicate tensor",
       image(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", d8),
       "duplicate key 't'"},
      {"duplicate field", image(R"({"t":{"dtype":"F32","dtype":"F16","shape":[2],"data_offsets":[0,8]}})", d8),
       "duplicate field 'dtype' in tensor 't'"},
      {"unknown dtype", image(R"({"t":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", d8), "unknown dtype 'Q4'"},
      {"dtype not string", image(R"({"t":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})", d8), "\"dtype\" of tensor 't' is a number"},
      {"missing dtype", image(R"({"t":{"shape":[2],"data_offsets":[0,8]}})", d8), "tensor 't' lacks \"dtype\""},
      {"missing offsets", image(R"({"t":{"dtype":"F32","shape":[2]}})", d8), "lacks \"data_offsets\""},
      {"negative dim", image(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", d8), "negative number -2 in 'shape'"},
      {"float dim", image(R"({"t":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", d8), "expected a non-negative integer"},
      {"nested shape", image(R"({"t":{"dtype":"F32","shape":[[2]],"data_offsets":[0,8]}})", d8), "'shape' of tensor 't' contains an array"},
      {"string offset", image(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":["0",8]}})", d8), "'data_offsets' of tensor 't' contains a string"},
      {"three offsets", image(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8,8]}})", d8), "more than 2 data_offsets"},
      {"one offset", image(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", d8), "1 data_offsets"},
      {"begin > end", image(R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", d8), "begin > end"},
      {"offsets out of range", image(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", d8), "out of range"},
      {"truncated tensor data", truncated_data, "out of range"},
      {"wrong byte count", image(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", d8), "needs 12 bytes but data_offsets [0, 8] hold 8"},
      {"absurd shape", image(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", d8), "absurd shape"},
      {"sub-byte", image(R"({"t":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}})", {0}), "not a whole number of bytes"},
      {"overlap",
       image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", d8),
       "overlap"},
      {"hole", image(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", d8), "hole in the data section"},
      {"trailing bytes", image(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", d8), "cover only 4"},
      {"metadata not string", image(R"({"__metadata__":{"a":1}})"), "__metadata__ value of 'a' is a number"},
      {"metadata not object", image(R"({"__metadata__":"x"})"), "header entry '__metadata__' is a string"},
      {"duplicate metadata", image(R"({"__metadata__":{"a":"1","a":"2"}})"), "duplicate key 'a' in __metadata__"},
      {"too many dims", image(many_dims, d8), "more than 64 dimensions"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string err = parse_error(c.img);
    EXPECT_EQ(err.rfind("bad.safetensors: ", 0), 0u) << err;
    EXPECT_NE(err.find(c.expect), std::string::npos) << err;
  }
}

TEST_F(SafetensorsTest, ErrorsFromFilesNameThePath) {
  const std::string p = path("broken.safetensors");
  write_bytes(p, image(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", random_bytes(8, 1)));
  const std::string err = error_of([&] { SafetensorsFile::open(p); });
  EXPECT_EQ(err.rfind(p + ": ", 0), 0u) << err;
  EXPECT_NE(err.find("out of range"), std::string::npos) << err;
}

TEST(SafetensorsMalformed, FiveDimsListedButNotViewable) {
  auto img = image(R"({"t":{"dtype":"F32","shape":[1,1,1,1,2],"data_offsets":[0,8]}})", random_bytes(8, 3));
  auto f = SafetensorsFile::parse(img.data(), img.size(), "five");
  EXPECT_FALSE(f->find("t")->viewable());
  EXPECT_TRUE(f->views().empty());
  EXPECT_NE(error_of([&] { f->tensor("t"); }).find("5 dimensions"), std::string::npos);
}

TEST(SafetensorsMalformed, MisalignedTensorIsCopiedAligned) {
  // A 1-byte tensor first, so the F32 tensor's data starts at an odd address.
  const std::string h = R"({"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"f":{"dtype":"F32","shape":[2],"data_offsets":[1,9]}})";
  auto data = random_bytes(9, 4);
  auto img = image(h + std::string((8 - h.size() % 8) % 8, ' '), data);
  auto f = SafetensorsFile::parse(img.data(), img.size(), "misaligned");
  TensorView v = f->tensor("f");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data) % 4, 0u);
  EXPECT_EQ(std::memcmp(v.data, data.data() + 1, 8), 0);
}

}  // namespace
}  // namespace kvs
