// `kvshrink calibrate --press P`: per-model preparation a press needs before it can run (KVzip's
// context-independent head scores, Compactor's quality curve, UNComp's head and layer groups).
// Each calibrator runs the model on calibration data from the shared data directory and returns
// a JSON object that runtime/calibration_store.h saves next to the model; the press reads it back
// through ModelProbe::calibration(P).
#pragma once
#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

#include "eval/data.h"
#include "press/params.h"
#include "runtime/engine.h"

namespace kvs::eval {

struct CalibrateArgs {
  const Model& model;
  Engine& engine;
  DataStore& data;
  int samples = 0;      // calibration samples (0: the calibrator's default)
  int tokens = 0;       // tokens per sample (0: the calibrator's default)
  ParamMap options;     // press options the calibration runs with
  uint64_t seed = 0;
  bool progress = true; // progress lines on stderr
};

struct CalibratorInfo {
  std::string press;
  std::string description;  // one line: what is computed, on what data
  std::function<nlohmann::json(const CalibrateArgs&)> run;
};

// One entry per press that has a calibration; methods add theirs in calibrators.cpp.
const std::vector<CalibratorInfo>& calibrators();
// Throws kvs::Error listing the presses that have a calibration.
const CalibratorInfo& calibrator(const std::string& press);

}  // namespace kvs::eval
