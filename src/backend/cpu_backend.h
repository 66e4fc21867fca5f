// The CPU behind the Backend seam: one kernel table (generic, AVX2 or AVX-512: kernels/cpu/
// kernel_table.h), the thread pool the ops split their rows over, and the matmul scratch kept
// across calls so the hot path never allocates. Ops over several rows run across the pool; a
// single row runs on the calling thread.
#pragma once
#include <string>

#include "backend/backend.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/matmul.h"

namespace kvs::backend {

class CpuBackend final : public Backend {
 public:
  // k: the table to compute with (active_kernels() for the machine's best; tests pass each one
  // the CPU can run). The pool outlives the backend.
  CpuBackend(const kernels::KernelTable& k, ThreadPool& pool);

  Device device() const override { return Device::cpu(); }
  std::string name() const override;
  const kernels::KernelTable& table() const { return k_; }

  void matmul(const TensorView& W, const Tensor& x, Tensor& y) override;
  void matmul_shared(std::span<const MatmulOut> outs, const Tensor& x) override;
  void rms_norm(const Tensor& x, const TensorView& w, Tensor& out, float eps) override;
  void layer_norm(const Tensor& x, const TensorView& w, const TensorView& b, Tensor& out, float eps) override;
  void add(Tensor& y, const Tensor& x) override;
  void add_then_rms_norm(Tensor& y, const Tensor& x, const TensorView& w, Tensor& out, float eps) override;
  void add_bias(Tensor& y, const TensorView& b) override;
  void scale(Tensor& x, float s) override;
  void softcap(Tensor& x, float c) override;
  void silu_mul(Tensor& gate, const Tensor& up) override;
  void gelu_tanh_mul(Tensor& gate, const Tensor& up, bool f16_compat) override;
  void copy(const Tensor& src, Tensor& dst) override;
  void gather_rows(const Tensor& src, std::span<const int> rows, Tensor& dst) override;
  void rope_cos_sin(std::span<const float> inv_freq, const int32_t* pos, Tensor& out) override;
  void rope(Tensor& x, int heads, int head_dim, int rot_dim, const Tensor& cos_sin, RopeStyle style) override;
  void embed_rows(const TensorView& table, const int32_t* tokens, Tensor& out, float scale) override;
  void argmax_rows(const Tensor& x, int64_t* out) override;
  void to_host(const Tensor& x, float* host) override;

 private:
  const kernels::KernelTable& k_;
  ThreadPool& pool_;
  kernels::MatmulScratch mm_;
};

}  // namespace kvs::backend
