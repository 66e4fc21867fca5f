// `kvshrink calibrate --press quality --opt press=P`: the (alpha, beta) fit of context-calibrated
// compression for any press (calibrate_quality.cpp; used by press/budget/calibrated.h).
#pragma once
#include "eval/calibrators.h"

namespace kvs::eval {

CalibratorInfo quality_calibrator();

}  // namespace kvs::eval
