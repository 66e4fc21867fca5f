// Compatibility include: exp_sub_sum and max_f32 are declared in ops.h with the other dispatched
// kernels (one AVX2 exp polynomial, exp_ps in cpu/simd_avx2.h). Include kernels/ops.h in new code.
#pragma once
#include "kernels/ops.h"
