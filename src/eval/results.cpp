#include "eval/results.h"

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/mapped_file.h"

namespace kvs::eval {
using nlohmann::json;

std::string result_key(const std::string& task, const std::string& press, const std::string& keep,
                       const std::string& sample) {
  return task + "\t" + press + "\t" + keep + "\t" + sample;
}

std::string result_key(const json& r) {
  return result_key(r.at("task").get<std::string>(), r.at("press").get<std::string>(), r.at("keep_label").get<std::string>(),
                    r.at("sample").get<std::string>());
}

std::string result_key(const nlohmann::ordered_json& r) {
  return result_key(r.at("task").get<std::string>(), r.at("press").get<std::string>(), r.at("keep_label").get<std::string>(),
                    r.at("sample").get<std::string>());
}

ResultsFile::ResultsFile(std::string path) : path_(std::move(path)) {
  bool ends_with_newline = true;
  if (std::filesystem::exists(path_)) {
    std::ifstream in(path_, std::ios::binary);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      try {
        done_.insert(result_key(json::parse(line)));
        ++existing_;
      } catch (const std::exception&) {
        ++malformed_;
      }
    }
    const std::string all = read_file(path_);
    ends_with_newline = all.empty() || all.back() == '\n';
  }
  f_ = std::fopen(path_.c_str(), "ab");
  if (!f_) fail("cannot open '{}' for appending", path_);
  if (!ends_with_newline) std::fputc('\n', f_);  // a line cut short stays on its own (malformed) line
}

ResultsFile::~ResultsFile() {
  if (f_) std::fclose(f_);
}

void ResultsFile::append(const nlohmann::ordered_json& r) {
  const std::string line = r.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
  if (std::fwrite(line.data(), 1, line.size(), f_) != line.size() || std::fflush(f_) != 0)
    fail("cannot write to '{}'", path_);
  done_.insert(result_key(r));
}

void check_run_identity(const std::string& dir, const json& identity, const json& info) {
  const std::string p = (std::filesystem::path(dir) / "run.json").string();
  if (std::filesystem::exists(p)) {
    json old;
    try {
      old = json::parse(read_file(p));
    } catch (const std::exception& e) {
      fail("{}: unreadable ({}); remove it or use another output directory", p, e.what());
    }
    std::string diff;
    // A null identity field matches an absent one (fields added later, e.g. question_template).
    for (const auto& [k, v] : identity.items())
      if (old.contains(k) ? old[k] != v : !v.is_null())
        diff += fmt::format("\n  {}: was {}, now {}", k, old.contains(k) ? old[k].dump() : "(absent)", v.dump());
    if (!diff.empty())
      fail("{} holds results of a different configuration:{}\nuse another -o directory, or --fresh to discard them", dir, diff);
    return;
  }
  json all = identity;
  if (info.is_object())
    for (const auto& [k, v] : info.items()) all[k] = v;
  std::ofstream out(p);
  out << all.dump(1) << "\n";
  if (!out) fail("cannot write '{}'", p);
}

}  // namespace kvs::eval
