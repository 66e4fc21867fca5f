#include "runtime/calibration_store.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "core/error.h"

namespace kvs {
namespace fs = std::filesystem;

namespace {
std::string fingerprint_hex(const Model& m) { return fmt::format("{:016x}", m.fingerprint); }
}  // namespace

std::string calibration_path(const Model& m, const std::string& press) {
  if (const char* dir = std::getenv("KVSHRINK_CALIB_DIR"); dir && *dir)
    return (fs::path(dir) / (press + "-" + fingerprint_hex(m) + ".json")).string();
  std::error_code ec;
  const fs::path p(m.path);
  if (fs::is_directory(p, ec)) return (p / "kvshrink-calib" / (press + ".json")).string();
  return (fs::path(m.path + ".kvshrink-calib") / (press + ".json")).string();
}

std::string save_calibration(const Model& m, const std::string& press, const nlohmann::json& data,
                             const std::string& path) {
  const std::string out = path.empty() ? calibration_path(m, press) : path;
  nlohmann::json j = {{"format", "kvshrink-calibration"},
                      {"version", 1},
                      {"press", press},
                      {"model_fingerprint", fingerprint_hex(m)},
                      {"model_name", m.name},
                      {"data", data}};
  std::error_code ec;
  const fs::path parent = fs::path(out).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  if (ec) fail("{}: cannot create the calibration folder: {}", parent.string(), ec.message());
  const std::string tmp = out + fmt::format(".tmp.{}", ::getpid());
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << j.dump(1) << "\n";
    f.flush();
    if (!f) {
      fs::remove(tmp, ec);
      fail("{}: cannot write the calibration file", out);
    }
  }
  fs::rename(tmp, out, ec);
  if (ec) {
    fs::remove(tmp, ec);
    fail("{}: cannot move the calibration file into place: {}", out, ec.message());
  }
  return out;
}

std::optional<nlohmann::json> load_calibration(const Model& m, const std::string& press, const std::string& path) {
  const std::string in = path.empty() ? calibration_path(m, press) : path;
  std::error_code ec;
  if (!fs::exists(in, ec)) return std::nullopt;
  if (!fs::is_regular_file(in, ec)) fail("{}: the calibration path is not a regular file", in);
  std::ifstream f(in);
  std::stringstream ss;
  ss << f.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    fail("{}: corrupt calibration file: {}", in, e.what());
  }
  auto str = [&](const char* k) -> std::string {
    if (!j.is_object() || !j.contains(k) || !j[k].is_string()) fail("{}: calibration file lacks a string '{}'", in, k);
    return j[k].get<std::string>();
  };
  if (str("format") != "kvshrink-calibration") fail("{}: not a kvshrink calibration file", in);
  if (str("press") != press) fail("{}: calibration for press '{}', not '{}'", in, str("press"), press);
  if (str("model_fingerprint") != fingerprint_hex(m))
    fail("{}: calibration made with model '{}' (fingerprint {}), not this one ({}); run `kvshrink calibrate --press {}`",
         in, j.value("model_name", std::string("?")), str("model_fingerprint"), fingerprint_hex(m), press);
  if (!j.contains("data") || !j["data"].is_object()) fail("{}: calibration file lacks its 'data' object", in);
  return j["data"];
}

}  // namespace kvs
