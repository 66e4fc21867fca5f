// Writing the inspect page and heatmap (cmd_inspect.cpp); also used by `kvshrink run --inspect`.
#pragma once
#include <string>

#include "eval/inspect/html.h"

namespace kvs::cli {
// Writes the HTML page to html_path and the PNG heatmap to png_path (each skipped when empty).
void write_inspect_outputs(const inspect::InspectPage& page, const std::string& html_path, const std::string& png_path);
}  // namespace kvs::cli
