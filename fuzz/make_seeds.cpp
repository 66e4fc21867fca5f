// Writes the seed corpora for the fuzzers: small valid files made with the project's writers.
// Usage: fuzz_make_seeds <fuzz/corpus dir> [stories260K.gguf]
// (scripts/fuzz --seeds runs it; the output is committed under fuzz/corpus/.)
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "kvcache/cache_file.h"
#include "kvcache/kv_cache.h"
#include "kvcache/page_pool.h"
#include "model/gguf/gguf.h"
#include "model/gguf/gguf_writer.h"
#include "model/hf/safetensors_writer.h"

namespace fs = std::filesystem;
using namespace kvs;

namespace {

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed + i * 37);
  return b;
}

void save(const fs::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) fail("{}: write failed", p.string());
  std::printf("%s (%zu bytes)\n", p.string().c_str(), bytes.size());
}

void gguf_seeds(const fs::path& dir, const std::string& stories) {
  fs::create_directories(dir);
  {
    GgufWriter w;
    w.set_str("general.architecture", "llama");
    save(dir / "metadata_only.gguf", w.serialize());
  }
  {
    GgufWriter w;
    w.set_u8("t.u8", 7);
    w.set_i8("t.i8", -7);
    w.set_u16("t.u16", 700);
    w.set_i16("t.i16", -700);
    w.set_u32("t.u32", 70000);
    w.set_i32("t.i32", -70000);
    w.set_u64("t.u64", 7000000000ull);
    w.set_i64("t.i64", -7000000000ll);
    w.set_f32("t.f32", 0.5f);
    w.set_f64("t.f64", -0.25);
    w.set_bool("t.bool", true);
    w.set_str("t.str", "seed");
    w.set_array("a.i32", std::vector<int32_t>{1, -2, 3});
    w.set_array("a.f32", std::vector<float>{0.5f, 1.5f});
    w.set_array("a.str", std::vector<std::string>{"a", "bc"});
    w.set_bool_array("a.bool", {true, false});
    w.add_tensor("f32", DType::F32, {4, 2}, pattern(32, 1));
    w.add_tensor("f16", DType::F16, {8}, pattern(16, 2));
    w.add_tensor("q8_0", DType::Q8_0, {32, 2}, pattern(68, 3));
    save(dir / "all_types.gguf", w.serialize());
  }
  {
    GgufWriter w;
    w.set_alignment(64);
    w.add_tensor("a", DType::BF16, {3}, pattern(6, 4));
    w.add_tensor("b", DType::Q4_K, {256}, pattern(144, 5));
    w.add_tensor("c", DType::F32, {1, 1, 1, 2}, pattern(8, 6));
    save(dir / "align64.gguf", w.serialize());
  }
  if (!stories.empty()) {
    // stories260K's real metadata (tokenizer arrays included) with tiny stand-in tensors.
    auto src = GgufFile::open(stories);
    GgufWriter w;
    for (const auto& [k, v] : src->metadata()) w.set(k, v);
    int n = 0;
    for (const auto& t : src->tensors()) {
      if (n++ == 4) break;
      w.add_tensor(t.name, DType::F32, {2}, pattern(8, static_cast<uint8_t>(n)));
    }
    save(dir / "stories_metadata.gguf", w.serialize());
  }
}

void safetensors_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  save(dir / "empty.safetensors", serialize_safetensors({}));
  auto f32 = pattern(24, 1), f16 = pattern(8, 2), bf16 = pattern(6, 3), i64 = pattern(16, 4), u8 = pattern(3, 5),
       f4 = pattern(2, 6);
  save(dir / "mixed.safetensors",
       serialize_safetensors({{"model.embed_tokens.weight", StDType::F32, {2, 3}, f32.data(), f32.size()},
                              {"model.norm.weight", StDType::F16, {4}, f16.data(), f16.size()},
                              {"lm_head.weight", StDType::BF16, {1, 3}, bf16.data(), bf16.size()},
                              {"ids", StDType::I64, {2}, i64.data(), i64.size()},
                              {"mask", StDType::BOOL, {3}, u8.data(), u8.size()},
                              {"packed", StDType::F4, {4}, f4.data(), f4.size()},
                              {"empty", StDType::F32, {0, 5}, nullptr, 0},
                              {"scalar", StDType::F32, {}, f32.data(), 4}},
                             {{"format", "pt"}}));
  // Hand-written header: unpadded (misaligned data), unknown field, metadata last.
  const std::string h =
      R"({"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"f":{"dtype":"F32","shape":[1,2],"data_offsets":[1,9],"x":[null]},"__metadata__":{"k":"v"}})";
  std::vector<uint8_t> img(8);
  const uint64_t n = h.size();
  std::memcpy(img.data(), &n, 8);
  img.insert(img.end(), h.begin(), h.end());
  auto d = pattern(9, 7);
  img.insert(img.end(), d.begin(), d.end());
  save(dir / "handwritten.safetensors", img);
}

// .kvc seeds: files written by save_cache, minus their trailing checksum (fuzz_kvc appends it).
void kvc_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  struct Seed {
    const char* name;
    DType dtype;
    int n_layer, n_head_kv, head_dim, n_past;
    bool mass;
    nlohmann::json meta;
  };
  const nlohmann::json tool_meta = {{"model_path", "/models/stories260K.gguf"},
                                    {"model_name", "stories260K"},
                                    {"model_fingerprint", "0123456789abcdef"},
                                    {"press", "h2o"},
                                    {"press_options", {"recent_fraction=0.25", "decode_every=4"}},
                                    {"keep", 0.5},
                                    {"budget", 0},
                                    {"sinks", -1},
                                    {"window", 2},
                                    {"trigger", "every:4"},
                                    {"seed", 7},
                                    {"chat", false},
                                    {"question_template", "\n{question}"},
                                    {"context_tokens", 6},
                                    {"full_bytes", 4096},
                                    {"full_slots", 24},
                                    {"keep_chosen", nullptr},
                                    {"press_state", nlohmann::json::object()}};
  const std::vector<Seed> seeds = {
      {"f32_2x2.kvc", DType::F32, 2, 2, 4, 6, false, tool_meta},
      {"f16_mass.kvc", DType::F16, 1, 2, 8, 5, true, {{"note", "merged"}, {"keep_chosen", 0.5}}},
      {"empty_heads.kvc", DType::F32, 1, 1, 2, 0, false, nlohmann::json::object()},
      {"one_layer.kvc", DType::F16, 1, 1, 4, 3, false, nlohmann::json::object()},
  };
  for (const Seed& s : seeds) {
    KvLayout l;
    l.n_layer = s.n_layer;
    l.n_head_kv = s.n_head_kv;
    l.head_dim = s.head_dim;
    l.dtype = s.dtype;
    l.page_tokens = 4;
    PagePool pool(l.page_bytes());
    KvCache c(pool, l);
    for (int layer = 0; layer < l.n_layer; ++layer) {
      for (int kvh = 0; kvh < l.n_head_kv; ++kvh) {
        // Head (layer, kvh) keeps every other position, starting at its index: different lengths.
        std::vector<int32_t> pos;
        for (int32_t p = (layer + kvh) % 2; p < s.n_past; p += 1 + (kvh % 2)) pos.push_back(p);
        const size_t n = pos.size();
        std::vector<float> k(n * l.head_dim), v(k.size()), mass(n);  // [n][head_dim]
        for (size_t i = 0; i < k.size(); ++i) k[i] = 0.25f * static_cast<float>(i % 7) - 0.5f, v[i] = 0.125f * static_cast<float>(i % 5);
        for (size_t i = 0; i < n; ++i) mass[i] = 1.0f + static_cast<float>(i);
        if (!c.load_head(layer, kvh, k.data(), v.data(), pos.data(), static_cast<int32_t>(n), s.mass ? mass.data() : nullptr))
          fail("kvc seed {}: pool too small", s.name);
      }
    }
    c.set_n_past(s.n_past);
    const fs::path tmp = dir / (std::string(s.name) + ".full");
    save_cache(tmp.string(), c, s.meta);
    std::ifstream f(tmp, std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    fs::remove(tmp);
    if (bytes.size() < 8) fail("kvc seed {}: short file", s.name);
    bytes.resize(bytes.size() - 8);  // fuzz_kvc appends the checksum itself
    save(dir / s.name, bytes);
  }
}

// Press-option seeds: "press\ntrigger\nkey=value..." (see fuzz_press_options.cpp).
void press_option_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  const std::vector<std::pair<const char*, std::string>> seeds = {
      {"full.txt", "full\nprefill\n"},
      {"h2o.txt", "h2o\nevery:4\nrecent_fraction=0.25\ndecode_every=2"},
      {"snapkv.txt", "snapkv\nmemory:64M\nwindow_size=16\nkernel_size=7\npooling=max"},
      {"pyramidkv.txt", "pyramidkv\nmemory:1.5k\nbeta=4.5\nwindow_size=8"},
      {"adakv.txt", "adakv\nevery:1000000\nscorer=keydiff\nalpha=0.1"},
      {"tova.txt", "tova\nevery:1\ndecode_every=0"},
      {"wrapped.txt", "tova\nevery:4294967296\ndecode_every=4294967296"},
      {"nan.txt", "h2o\nmemory:nan\nrecent_fraction=nan"},
      {"overflow.txt", "pyramidkv\nmemory:1e999G\nbeta=1e999\nkernel_size=99999999999999999999"},
  };
  for (const auto& [name, text] : seeds) save(dir / name, std::vector<uint8_t>(text.begin(), text.end()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <corpus dir> [stories260K.gguf]\n", argv[0]);
    return 2;
  }
  try {
    gguf_seeds(fs::path(argv[1]) / "gguf", argc > 2 ? argv[2] : "");
    safetensors_seeds(fs::path(argv[1]) / "safetensors");
    kvc_seeds(fs::path(argv[1]) / "kvc");
    press_option_seeds(fs::path(argv[1]) / "press_options");
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
