// Shared helpers for the kernel tests: random data, the kernel tables under test, random valid
// quantised rows.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/fp16.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu_features.h"
#include "kernels/quant.h"
#include "kernels/ref/ref.h"

namespace kvs::kernels::test {

// Every dispatch table, for value-parameterised tests; a table the CPU cannot run is skipped.
enum class Path { Generic, Avx2, Avx512 };

inline bool avx2_available() {
  const auto& f = cpu_features();
  return f.avx2 && f.fma && f.f16c;
}

inline bool avx512_available() {
  const auto& f = cpu_features();
  return avx2_available() && f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl && f.avx512vnni && f.os_avx512;
}

inline const KernelTable& table(Path p) {
  return p == Path::Avx512 ? avx512_kernels() : p == Path::Avx2 ? avx2_kernels() : generic_kernels();
}

inline std::string path_name(const testing::TestParamInfo<Path>& info) {
  return info.param == Path::Avx512 ? "Avx512" : info.param == Path::Avx2 ? "Avx2" : "Generic";
}

inline auto all_paths() { return testing::Values(Path::Generic, Path::Avx2, Path::Avx512); }

// Skips the test for a table this CPU cannot run (the name is kept for the existing tests).
#define KVS_SKIP_IF_NO_AVX2(path)                                                                \
  do {                                                                                           \
    if ((path) == ::kvs::kernels::test::Path::Avx2 && !::kvs::kernels::test::avx2_available())    \
      GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";                                                 \
    if ((path) == ::kvs::kernels::test::Path::Avx512 && !::kvs::kernels::test::avx512_available()) \
      GTEST_SKIP() << "CPU or OS lacks AVX-512 F/BW/DQ/VL/VNNI";                                 \
  } while (0)

// Base of the value-parameterised kernel tests: one run per table (all_paths()), skipped where
// the CPU cannot run it; k() is the table under test. Each suite derives its own named fixture.
class TablePaths : public testing::TestWithParam<Path> {
 protected:
  void SetUp() override { KVS_SKIP_IF_NO_AVX2(GetParam()); }
  const KernelTable& k() const { return table(GetParam()); }
};

inline std::vector<float> randn(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline std::vector<float> randu(int64_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// A random fp16 scale in [lo, hi) (positive or negative as asked).
inline uint16_t rand_half(std::mt19937& rng, float lo, float hi) {
  return fp32_to_fp16(std::uniform_real_distribution<float>(lo, hi)(rng));
}

// n rows of D values as GGUF Q8_0 blocks (D a multiple of 32), as a Q8_0 KV page holds them.
inline std::vector<uint8_t> q8_0_rows(const std::vector<float>& x, int n, int D) {
  std::vector<uint8_t> out(static_cast<size_t>(n) * (D / QK8_0) * sizeof(block_q8_0));
  quantize_row_q8_0(x.data(), reinterpret_cast<block_q8_0*>(out.data()), static_cast<int64_t>(n) * D);
  return out;
}

// A hand-made Q8_0 row of 64 values for known answers: block 0 has d = 0.5 and q = i - 16 (element
// i), block 1 d = -2 and q = 3 everywhere; element j's value is 0.5 (j - 16) for j < 32, -6 after.
struct HandQ8Row {
  block_q8_0 blocks[2];
  const uint8_t* bytes() const { return reinterpret_cast<const uint8_t*>(blocks); }
};
inline HandQ8Row hand_q8_0_row() {
  HandQ8Row r;
  r.blocks[0].d = fp32_to_fp16(0.5f);
  r.blocks[1].d = fp32_to_fp16(-2.0f);
  for (int i = 0; i < QK8_0; ++i) {
    r.blocks[0].qs[i] = static_cast<int8_t>(i - 16);
    r.blocks[1].qs[i] = static_cast<int8_t>(3);
  }
  return r;
}

// n elements of type t filled with random *bytes* in every quant field and sane random fp16
// scales: exercises the whole format space (every nibble, 6-bit scale, int8 scale value).
inline std::vector<uint8_t> random_row(DType t, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> row(dtype_row_bytes(t, n));
  for (auto& b : row) b = static_cast<uint8_t>(rng());
  const int64_t nb = n / dtype_info(t).block_size;
  switch (t) {
    case DType::F32: {
      auto v = randn(n, seed);
      std::memcpy(row.data(), v.data(), row.size());
      break;
    }
    case DType::F16:
    case DType::BF16: {
      auto v = randn(n, seed);
      auto* h = reinterpret_cast<uint16_t*>(row.data());
      for (int64_t i = 0; i < n; ++i) h[i] = t == DType::F16 ? fp32_to_fp16(v[i]) : fp32_to_bf16(v[i]);
      break;
    }
    case DType::Q8_0:
      for (int64_t b = 0; b < nb; ++b) reinterpret_cast<block_q8_0*>(row.data())[b].d = rand_half(rng, -0.02f, 0.02f);
      break;
    case DType::Q4_0:
      for (int64_t b = 0; b < nb; ++b) reinterpret_cast<block_q4_0*>(row.data())[b].d = rand_half(rng, -0.2f, 0.2f);
      break;
    case DType::Q4_K:
      for (int64_t b = 0; b < nb; ++b) {
        auto& blk = reinterpret_cast<block_q4_K*>(row.data())[b];
        blk.d = rand_half(rng, 0.0f, 0.005f);
        blk.dmin = rand_half(rng, 0.0f, 0.005f);
      }
      break;
    case DType::Q6_K:
      for (int64_t b = 0; b < nb; ++b) reinterpret_cast<block_q6_K*>(row.data())[b].d = rand_half(rng, -0.001f, 0.001f);
      break;
    case DType::Q4_1:
      for (int64_t b = 0; b < nb; ++b) {
        auto& blk = reinterpret_cast<block_q4_1*>(row.data())[b];
        blk.d = rand_half(rng, -0.1f, 0.1f);
        blk.m = rand_half(rng, -0.8f, 0.8f);
      }
      break;
    case DType::Q5_0:
      for (int64_t b = 0; b < nb; ++b) reinterpret_cast<block_q5_0*>(row.data())[b].d = rand_half(rng, -0.1f, 0.1f);
      break;
    case DType::Q5_1:
      for (int64_t b = 0; b < nb; ++b) {
        auto& blk = reinterpret_cast<block_q5_1*>(row.data())[b];
        blk.d = rand_half(rng, -0.05f, 0.05f);
        blk.m = rand_half(rng, -0.8f, 0.8f);
      }
      break;
    case DType::IQ4_NL:
      for (int64_t b = 0; b < nb; ++b) reinterpret_cast<block_iq4_nl*>(row.data())[b].d = rand_half(rng, -0.01f, 0.01f);
      break;
    case DType::Q2_K:
      for (int64_t b = 0; b < nb; ++b) {
        auto& blk = reinterpret_cast<block_q2_K*>(row.data())[b];
        blk.d = rand_half(rng, 0.0f, 0.05f);
        blk.dmin = rand_half(rng, 0.0f, 0.05f);
      }
      break;
    case DType::Q3_K:
      for (int64_t b = 0; b < nb; ++b) reinterpret_cast<block_q3_K*>(row.data())[b].d = rand_half(rng, -0.01f, 0.01f);
      break;
    case DType::Q5_K:
      for (int64_t b = 0; b < nb; ++b) {
        auto& blk = reinterpret_cast<block_q5_K*>(row.data())[b];
        blk.d = rand_half(rng, 0.0f, 0.003f);
        blk.dmin = rand_half(rng, 0.0f, 0.005f);
      }
      break;
    case DType::IQ4_XS:
      for (int64_t b = 0; b < nb; ++b) reinterpret_cast<block_iq4_xs*>(row.data())[b].d = rand_half(rng, -0.0005f, 0.0005f);
      break;
    default: ADD_FAILURE() << "random_row: type " << dtype_name(t);
  }
  return row;
}

inline constexpr DType kAllTypes[] = {DType::F32,  DType::F16,  DType::BF16,  DType::Q8_0,   DType::Q4_0,
                                      DType::Q4_K, DType::Q6_K, DType::Q4_1,  DType::Q5_0,   DType::Q5_1,
                                      DType::IQ4_NL, DType::Q2_K, DType::Q3_K, DType::Q5_K, DType::IQ4_XS};

// The activation format the dot products of weight type t use.
enum class ActFormat { F32, Q8_0, Q8_1, Q8_K };
inline ActFormat act_format(DType t) {
  switch (t) {
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::IQ4_NL: return ActFormat::Q8_0;
    case DType::Q4_1:
    case DType::Q5_1: return ActFormat::Q8_1;
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::IQ4_XS: return ActFormat::Q8_K;
    default: return ActFormat::F32;
  }
}

// True for the types kvshrink has a scalar quantiser for (ref::quantize_row); tests make the
// others' weights from random blocks (random_row).
inline bool has_quantizer(DType t) {
  try {
    std::vector<float> x(256, 0.5f);
    std::vector<uint8_t> y(dtype_row_bytes(t, 256));
    ref::quantize_row(t, x.data(), y.data(), 256);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// Row lengths to test for a type: odd ones for float types, several block counts otherwise.
inline std::vector<int64_t> test_lengths(DType t) {
  switch (dtype_info(t).block_size) {
    case 1: return {1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 257, 576, 1001};
    case 32: return {32, 64, 96, 160, 576, 1536};
    default: return {256, 512, 768, 1536};
  }
}

}  // namespace kvs::kernels::test
