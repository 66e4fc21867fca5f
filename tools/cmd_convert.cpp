// kvshrink convert: GGUF <-> Hugging Face directory, with weight type conversion.
#include <fmt/format.h>

#include "cli_common.h"
#include "core/atomic_output.h"
#include "core/error.h"
#include "core/paths.h"
#include "core/timer.h"
#include "model/export.h"
#include "model/model.h"

namespace kvs::cli {
namespace {

struct ConvertOptions {
  std::string model, out, type = "f32", tokenizer_json;
};

void run_convert(const ConvertOptions& o) {
  DType type;
  if (!dtype_from_name(o.type, &type)) fail("--type '{}' is not a known tensor type", o.type);
  const bool to_gguf = o.out.size() > 5 && o.out.substr(o.out.size() - 5) == ".gguf";
  // The output is checked before the model is read (a directory where a file goes, a folder of
  // other things, an unwritable parent), and written whole or not at all (core/atomic_output.h).
  if (to_gguf)
    kvs::check_output_file(o.out, "-o");
  else
    kvs::check_output_dir(o.out, "-o", "config.json");
  if (!o.tokenizer_json.empty()) require_regular_file(o.tokenizer_json, "--tokenizer-json");
  Timer t;
  auto m = Model::load(o.model);
  if (to_gguf) {
    export_gguf(*m, o.out, type);
  } else {
    // HF -> HF keeps the source's tokenizer.json as it is; otherwise (GGUF -> HF) one is written
    // from the vocabulary. Either way the folder's tokenizer is checked against the model's.
    std::string tj = o.tokenizer_json;
    if (tj.empty() && m->format == "hf" && describe_path_type(o.model + "/tokenizer.json") == "a regular file")
      tj = o.model + "/tokenizer.json";
    export_hf(*m, o.out, type, tj);
  }
  fmt::print(stderr, "wrote {} ({} {}) in {:.1f} s\n", o.out, to_gguf ? "GGUF" : "HF directory", o.type, t.seconds());
}

}  // namespace

void register_convert(CLI::App& app) {
  auto o = std::make_shared<ConvertOptions>();
  CLI::App* cmd = app.add_subcommand("convert", "convert a model: to GGUF (OUT ends in .gguf) or to a HF directory");
  cmd->add_option("-m,--model", o->model, "source GGUF file or HF directory")->required();
  cmd->add_option("-o,--out", o->out, "output .gguf file or directory")->required();
  cmd->add_option("--type", o->type, "weight type (GGUF: f32 f16 bf16 q8_0 q4_0 q4_k q6_k; HF: f32 f16 bf16)")
      ->capture_default_str();
  cmd->add_option("--tokenizer-json", o->tokenizer_json, "tokenizer.json to copy into a HF output (default: the source's own, or one written from the vocabulary)");
  cmd->callback([o] { run_convert(*o); });
}

}  // namespace kvs::cli
