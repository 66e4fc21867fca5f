// `kvshrink calibrate --press kvzip`: KVzip's context-independent head scores (calibrate_kvzip.cpp).
#pragma once
#include "eval/calibrators.h"

namespace kvs::eval {

CalibratorInfo kvzip_calibrator();

}  // namespace kvs::eval
