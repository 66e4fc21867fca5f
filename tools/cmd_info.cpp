// kvshrink info: hyper-parameters, tensor types and memory of a model file.
#include <fmt/format.h>

#include <map>

#include "cli_common.h"
#include "core/timer.h"

namespace kvs::cli {
namespace {

void run_info(const std::string& path) {
  Timer t;
  auto m = Model::load(path);
  fmt::print("model:        {} ({} format, loaded in {:.2f} s)\n", m->name, m->format, t.seconds());
  fmt::print("shape:        {}\n", m->hp.summary());
  fmt::print("rope:         {} style, dim {}, theta {}, scaling {}{}\n",
             m->hp.rope_style == kernels::RopeStyle::Interleaved ? "interleaved" : "rotate-half", m->hp.rope_dim,
             m->hp.rope_theta, m->hp.rope_scaling.type,
             m->hp.rope_theta_swa > 0 ? fmt::format("; local layers theta {}, unscaled", m->hp.rope_theta_swa) : "");
  std::map<std::string, std::pair<int, size_t>> types;
  auto count = [&](const TensorView& v) {
    if (!v.valid()) return;
    auto& e = types[std::string(dtype_name(v.type))];
    e.first++;
    e.second += v.nbytes;
  };
  count(m->tok_embd);
  if (!m->hp.tied_embeddings) count(m->output);
  for (const auto& l : m->layers)
    for (const TensorView* v : {&l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down}) count(*v);
  for (const auto& [k, v] : types) fmt::print("tensors:      {:>4} x {:<5} {}\n", v.first, k, format_bytes(v.second));
  fmt::print("weights:      {} referenced, {} resident\n", format_bytes(m->weight_bytes()), format_bytes(m->resident_bytes()));
  const size_t kv_tok = 2ull * m->hp.n_layer * m->hp.n_head_kv * m->hp.head_dim * sizeof(float);
  fmt::print("kv per token: {} (f32), {} (f16)\n", format_bytes(kv_tok), format_bytes(kv_tok / 2));
  fmt::print("tokenizer:    {} tokens, {} (bos {}, eos {}), chat format {}\n", m->tokenizer->n_vocab(),
             m->tokenizer->spec().kind == TokenizerKind::SPM ? "sentencepiece" : "byte-level BPE", m->tokenizer->bos(),
             m->tokenizer->eos(), static_cast<int>(m->tokenizer->chat_format()));
  // Normalizer steps beside the vocabulary (GGUF: kvshrink's key, or implied by the pre-tokenizer).
  if (const auto& sp = m->tokenizer->spec(); !sp.normalizer_note.empty())
    fmt::print("normalizer:   {}\n", sp.normalizer_note);
  else if (sp.explicit_pipeline && !sp.normalizers.empty())
    fmt::print("normalizer:   {} (tokenizer.json)\n", describe_normalizers(sp.normalizers));
  fmt::print("fingerprint:  {:016x}\n", m->fingerprint);
}

}  // namespace

void register_info(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("info", "show a model's shape, tensor types and memory");
  cmd->add_option("model", *path, "GGUF file or HF model directory")->required();
  cmd->callback([path] { run_info(*path); });
}

}  // namespace kvs::cli
