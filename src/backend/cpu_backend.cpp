// CpuBackend: each op checks its operands once, then runs the kernel table's row functions over
// the rows, across the pool when there is more than one row. Matmuls are kernels::matmul_with on
// this backend's table with the default configuration: with active_kernels() the same code and
// bits as kernels::matmul.
#include "backend/cpu_backend.h"

#include <cmath>
#include <cstring>

#include "backend/rope_cos_sin.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "kernels/matmul_internal.h"

namespace kvs::backend {
namespace {

const kernels::MatmulConfig kDefaultMatmul{};

// fn(t) for every row t in [0, n), across the pool's threads when there is more than one row.
template <typename Fn>
void for_rows(ThreadPool& pool, int64_t n, Fn&& fn) {
  if (n == 1) {
    fn(int64_t{0});
    return;
  }
  pool.parallel_for(n, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) fn(t);
  });
}

void check_f32(const Tensor& t, const char* op, const char* what) {
  if (!t.on_host()) fail("{}: {} is on device {}, not on the CPU", op, what, device_name(t.device));
  if (t.dtype != DType::F32) fail("{}: {} has type {}, expected f32", op, what, dtype_name(t.dtype));
  if (t.rows < 0 || t.cols < 0 || t.stride < t.cols) fail("{}: {} has shape [{}][{}] with row stride {}", op, what, t.rows, t.cols, t.stride);
  if (t.rows > 0 && t.cols > 0 && t.buf.host == nullptr) fail("{}: {} has no buffer", op, what);
}

void check_same_shape(const Tensor& a, const Tensor& b, const char* op, const char* an, const char* bn) {
  if (a.rows != b.rows || a.cols != b.cols)
    fail("{}: {} is [{}][{}] but {} is [{}][{}]", op, an, a.rows, a.cols, bn, b.rows, b.cols);
}

// An F32 vector weight (norm weights, biases) of n elements.
void check_vector(const TensorView& w, int64_t n, const char* op, const char* what) {
  if (!w.valid()) fail("{}: {} is missing", op, what);
  if (w.type != DType::F32) fail("{}: {} '{}' has type {}, expected f32", op, what, w.name, dtype_name(w.type));
  if (w.n_elements() != n) fail("{}: {} '{}' has {} elements, expected {}", op, what, w.name, w.n_elements(), n);
}

void check_weight(const TensorView& W, const Tensor& x, const Tensor& y, const char* op) {
  check_f32(x, op, "input");
  check_f32(y, op, "output");
  if (!W.valid()) fail("{}: the weight is missing", op);
  if (x.cols != W.cols()) fail("{}: input rows have {} columns but weight '{}' {} has {}", op, x.cols, W.name, shape_str(W), W.cols());
  if (y.rows != x.rows || y.cols != W.rows())
    fail("{}: output is [{}][{}], expected [{}][{}] for weight '{}'", op, y.rows, y.cols, x.rows, W.rows(), W.name);
  if (x.stride != x.cols) fail("{}: the input's rows must be contiguous (stride {} for {} columns)", op, x.stride, x.cols);
}

// tanh-approximated GELU, 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))): torch's
// gelu(approximate="tanh") and ggml_gelu_f32.
float gelu_tanh(float v) {
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f, kA = 0.044715f;
  return 0.5f * v * (1.0f + std::tanh(kSqrt2OverPi * v * (1.0f + kA * v * v)));
}

}  // namespace

CpuBackend::CpuBackend(const kernels::KernelTable& k, ThreadPool& pool) : k_(k), pool_(pool) {}

std::string CpuBackend::name() const { return std::string("cpu/") + k_.name; }

void CpuBackend::matmul(const TensorView& W, const Tensor& x, Tensor& y) {
  check_weight(W, x, y, "matmul");
  kernels::matmul_with(k_, kDefaultMatmul, W, x.row(0), x.rows, y.row(0), pool_, mm_, y.stride);
}

void CpuBackend::matmul_shared(std::span<const MatmulOut> outs, const Tensor& x) {
  kernels::MatmulTarget t[4];
  if (outs.size() > 4) {
    for (const MatmulOut& o : outs) {
      Tensor y = o.y;
      matmul(*o.W, x, y);
    }
    return;
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    if (!outs[i].W) fail("matmul_shared: output {} has no weight", i);
    check_weight(*outs[i].W, x, outs[i].y, "matmul_shared");
    t[i] = {outs[i].W, outs[i].y.row(0), outs[i].y.stride};
  }
  kernels::matmul_shared_with(k_, kDefaultMatmul, std::span<const kernels::MatmulTarget>(t, outs.size()), x.row(0),
                              x.rows, pool_, mm_);
}

void CpuBackend::rms_norm(const Tensor& x, const TensorView& w, Tensor& out, float eps) {
  check_f32(x, "rms_norm", "input");
  check_f32(out, "rms_norm", "output");
  check_same_shape(x, out, "rms_norm", "input", "output");
  const int64_t g = w.valid() ? w.n_elements() : 0;
  if (g <= 0 || x.cols % g != 0)
    fail("rms_norm: weight '{}' has {} elements, which does not divide the rows' {} columns", w.name, g, x.cols);
  check_vector(w, g, "rms_norm", "weight");
  const float* wv = w.f32();
  for_rows(pool_, x.rows, [&](int64_t t) {
    const float* xr = x.row(t);
    float* o = out.row(t);
    for (int64_t j = 0; j < x.cols; j += g) k_.rmsnorm(xr + j, wv, o + j, g, eps);
  });
}

void CpuBackend::layer_norm(const Tensor& x, const TensorView& w, const TensorView& b, Tensor& out, float eps) {
  check_f32(x, "layer_norm", "input");
  check_f32(out, "layer_norm", "output");
  check_same_shape(x, out, "layer_norm", "input", "output");
  check_vector(w, x.cols, "layer_norm", "weight");
  if (b.valid()) check_vector(b, x.cols, "layer_norm", "bias");
  const float* wv = w.f32();
  const float* bv = b.valid() ? b.f32() : nullptr;
  const int64_t n = x.cols;
  for_rows(pool_, x.rows, [&](int64_t t) {
    const float* xr = x.row(t);
    float* o = out.row(t);
    // mean and variance in double: one pass each, as torch's layer_norm up to rounding
    double mean = 0;
    for (int64_t i = 0; i < n; ++i) mean += xr[i];
    mean /= static_cast<double>(n);
    double var = 0;
    for (int64_t i = 0; i < n; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= static_cast<double>(n);
    const float m = static_cast<float>(mean), inv = static_cast<float>(1.0 / std::sqrt(var + eps));
    for (int64_t i = 0; i < n; ++i) o[i] = (xr[i] - m) * inv * wv[i] + (bv ? bv[i] : 0.0f);
  });
}

void CpuBackend::add(Tensor& y, const Tensor& x) {
  check_f32(y, "add", "sum");
  check_f32(x, "add", "addend");
  check_same_shape(y, x, "add", "sum", "addend");
  for_rows(pool_, y.rows, [&](int64_t t) { k_.add_f32(y.row(t), x.row(t), y.cols); });
}

void CpuBackend::add_then_rms_norm(Tensor& y, const Tensor& x, const TensorView& w, Tensor& out, float eps) {
  check_f32(y, "add_then_rms_norm", "sum");
  check_f32(x, "add_then_rms_norm", "addend");
  check_f32(out, "add_then_rms_norm", "output");
  check_same_shape(y, x, "add_then_rms_norm", "sum", "addend");
  check_same_shape(y, out, "add_then_rms_norm", "sum", "output");
  check_vector(w, y.cols, "add_then_rms_norm", "weight");
  for_rows(pool_, y.rows, [&](int64_t t) {
    float* yr = y.row(t);
    k_.add_f32(yr, x.row(t), y.cols);
    k_.rmsnorm(yr, w.f32(), out.row(t), y.cols, eps);
  });
}

void CpuBackend::add_bias(Tensor& y, const TensorView& b) {
  check_f32(y, "add_bias", "output");
  check_vector(b, y.cols, "add_bias", "bias");
  for_rows(pool_, y.rows, [&](int64_t t) { k_.add_f32(y.row(t), b.f32(), y.cols); });
}

void CpuBackend::scale(Tensor& x, float s) {
  check_f32(x, "scale", "input");
  for_rows(pool_, x.rows, [&](int64_t t) { k_.scale_f32(x.row(t), s, x.cols); });
}

void CpuBackend::softcap(Tensor& x, float c) {
  check_f32(x, "softcap", "input");
  if (!(c > 0) || !std::isfinite(c)) fail("softcap: the cap must be a positive finite number (got {})", c);
  // c * tanh(x / c) as llama.cpp (scale by 1/c, tanh, scale by c)
  const float inv = 1.0f / c;
  for_rows(pool_, x.rows, [&](int64_t t) {
    float* r = x.row(t);
    for (int64_t i = 0; i < x.cols; ++i) r[i] = c * std::tanh(r[i] * inv);
  });
}

void CpuBackend::silu_mul(Tensor& gate, const Tensor& up) {
  check_f32(gate, "silu_mul", "gate");
  check_f32(up, "silu_mul", "up");
  check_same_shape(gate, up, "silu_mul", "gate", "up");
  for_rows(pool_, gate.rows, [&](int64_t t) { k_.silu_mul(gate.row(t), up.row(t), gate.cols); });
}

void CpuBackend::gelu_tanh_mul(Tensor& gate, const Tensor& up, bool f16_compat) {
  check_f32(gate, "gelu_tanh_mul", "gate");
  check_f32(up, "gelu_tanh_mul", "up");
  check_same_shape(gate, up, "gelu_tanh_mul", "gate", "up");
  for_rows(pool_, gate.rows, [&](int64_t t) {
    float* x = gate.row(t);
    const float* u = up.row(t);
    for (int64_t i = 0; i < gate.cols; ++i) {
      float g;
      if (!f16_compat) {
        g = gelu_tanh(x[i]);
      } else if (x[i] <= -10.0f) {  // ggml_vec_gelu_f32 with GGML_GELU_FP16: outside (-10, 10) exact, else a
        g = 0.0f;                   // table of F16 results indexed by the F16-rounded input
      } else if (x[i] >= 10.0f) {
        g = x[i];
      } else {
        g = fp16_to_fp32(fp32_to_fp16(gelu_tanh(fp16_to_fp32(fp32_to_fp16(x[i])))));
      }
      x[i] = g * u[i];
    }
  });
}

void CpuBackend::copy(const Tensor& src, Tensor& dst) {
  check_f32(src, "copy", "source");
  check_f32(dst, "copy", "destination");
  check_same_shape(src, dst, "copy", "source", "destination");
  if (src.stride == src.cols && dst.stride == dst.cols) {
    if (src.rows * src.cols > 0) std::memmove(dst.row(0), src.row(0), sizeof(float) * static_cast<size_t>(src.rows * src.cols));
    return;
  }
  for (int64_t t = 0; t < src.rows; ++t) std::memmove(dst.row(t), src.row(t), sizeof(float) * static_cast<size_t>(src.cols));
}

void CpuBackend::gather_rows(const Tensor& src, std::span<const int> rows, Tensor& dst) {
  check_f32(src, "gather_rows", "source");
  check_f32(dst, "gather_rows", "destination");
  if (dst.rows != static_cast<int64_t>(rows.size()) || dst.cols != src.cols)
    fail("gather_rows: destination is [{}][{}], expected [{}][{}]", dst.rows, dst.cols, rows.size(), src.cols);
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i] < 0 || rows[i] >= src.rows) fail("gather_rows: row {} is outside the source's {} rows", rows[i], src.rows);
  for (size_t i = 0; i < rows.size(); ++i)
    std::memmove(dst.row(static_cast<int64_t>(i)), src.row(rows[i]), sizeof(float) * static_cast<size_t>(src.cols));
}

void CpuBackend::rope_cos_sin(std::span<const float> inv_freq, const int32_t* pos, Tensor& out) {
  check_f32(out, "rope_cos_sin", "output");
  if (out.cols != 2 * static_cast<int64_t>(inv_freq.size()))
    fail("rope_cos_sin: output rows have {} columns, expected 2 x {} frequencies", out.cols, inv_freq.size());
  if (out.stride != out.cols) fail("rope_cos_sin: the output's rows must be contiguous");
  if (out.rows > 0 && !pos) fail("rope_cos_sin: no positions");
  rope_cos_sin_host(inv_freq, pos, static_cast<int>(out.rows), out.row(0));
}

void CpuBackend::rope(Tensor& x, int heads, int head_dim, int rot_dim, const Tensor& cos_sin, RopeStyle style) {
  check_f32(x, "rope", "input");
  check_f32(cos_sin, "rope", "cos_sin");
  if (heads <= 0 || head_dim <= 0 || x.cols != static_cast<int64_t>(heads) * head_dim)
    fail("rope: rows of {} columns are not {} heads of {}", x.cols, heads, head_dim);
  if (rot_dim < 0 || rot_dim % 2 != 0 || rot_dim > head_dim)
    fail("rope: rotated dims {} must be even and at most head_dim {}", rot_dim, head_dim);
  if (cos_sin.cols < rot_dim) fail("rope: cos_sin rows have {} columns, fewer than the {} rotated dims", cos_sin.cols, rot_dim);
  if (cos_sin.rows != 1 && cos_sin.rows != x.rows)
    fail("rope: cos_sin has {} rows for {} input rows (one shared row, or one per row)", cos_sin.rows, x.rows);
  const bool shared = cos_sin.rows == 1;
  for_rows(pool_, x.rows, [&](int64_t t) { k_.rope(x.row(t), heads, head_dim, rot_dim, cos_sin.row(shared ? 0 : t), style); });
}

void CpuBackend::embed_rows(const TensorView& table, const int32_t* tokens, Tensor& out, float scale) {
  check_f32(out, "embed_rows", "output");
  if (!table.valid()) fail("embed_rows: the embedding table is missing");
  if (!kernels::dtype_computable(table.type)) fail("embed_rows: {}", kernels::cannot_compute_message(table.type));
  if (table.cols() != out.cols)
    fail("embed_rows: table '{}' {} has rows of {}, the output {}", table.name, shape_str(table), table.cols(), out.cols);
  if (out.rows > 0 && !tokens) fail("embed_rows: no tokens");
  for (int64_t t = 0; t < out.rows; ++t)
    if (tokens[t] < 0 || tokens[t] >= table.rows())
      fail("embed_rows: token {} at index {} is outside the table's {} rows", tokens[t], t, table.rows());
  const kernels::DequantFn dq = kernels::dequant_fn(k_, table.type);
  const int64_t E = out.cols;
  for_rows(pool_, out.rows, [&](int64_t t) {
    float* o = out.row(t);
    if (dq) dq(table.row(tokens[t]), o, E);
    else std::memcpy(o, table.row(tokens[t]), sizeof(float) * static_cast<size_t>(E));
    if (scale != 1.0f) k_.scale_f32(o, scale, E);
  });
}

void CpuBackend::argmax_rows(const Tensor& x, int64_t* out) {
  check_f32(x, "argmax_rows", "input");
  if (x.cols < 1) fail("argmax_rows: rows are empty");
  for (int64_t t = 0; t < x.rows; ++t) out[t] = k_.argmax_f32(x.row(t), x.cols);
}

void CpuBackend::to_host(const Tensor& x, float* host) {
  check_f32(x, "to_host", "input");
  if (x.rows * x.cols == 0 || (host == x.row(0) && x.stride == x.cols)) return;
  Tensor dst = Tensor::host_f32(host, x.rows, x.cols);
  copy(x, dst);
}

}  // namespace kvs::backend
