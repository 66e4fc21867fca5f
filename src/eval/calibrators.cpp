#include "eval/calibrators.h"

#include "core/error.h"
#include "eval/calibrate_kvzip.h"
#include "eval/calibrate_quality.h"
#include "eval/calibrate_uncomp.h"

namespace kvs::eval {

namespace {
std::vector<CalibratorInfo> build() {
  std::vector<CalibratorInfo> v;
  // Seed methods add one line each: v.push_back(<paper>_calibrator());
  v.push_back(kvzip_calibrator());
  v.push_back(quality_calibrator());
  v.push_back(uncomp_calibrator());
  return v;
}
}  // namespace

const std::vector<CalibratorInfo>& calibrators() {
  static const std::vector<CalibratorInfo> v = build();
  return v;
}

const CalibratorInfo& calibrator(const std::string& press) {
  for (const auto& c : calibrators())
    if (c.press == press) return c;
  std::string names;
  for (const auto& c : calibrators()) names += (names.empty() ? "" : ", ") + c.press;
  fail("press '{}' has no calibration (presses with one: {})", press, names.empty() ? "none yet" : names);
}

}  // namespace kvs::eval
