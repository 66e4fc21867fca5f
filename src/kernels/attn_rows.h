// Compatibility include: the attention row kernels (qk_rows_*, pv_rows_*) are declared in ops.h
// with the other dispatched kernels. Include kernels/ops.h in new code.
#pragma once
#include "kernels/ops.h"
