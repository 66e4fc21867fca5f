// The compute seam between the model's forward pass and the hardware: a Backend runs ops at layer
// granularity (a whole chunk of rows per call) on tensors of its device. The architecture blocks
// (runtime/arch/) are written in these ops only; CpuBackend (cpu_backend.h) implements them with
// the kernel tables, a thread pool and scratch buffers. A second backend (Vulkan, docs/backend.md)
// implements the same interface and runs the same tests (tests/backend/).
//
// Every op checks its operands (device, type, shapes) and fails naming the op and what was wrong.
// Weights and norm vectors are the model's TensorViews (host data today; a device backend maps
// each to its uploaded copy). Outputs may alias inputs where an op says so.
//
// Dimension legend: T = rows (tokens) of a chunk, E = row width, H = heads, D = head_dim,
// R = rope_dim, F = feed-forward width, V = vocabulary.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "backend/device.h"
#include "backend/tensor.h"
#include "core/tensor_view.h"
#include "kernels/ops.h"  // kernels::RopeStyle

namespace kvs {
class ThreadPool;
}

namespace kvs::backend {

using kernels::RopeStyle;

// One of several products over the same input (matmul_shared): y = W . x.
struct MatmulOut {
  const TensorView* W;
  Tensor y;  // [T][W.rows()]
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  // "cpu/avx512", "cpu/generic": the device and the implementation chosen on it.
  virtual std::string name() const = 0;

  // ---- linear layers ----------------------------------------------------------------------
  // y [T][W.rows()] = x [T][W.cols()] . W^T, W of any computable type.
  virtual void matmul(const TensorView& W, const Tensor& x, Tensor& y) = 0;
  // y_i = W_i . x for every output (a layer's Q, K, V; gate and up): the same values as matmul
  // one after the other, the input read (and converted) once where the implementation can.
  virtual void matmul_shared(std::span<const MatmulOut> outs, const Tensor& x) = 0;

  // ---- norms ------------------------------------------------------------------------------
  // out = RMSNorm(x) * w over each group of w.n_elements() consecutive elements of a row (the row
  // itself when w has E elements, each head when w has D: Qwen3's q_norm / k_norm). out may be x.
  virtual void rms_norm(const Tensor& x, const TensorView& w, Tensor& out, float eps) = 0;
  // out = (x - mean) / sqrt(var + eps) * w (+ b when b is valid), per row. out may be x.
  virtual void layer_norm(const Tensor& x, const TensorView& w, const TensorView& b, Tensor& out, float eps) = 0;

  // ---- element-wise -----------------------------------------------------------------------
  // y += x (the residual add; same shapes).
  virtual void add(Tensor& y, const Tensor& x) = 0;
  // y += x, then out = RMSNorm(y) * w row by row (the residual add fused with the next norm: the
  // same values as add then rms_norm). out may be x.
  virtual void add_then_rms_norm(Tensor& y, const Tensor& x, const TensorView& w, Tensor& out, float eps) = 0;
  // y[t] += b for every row t (a projection's bias, b [E]).
  virtual void add_bias(Tensor& y, const TensorView& b) = 0;
  // x *= s.
  virtual void scale(Tensor& x, float s) = 0;
  // x = c * tanh(x / c) (Gemma 2's logit soft-capping; c > 0).
  virtual void softcap(Tensor& x, float c) = 0;
  // gate = silu(gate) * up (SwiGLU).
  virtual void silu_mul(Tensor& gate, const Tensor& up) = 0;
  // gate = gelu_tanh(gate) * up (GeGLU). f16_compat: GELU's input and output rounded to F16 as
  // ggml's CPU table lookup does (AttnShape::f16_compat); else F32 as transformers.
  virtual void gelu_tanh_mul(Tensor& gate, const Tensor& up, bool f16_compat) = 0;
  // dst = src (same shapes; rows may be strided differently).
  virtual void copy(const Tensor& src, Tensor& dst) = 0;
  // dst[i] = src[rows[i]] for i < rows.size() (dst has rows.size() rows).
  virtual void gather_rows(const Tensor& src, std::span<const int> rows, Tensor& dst) = 0;

  // ---- RoPE -------------------------------------------------------------------------------
  // out [T][R] = (cos, sin) of pos[t] * inv_freq[i] for i < R / 2: the rotation table of each
  // row's position. inv_freq is the model's (Llama 3's rope_freqs divisors already applied at load).
  virtual void rope_cos_sin(std::span<const float> inv_freq, const int32_t* pos, Tensor& out) = 0;
  // Rotates each row's `heads` vectors of head_dim (x [T][heads * head_dim], in place): the first
  // rot_dim dims of each head with row t of cos_sin [T][rot_dim], or its only row when it has one
  // (a table shared by every row). Interleaved (GGUF llama) or rotate-half (neox) pairs.
  virtual void rope(Tensor& x, int heads, int head_dim, int rot_dim, const Tensor& cos_sin, RopeStyle style) = 0;

  // ---- embedding and output ---------------------------------------------------------------
  // out[t] = table.row(tokens[t]) dequantised, times scale (1: untouched); out [n][E].
  virtual void embed_rows(const TensorView& table, const int32_t* tokens, Tensor& out, float scale) = 0;
  // out[t] = the first index of row t's largest value (NaNs never chosen), for greedy sampling.
  virtual void argmax_rows(const Tensor& x, int64_t* out) = 0;
  // host [x.rows][x.cols] = x (a no-op when x already is that host memory).
  virtual void to_host(const Tensor& x, float* host) = 0;

  // Not behind the seam yet (docs/backend.md): the cache append, cache page moves and attention run
  // in kvcache/ on host pages; they join this interface when the page bytes move into backend
  // buffers.
};

// The backend of a device (dispatch by device first; each backend then picks its implementation
// for the machine, the CPU's by ISA). pool: the CPU's threads. Fails naming a device this build
// cannot open.
std::unique_ptr<Backend> open_backend(const Device& d, ThreadPool& pool);

}  // namespace kvs::backend
