// kvshrink convert: GGUF <-> Hugging Face directory, with weight type conversion, or GGUF with
// llama.cpp's per-tensor quantization mix of a preset (--preset q4_k_m; model/quant_mix.h).
#include <fmt/format.h>

#include <optional>

#include "cli_common.h"
#include "core/atomic_output.h"
#include "core/error.h"
#include "core/paths.h"
#include "core/timer.h"
#include "model/export.h"
#include "model/model.h"
#include "model/quant_mix.h"

namespace kvs::cli {
namespace {

struct ConvertOptions {
  std::string model, out, type, preset, tokenizer_json;
};

// A preset name that is not also a tensor type (q4_k_m, q3_k_s, ...): --type takes it as --preset.
bool preset_only_name(const std::string& n) {
  DType t;
  return !dtype_from_name(n, &t) && find_quant_preset(n).has_value();
}

void run_convert(const ConvertOptions& opt) {
  ConvertOptions o = opt;
  if (!o.type.empty() && !o.preset.empty()) fail("give --type or --preset, not both");
  if (!o.type.empty() && preset_only_name(o.type)) std::swap(o.type, o.preset);
  std::optional<QuantPreset> preset;
  DType type = DType::F32;
  if (!o.preset.empty()) {
    preset = find_quant_preset(o.preset);  // throws for the importance-matrix presets
    if (!preset) fail("--preset '{}' is not a llama-quantize preset (known: {})", o.preset, quant_preset_names());
  } else if (!o.type.empty() && !dtype_from_name(o.type, &type)) {
    fail("--type '{}' is neither a tensor type nor a llama-quantize preset (presets: {})", o.type, quant_preset_names());
  }
  const bool to_gguf = o.out.size() > 5 && o.out.substr(o.out.size() - 5) == ".gguf";
  if (preset && !to_gguf) fail("--preset {} writes GGUF files; give an -o ending in .gguf", preset->name);
  // The output is checked before the model is read (a directory where a file goes, a folder of
  // other things, an unwritable parent), and written whole or not at all (core/atomic_output.h).
  if (to_gguf)
    kvs::check_output_file(o.out, "-o");
  else
    kvs::check_output_dir(o.out, "-o", "config.json");
  if (!o.tokenizer_json.empty()) require_regular_file(o.tokenizer_json, "--tokenizer-json");
  Timer t;
  auto m = Model::load(o.model);
  if (to_gguf && preset) {
    export_gguf(*m, o.out, *preset);
  } else if (to_gguf) {
    export_gguf(*m, o.out, type);
  } else {
    // HF -> HF keeps the source's tokenizer.json as it is; otherwise (GGUF -> HF) one is written
    // from the vocabulary. Either way the folder's tokenizer is checked against the model's.
    std::string tj = o.tokenizer_json;
    if (tj.empty() && m->format == "hf" && describe_path_type(o.model + "/tokenizer.json") == "a regular file")
      tj = o.model + "/tokenizer.json";
    export_hf(*m, o.out, type, tj);
  }
  fmt::print(stderr, "wrote {} ({} {}) in {:.1f} s\n", o.out, to_gguf ? "GGUF" : "HF directory",
             preset ? "preset " + preset->name : o.type.empty() ? std::string("f32") : o.type, t.seconds());
}

}  // namespace

void register_convert(CLI::App& app) {
  auto o = std::make_shared<ConvertOptions>();
  CLI::App* cmd = app.add_subcommand("convert", "convert a model: to GGUF (OUT ends in .gguf) or to a HF directory");
  cmd->add_option("-m,--model", o->model, "source GGUF file or HF directory")->required();
  cmd->add_option("-o,--out", o->out, "output .gguf file or directory")->required();
  cmd->add_option("--type", o->type,
                  "every 2-D weight in this type (default f32; GGUF: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k "
                  "q5_k q6_k iq4_nl iq4_xs, falling back to q8_0/f16 where a row does not fit a block; HF: f32 f16 "
                  "bf16), or a preset name such as q4_k_m (= --preset)");
  cmd->add_option("--preset", o->preset,
                  "llama-quantize's per-tensor mix of this preset (case-insensitive: Q2_K, Q3_K_S/M/L, Q4_0, Q4_1, Q4_K_S/M, "
                  "Q5_0, Q5_1, Q5_K_S/M, Q6_K, Q8_0, IQ4_NL, IQ4_XS, F16, BF16): the files users download");
  cmd->add_option("--tokenizer-json", o->tokenizer_json, "tokenizer.json to copy into a HF output (default: the source's own, or one written from the vocabulary)");
  cmd->callback([o] { run_convert(*o); });
}

}  // namespace kvs::cli
