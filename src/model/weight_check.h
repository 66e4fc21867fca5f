// Load-time check that a weight tensor holds only finite values, read in place (no conversion).
// Plain types (f32, f16, bf16) are checked value by value; block types by their fp16 scale fields
// (d, and dmin / m where the type has one): every value of a block is a small integer, or a
// 6-bit sub-scale times such an integer, times those fields, so it is finite exactly when they are.
#pragma once
#include <string>

#include "core/tensor_view.h"

namespace kvs {

// Throws kvs::Error naming `src`, the tensor, its type and the first non-finite value (element and
// row of a plain type; block, row and field of a block type). Types no kernel computes with are
// left to the caller's own error.
void check_weights_finite(const TensorView& t, const std::string& src);

}  // namespace kvs
