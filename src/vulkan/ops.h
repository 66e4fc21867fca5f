// The first device ops, recorded into the Context's command buffer (each followed by a barrier),
// run when the Context submits (Transfer::download submits too). Shapes follow kernels/ops.h;
// every buffer holds f32 unless named otherwise, and is bound from its view's offset.
// A view larger than the device's maxStorageBufferRange is refused, naming both sizes (splitting a
// tensor over several bindings comes with the forward pass, docs/vulkan.md).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/dtype.h"
#include "vulkan/memory.h"
#include "vulkan/pipeline_cache.h"

namespace kvs::vulkan {

// The two RoPE pairings of kernels/ops.h (RopeStyle), by the same names.
enum class Rope : uint32_t {
  Interleaved = 0,  // pairs (2i, 2i+1): GGUF llama
  RotateHalf = 1,   // pairs (i, i + rot_dim/2): neox / HF
};

class Ops {
 public:
  explicit Ops(Context& ctx);

  // Weight types mat_vec takes: F32, F16, Q8_0, Q4_0.
  static bool mat_vec_supports(DType t);
  // y[r] = W[r] . x for r < rows; W rows of `cols` elements of type wtype in GGUF layout (cols a
  // multiple of 32 for Q8_0/Q4_0), x [cols], y [rows]. Fails naming the type or the size.
  void mat_vec(DType wtype, const BufferView& W, int64_t rows, int64_t cols, const BufferView& x,
               const BufferView& y);
  // out[r] = rmsnorm(x[r]) * w for rows rows of n (out may be x's view).
  void rms_norm(const BufferView& x, const BufferView& w, const BufferView& out, int64_t rows, int64_t n, float eps);
  // In place on x [n_tok][n_heads][head_dim]; cos_sin [n_tok][rot_dim / 2][2].
  void rope(const BufferView& x, int64_t n_tok, int n_heads, int head_dim, int rot_dim, const BufferView& cos_sin,
            Rope style);
  // gate[i] = silu(gate[i]) * up[i], i < n.
  void silu_mul(const BufferView& gate, const BufferView& up, int64_t n);
  // y[i] += x[i], i < n.
  void add(const BufferView& y, const BufferView& x, int64_t n);
  // Each of rows rows of n softmaxed in place; lse [rows] gets each row's log-sum-exp.
  void soft_max(const BufferView& x, const BufferView& lse, int64_t rows, int64_t n);
  // out (one uint32) = the first index of the largest of x[0..n), NaNs never chosen.
  void argmax(const BufferView& x, int64_t n, const BufferView& out);

  PipelineCache& pipelines() { return pipelines_; }

 private:
  void dispatch(const char* op, const std::string& shader, std::initializer_list<BufferView> buffers,
                const void* push, uint32_t push_bytes, uint64_t groups, uint32_t wg);
  void need(const char* op, const char* what, const BufferView& v, uint64_t bytes) const;

  Context& ctx_;
  PipelineCache pipelines_;
};

}  // namespace kvs::vulkan
