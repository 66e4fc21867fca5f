// Per-model calibration data of presses (KVzip's head scores, Compactor's fitted quality curve,
// UNComp's head groups): made once per model by `kvshrink calibrate --press P`, stored next to
// the model and keyed by its fingerprint, read back by the press through the model probe.
//
//   GGUF file  path/m.gguf -> path/m.gguf.kvshrink-calib/<press>.json
//   HF folder  path/dir/   -> path/dir/kvshrink-calib/<press>.json
//   $KVSHRINK_CALIB_DIR, when set, replaces the folder (one folder for every model: the file name
//   then carries the fingerprint, <press>-<fingerprint>.json).
//
// File: {"format": "kvshrink-calibration", "version": 1, "press": P, "model_fingerprint": hex,
//        "model_name": ..., "data": {... method-specific ...}}
#pragma once
#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "model/model.h"

namespace kvs {

std::string calibration_path(const Model& m, const std::string& press);
// Writes atomically (temporary file + rename); creates the folder. `path` empty: the default.
std::string save_calibration(const Model& m, const std::string& press, const nlohmann::json& data,
                             const std::string& path = "");
// The `data` object, or nullopt when no file exists. Throws kvs::Error naming the file when it
// exists but is malformed, is for another press, or was made with another model.
std::optional<nlohmann::json> load_calibration(const Model& m, const std::string& press, const std::string& path = "");

}  // namespace kvs
