// The backends every Backend test runs on: one CpuBackend per CPU kernel table (generic, AVX2,
// AVX-512; those this CPU cannot run are skipped). A second backend adds its entries to
// backends_under_test() and runs every test unchanged.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu_backend.h"
#include "core/thread_pool.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu_features.h"

namespace kvs::backend::test {

struct BackendCase {
  std::string name;
  std::function<bool()> available;  // false: the test is skipped (saying why: skip_reason)
  std::string skip_reason;
  std::function<std::unique_ptr<Backend>(ThreadPool&)> open;
};

inline bool cpu_avx2() {
  const auto& f = kernels::cpu_features();
  return f.avx2 && f.fma && f.f16c;
}
inline bool cpu_avx512() {
  const auto& f = kernels::cpu_features();
  return cpu_avx2() && f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl && f.avx512vnni && f.os_avx512;
}

inline std::vector<BackendCase> backends_under_test() {
  auto cpu = [](const kernels::KernelTable& (*table)()) {
    return [table](ThreadPool& pool) -> std::unique_ptr<Backend> { return std::make_unique<CpuBackend>(table(), pool); };
  };
  return {
      {"CpuGeneric", [] { return true; }, "", cpu(&kernels::generic_kernels)},
      {"CpuAvx2", cpu_avx2, "CPU lacks AVX2/FMA/F16C", cpu(&kernels::avx2_kernels)},
      {"CpuAvx512", cpu_avx512, "CPU or OS lacks AVX-512 F/BW/DQ/VL/VNNI", cpu(&kernels::avx512_kernels)},
  };
}

inline std::string case_name(const testing::TestParamInfo<BackendCase>& info) { return info.param.name; }

// A backend under test over a pool of 3 threads (ops over several rows split across it).
class BackendTest : public testing::TestWithParam<BackendCase> {
 protected:
  void SetUp() override {
    if (!GetParam().available()) GTEST_SKIP() << GetParam().skip_reason;
    be_ = GetParam().open(pool_);
  }
  Backend& be() { return *be_; }

  ThreadPool pool_{3};
  std::unique_ptr<Backend> be_;
};

#define KVS_BACKEND_SUITE(Suite) \
  INSTANTIATE_TEST_SUITE_P(Backends, Suite, testing::ValuesIn(::kvs::backend::test::backends_under_test()), \
                           ::kvs::backend::test::case_name)

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// An F32 vector as a weight view (norm weights, biases, F32 matrices [rows][cols]).
inline TensorView f32_view(const std::vector<float>& v, int64_t cols, int64_t rows = 1, const char* name = "w") {
  TensorView t;
  t.name = name;
  t.type = DType::F32;
  t.n_dims = rows > 1 ? 2 : 1;
  t.ne = {cols, rows, 1, 1};
  t.data = v.data();
  t.nbytes = v.size() * sizeof(float);
  return t;
}

// Host tensors the backend under test reads and writes. A device backend's tests upload these and
// download the outputs; on the CPU they are the memory itself.
inline Tensor host(std::vector<float>& v, int64_t rows, int64_t cols, int64_t stride = 0) {
  return Tensor::host_f32(v.data(), rows, cols, stride);
}

// Largest |a - b| relative to max(1, |b|) over the elements.
inline double max_rel_err(const std::vector<float>& a, const std::vector<double>& b) {
  double e = 0;
  for (size_t i = 0; i < a.size(); ++i) e = std::max(e, std::abs(a[i] - b[i]) / std::max(1.0, std::abs(b[i])));
  return e;
}

}  // namespace kvs::backend::test
