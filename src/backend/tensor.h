// A device-tagged tensor: which device holds it, its element type, its shape (a matrix of rows
// of cols elements, rows `stride` elements apart) and a handle to the buffer holding it. On the
// CPU the handle is a host pointer; a device backend gives its own handle meaning (docs/backend.md).
// Tensors do not own memory: the buffers stay with whoever allocated them (the forward's
// Activations, the model's weights).
//
// Dimension legend: rows = tokens (or heads), cols = features.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/device.h"
#include "core/dtype.h"

namespace kvs::backend {

struct BufferHandle {
  void* host = nullptr;  // CPU: the first element's address
  uint64_t device = 0;   // a device backend's buffer id (0 on the CPU)
  size_t offset = 0;     // bytes from the start of that device buffer
};

struct Tensor {
  Device device;
  DType dtype = DType::F32;
  int64_t rows = 0, cols = 0;
  int64_t stride = 0;  // elements from one row to the next (>= cols)
  BufferHandle buf;

  // The F32 matrix [rows][cols] at p in host memory (rows `stride` apart; 0 means cols).
  static Tensor host_f32(float* p, int64_t rows, int64_t cols, int64_t stride = 0) {
    Tensor t;
    t.rows = rows;
    t.cols = cols;
    t.stride = stride ? stride : cols;
    t.buf.host = p;
    return t;
  }
  static Tensor host_f32(const float* p, int64_t rows, int64_t cols, int64_t stride = 0) {
    return host_f32(const_cast<float*>(p), rows, cols, stride);
  }

  bool on_host() const { return device.kind == DeviceKind::Cpu; }
  // Row r of a host F32 tensor (callers check on_host and dtype: Backend ops do).
  float* row(int64_t r) const { return static_cast<float*>(buf.host) + r * stride; }
  // Rows [first, first + n) as a tensor of their own.
  Tensor rows_view(int64_t first, int64_t n) const {
    Tensor t = *this;
    t.rows = n;
    if (on_host()) t.buf.host = row(first);
    else t.buf.offset += static_cast<size_t>(first) * dtype_row_bytes(dtype, stride);
    return t;
  }
};

}  // namespace kvs::backend
