#include "test_data.h"
#include "model/gguf/gguf_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "model/gguf/gguf.h"

namespace kvs {
namespace {

namespace fs = std::filesystem;
static std::string stories_file() { return kvs::test::test_data("models/stories260K/stories260K.gguf"); }

class GgufWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kvs_gguf_writer_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

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

// Metadata of every type, and F32 / F16 / Q8_0 tensors (raw bytes).
GgufWriter full_writer() {
  GgufWriter w;
  w.set_u8("t.u8", 200);
  w.set_i8("t.i8", -100);
  w.set_u16("t.u16", 60000);
  w.set_i16("t.i16", -30000);
  w.set_u32("t.u32", 4000000000u);
  w.set_i32("t.i32", -2000000000);
  w.set_u64("t.u64", 18000000000000000000ull);
  w.set_i64("t.i64", -9000000000000000000ll);
  w.set_f32("t.f32", 0.1f);
  w.set_f64("t.f64", 0.1);
  w.set_bool("t.bool", true);
  w.set_bool("t.bool_false", false);
  w.set_str("t.str", "h\xc3\xa9llo");
  w.set_str("t.empty_str", "");
  w.set_array("a.u8", std::vector<uint8_t>{0, 1, 255});
  w.set_array("a.i8", std::vector<int8_t>{-128, 0, 127});
  w.set_array("a.u16", std::vector<uint16_t>{0, 65535});
  w.set_array("a.i16", std::vector<int16_t>{-32768, 32767});
  w.set_array("a.u32", std::vector<uint32_t>{0, 4294967295u});
  w.set_array("a.i32", std::vector<int32_t>{-5, 7, 1 << 30});
  w.set_array("a.u64", std::vector<uint64_t>{0, 18446744073709551615ull});
  w.set_array("a.i64", std::vector<int64_t>{-1, 1ll << 62});
  w.set_array("a.f32", std::vector<float>{1.5f, -0.25f, 3e38f});
  w.set_array("a.f64", std::vector<double>{1e300, -2.5});
  w.set_bool_array("a.bool", {true, false, true});
  w.set_array("a.str", std::vector<std::string>{"a", "", "long string with spaces"});
  w.set_array("a.empty", std::vector<int32_t>{});
  w.add_tensor("f32", DType::F32, {4, 3}, random_bytes(4 * 3 * 4, 1));
  w.add_tensor("f16", DType::F16, {8, 2, 3}, random_bytes(8 * 2 * 3 * 2, 2));
  w.add_tensor("q8_0", DType::Q8_0, {64, 2}, random_bytes(2 * 2 * 34, 3));
  w.add_tensor("scalar", DType::F32, {1}, random_bytes(4, 4));
  return w;
}

void expect_same_value(const std::string& key, const GgufValue& a, const GgufValue& b) {
  SCOPED_TRACE(key);
  ASSERT_EQ(a.type, b.type);
  if (a.type == GgufType::ARRAY) {
    ASSERT_EQ(a.array_type, b.array_type);
    EXPECT_EQ(a.ints, b.ints);
    EXPECT_EQ(a.strs, b.strs);
    ASSERT_EQ(a.floats.size(), b.floats.size());
    for (size_t i = 0; i < a.floats.size(); ++i) {
      if (a.array_type == GgufType::FLOAT32) EXPECT_EQ(static_cast<float>(a.floats[i]), static_cast<float>(b.floats[i]));
      else EXPECT_EQ(a.floats[i], b.floats[i]);
    }
  } else if (a.type == GgufType::STRING) {
    EXPECT_EQ(a.s, b.s);
  } else if (a.type == GgufType::FLOAT32) {
    EXPECT_EQ(static_cast<float>(a.f), static_cast<float>(b.f));
  } else if (a.type == GgufType::FLOAT64) {
    EXPECT_EQ(a.f, b.f);
  } else if (a.type == GgufType::BOOL) {
    EXPECT_EQ(a.u != 0, b.u != 0);
  } else {
    EXPECT_EQ(a.i, b.i);
    EXPECT_EQ(a.u, b.u);
  }
}

// Parsed metadata equals the writer's (order, types, values) and every tensor's bytes match.
void expect_matches(const GgufWriter& w, const GgufFile& g, const std::vector<TensorView>& want_tensors) {
  ASSERT_EQ(g.metadata().size(), w.metadata().size());
  for (size_t i = 0; i < w.metadata().size(); ++i) {
    EXPECT_EQ(g.metadata()[i].first, w.metadata()[i].first);
    expect_same_value(w.metadata()[i].first, w.metadata()[i].second, g.metadata()[i].second);
  }
  ASSERT_EQ(g.tensors().size(), want_tensors.size());
  for (size_t i = 0; i < want_tensors.size(); ++i) {
    const TensorView& a = want_tensors[i];
    const TensorView& b = g.tensors()[i];
    SCOPED_TRACE(a.name);
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.type, b.type);
    EXPECT_EQ(a.n_dims, b.n_dims);
    EXPECT_EQ(a.ne, b.ne);
    ASSERT_EQ(a.nbytes, b.nbytes);
    EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes), 0);
    EXPECT_EQ((reinterpret_cast<uintptr_t>(b.data) - reinterpret_cast<uintptr_t>(g.tensors()[0].data)) % g.alignment(),
              0u);
  }
}

TEST_F(GgufWriterTest, EveryMetadataTypeAndTensorTypeRoundTrips) {
  GgufWriter w = full_writer();
  const auto bytes = w.serialize();
  auto g = GgufFile::parse(bytes.data(), bytes.size(), "mem.gguf");
  EXPECT_EQ(g->version(), 3u);
  EXPECT_EQ(g->alignment(), 32u);
  EXPECT_EQ(g->data_offset() % 32, 0u);

  // Reference tensors built independently of the writer.
  std::vector<std::vector<uint8_t>> raw = {random_bytes(48, 1), random_bytes(96, 2), random_bytes(136, 3),
                                           random_bytes(4, 4)};
  std::vector<TensorView> want(4);
  want[0] = {"f32", DType::F32, 2, {4, 3, 1, 1}, raw[0].data(), raw[0].size()};
  want[1] = {"f16", DType::F16, 3, {8, 2, 3, 1}, raw[1].data(), raw[1].size()};
  want[2] = {"q8_0", DType::Q8_0, 2, {64, 2, 1, 1}, raw[2].data(), raw[2].size()};
  want[3] = {"scalar", DType::F32, 1, {1, 1, 1, 1}, raw[3].data(), raw[3].size()};
  expect_matches(w, *g, want);

  // Typed getters see the values.
  EXPECT_EQ(g->get_int("t.u64"), static_cast<int64_t>(18000000000000000000ull));
  EXPECT_EQ(g->find("t.u64")->u, 18000000000000000000ull);
  EXPECT_EQ(g->get_int("t.i64"), -9000000000000000000ll);
  EXPECT_EQ(g->get_str("t.str"), "h\xc3\xa9llo");
  EXPECT_TRUE(g->get_bool("t.bool"));
  EXPECT_FALSE(g->get_bool("t.bool_false"));
  EXPECT_FLOAT_EQ(static_cast<float>(g->get_float("t.f32")), 0.1f);
  EXPECT_EQ(g->get_float("t.f64"), 0.1);
  EXPECT_EQ(g->get_str_array("a.str"), (std::vector<std::string>{"a", "", "long string with spaces"}));
  EXPECT_EQ(g->get_int_array("a.bool"), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(g->find("a.empty")->array_size(), 0u);

  // The same through a real file, and the file bytes equal serialize().
  const std::string p = path("full.gguf");
  w.write(p);
  auto gf = GgufFile::open(p);
  expect_matches(w, *gf, want);
  EXPECT_EQ(gf->file_size(), bytes.size());
  auto mf = MappedFile(p);
  EXPECT_EQ(std::memcmp(mf.data(), bytes.data(), bytes.size()), 0);
}

TEST_F(GgufWriterTest, SettingAKeyTwiceReplacesItInPlace) {
  GgufWriter w;
  w.set_u32("a", 1);
  w.set_str("b", "x");
  w.set_u32("c", 3);
  w.set_str("a", "now a string");
  ASSERT_EQ(w.metadata().size(), 3u);
  EXPECT_EQ(w.metadata()[0].first, "a");
  EXPECT_EQ(w.metadata()[0].second.s, "now a string");
  EXPECT_TRUE(w.remove("b"));
  EXPECT_FALSE(w.remove("b"));
  const auto bytes = w.serialize();
  auto g = GgufFile::parse(bytes.data(), bytes.size(), "mem");
  ASSERT_EQ(g->metadata().size(), 2u);
  EXPECT_EQ(g->metadata()[0].first, "a");
  EXPECT_EQ(g->get_str("a"), "now a string");
  EXPECT_EQ(g->metadata()[1].first, "c");
}

TEST_F(GgufWriterTest, AlignmentIsHonoured) {
  for (uint32_t align : {1u, 8u, 64u, 4096u}) {
    SCOPED_TRACE(align);
    GgufWriter w;
    w.set_alignment(align);
    w.add_tensor("a", DType::F32, {3}, random_bytes(12, 5));
    w.add_tensor("b", DType::F16, {5}, random_bytes(10, 6));
    w.add_tensor("c", DType::F32, {7, 2}, random_bytes(56, 7));
    const auto bytes = w.serialize();
    auto g = GgufFile::parse(bytes.data(), bytes.size(), "mem");
    EXPECT_EQ(g->alignment(), align);
    EXPECT_EQ(g->data_offset() % align, 0u);
    // llama.cpp's packing: each tensor padded to the alignment, the file ends after the last pad.
    size_t expect_off = 0;
    for (const auto& t : g->tensors()) {
      EXPECT_EQ(static_cast<size_t>(static_cast<const uint8_t*>(t.data) - bytes.data()), g->data_offset() + expect_off);
      expect_off += (t.nbytes + align - 1) / align * align;
    }
    EXPECT_EQ(bytes.size(), g->data_offset() + expect_off);
  }
}

TEST_F(GgufWriterTest, NoTensorsStillValid) {
  GgufWriter w;
  w.set_str("general.name", "empty");
  const auto bytes = w.serialize();
  auto g = GgufFile::parse(bytes.data(), bytes.size(), "mem");
  EXPECT_EQ(g->tensors().size(), 0u);
  EXPECT_EQ(g->get_str("general.name"), "empty");
}

TEST_F(GgufWriterTest, RejectsBadTensors) {
  GgufWriter w;
  auto b = random_bytes(1024, 9);
  EXPECT_NE(error_of([&] { w.add_tensor("x", DType::F32, {4, 3}, b.data(), 47); }).find("needs 48 bytes, got 47"),
            std::string::npos);
  EXPECT_NE(error_of([&] { w.add_tensor("x", DType::Q8_0, {33}, b.data(), 34); }).find("block size 32"),
            std::string::npos);
  EXPECT_NE(error_of([&] { w.add_tensor("x", DType::F32, {}, b.data(), 0); }).find("0 dimensions"), std::string::npos);
  EXPECT_NE(error_of([&] { w.add_tensor("x", DType::F32, {1, 1, 1, 1, 1}, b.data(), 4); }).find("5 dimensions"),
            std::string::npos);
  EXPECT_NE(error_of([&] { w.add_tensor("x", DType::F32, {4, 0}, b.data(), 0); }).find("dimension 1 = 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { w.add_tensor("", DType::F32, {1}, b.data(), 4); }).find("empty name"), std::string::npos);
  EXPECT_NE(error_of([&] { w.add_tensor(std::string(64, 'n'), DType::F32, {1}, b.data(), 4); }).find("at most 63"),
            std::string::npos);
  EXPECT_NE(error_of([&] { w.add_tensor("x", static_cast<DType>(4), {1}, b.data(), 4); }).find("unknown type id 4"),
            std::string::npos);
  w.add_tensor("x", DType::F32, {1}, b.data(), 4);
  EXPECT_NE(error_of([&] { w.add_tensor("x", DType::F32, {1}, b.data(), 4); }).find("duplicate tensor 'x'"),
            std::string::npos);
  EXPECT_EQ(w.n_tensors(), 1u);
}

TEST_F(GgufWriterTest, RejectsBadMetadata) {
  GgufWriter w;
  EXPECT_NE(error_of([&] { w.set_u8("general.alignment", 32); }).find("must be uint32"), std::string::npos);
  EXPECT_NE(error_of([&] { w.set_alignment(48); }).find("power of two"), std::string::npos);
  EXPECT_NE(error_of([&] { w.set_alignment(0); }).find("power of two"), std::string::npos);
  EXPECT_NE(error_of([&] { w.set_str("", "x"); }).find("empty metadata key"), std::string::npos);
  GgufValue v;
  v.type = GgufType::ARRAY;
  v.array_type = GgufType::UINT8;
  v.ints = {1, 256};
  EXPECT_NE(error_of([&] { w.set("k", v); }).find("element 1 = 256 does not fit uint8"), std::string::npos);
  v.array_type = GgufType::ARRAY;
  EXPECT_NE(error_of([&] { w.set("k", v); }).find("invalid element type"), std::string::npos);
  GgufValue s;
  s.type = GgufType::INT8;
  s.i = 200;
  EXPECT_NE(error_of([&] { w.set("k", s); }).find("does not fit int8"), std::string::npos);
  GgufValue big;
  big.type = GgufType::FLOAT32;
  big.f = 1e300;
  EXPECT_NE(error_of([&] { w.set("k", big); }).find("does not fit float32"), std::string::npos);
  big.type = GgufType::FLOAT64;
  EXPECT_NO_THROW(w.set("k", big));
  EXPECT_TRUE(w.remove("k"));
  s.type = static_cast<GgufType>(13);
  EXPECT_NE(error_of([&] { w.set("k", s); }).find("invalid type id 13"), std::string::npos);
  EXPECT_TRUE(w.metadata().empty());
}

TEST_F(GgufWriterTest, WriteIsAtomicAndErrorsNameThePath) {
  const std::string bad = path("no_such_dir/x.gguf");
  EXPECT_NE(error_of([&] { full_writer().write(bad); }).find(bad), std::string::npos);

  // Overwriting an existing file replaces it whole, and no temporary file is left behind.
  const std::string p = path("m.gguf");
  full_writer().write(p);
  GgufWriter small;
  small.set_str("general.name", "small");
  small.write(p);
  EXPECT_EQ(GgufFile::open(p)->get_str("general.name"), "small");
  size_t n_files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    (void)e;
    ++n_files;
  }
  EXPECT_EQ(n_files, 1u);
}

// Re-writing stories260K from its parsed contents reproduces the file exactly: same metadata,
// same tensor bytes, and (because the writer packs like llama.cpp) the very same bytes.
TEST_F(GgufWriterTest, RewritesStories260KIdentically) {
  auto src = GgufFile::open(stories_file());
  GgufWriter w;
  for (const auto& [k, v] : src->metadata()) w.set(k, v);
  for (const auto& t : src->tensors()) {
    std::vector<int64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
    w.add_tensor_borrowed(t.name, t.type, ne, t.data, t.nbytes);
  }
  const std::string p = path("stories.gguf");
  w.write(p);
  auto g = GgufFile::open(p);
  EXPECT_EQ(g->version(), src->version());
  expect_matches(w, *g, src->tensors());
  ASSERT_EQ(g->tensors().size(), 48u);
  MappedFile a(stories_file()), b(p);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0);
}

}  // namespace
}  // namespace kvs
