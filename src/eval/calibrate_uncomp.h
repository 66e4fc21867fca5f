// `kvshrink calibrate --press uncomp`: UNComp's head and layer groups (calibrate_uncomp.cpp).
#pragma once
#include "eval/calibrators.h"

namespace kvs::eval {

CalibratorInfo uncomp_calibrator();

}  // namespace kvs::eval
