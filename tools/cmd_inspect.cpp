// kvshrink inspect: what a compressed context (.kvc) kept, as a self-contained HTML page (the
// context shaded by the fraction of heads keeping each token, a layer x KV-head grid of keep
// ratios, the press and its parameters) and optionally a PNG heatmap (tokens x layers). See
// docs/inspect.md. The page logic lives in src/eval/inspect/.
#include <fmt/format.h>

#include <filesystem>

#include "runtime/kvc_meta.h"
#include "cli_common.h"
#include "core/atomic_output.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "eval/inspect/heatmap.h"
#include "eval/inspect/kvc_positions.h"
#include "eval/inspect/page.h"
#include "inspect_output.h"
#include "kvcache/cache_file.h"
#include "load_tokenizer.h"

namespace kvs::cli {

void write_inspect_outputs(const inspect::InspectPage& page, const std::string& html_path, const std::string& png_path) {
  if (!html_path.empty()) {
    write_file_atomic(html_path, inspect::render_html(page));
    fmt::print(stderr, "wrote {} ({} tokens, {} layers x {} KV heads, {:.1f}% of the slots kept)\n", html_path, page.kept.n_tokens,
               page.kept.n_layer, page.kept.n_head_kv, 100 * page.kept.keep_ratio());
  }
  if (!png_path.empty()) {
    inspect::HeatmapOptions ho;
    ho.marked = inspect::find_marked(page.tokens, page.mark);
    inspect::write_png(png_path, inspect::render_heatmap(page.kept, ho));
    fmt::print(stderr, "wrote {}\n", png_path);
  }
}

namespace {

struct InspectOptions {
  std::string file, model, context_file, context_text, out, png, mark;
};

void run_inspect(const InspectOptions& o) {
  if (!o.context_file.empty() && !o.context_text.empty()) fail("give at most one of --context FILE or --context-text TEXT");
  const std::string html_path = o.out.empty() ? std::filesystem::path(o.file).replace_extension(".html").string() : o.out;
  check_output_file("-o", html_path);
  if (!o.png.empty()) check_output_file("--png", o.png);

  // Positions only: the K/V rows are skipped, so a large cache takes no more memory than its positions.
  const inspect::KvcPositions kvc = inspect::read_kvc_positions(o.file);
  const nlohmann::json& meta = kvc.header;
  check_cache_meta(meta, o.file);

  // The context's token ids: recorded in the header, or the text re-tokenized as it was compressed.
  const bool have_text = !o.context_file.empty() || !o.context_text.empty();
  const bool header_ids = meta.contains("context_ids") && !meta.at("context_ids").is_null();
  std::unique_ptr<Tokenizer> tok;
  std::vector<int32_t> ids;
  if (have_text || header_ids) {
    tok = load_tokenizer(o.model.empty() ? meta_model_path(meta, o.file) : o.model);
    if (header_ids) ids = inspect::header_context_ids(meta, tok->n_vocab(), o.file);
    if (have_text) {
      const std::string text = o.context_file.empty() ? o.context_text : read_file(o.context_file);
      const auto from_text = prompt_options_from_meta(meta).context_tokens(*tok, text);
      if (header_ids && from_text != ids)
        fail("{}: the context given is not the one the header records ({} vs {} tokens)", o.file, from_text.size(), ids.size());
      ids = from_text;
    }
  } else {
    fmt::print(stderr,
               "inspect: {} records no context text; tokens are shown as dots (pass --context FILE, the text it was "
               "compressed from)\n",
               o.file);
  }
  inspect::InspectPage page = inspect::make_page(meta, kvc.kept(inspect::context_length(meta, kvc.n_past)), tok.get(), ids,
                                                 std::filesystem::path(o.file).filename().string());
  page.mark = o.mark;
  write_inspect_outputs(page, html_path, o.png);
}

}  // namespace

void register_inspect(CLI::App& app) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand("inspect", "show which tokens a compressed context kept (HTML page, PNG heatmap)");
  cmd->add_option("file", o->file, ".kvc file written by `kvshrink compress`")->required()->check(CLI::ExistingFile);
  cmd->add_option("-m,--model", o->model, "model or tokenizer (GGUF file or HF directory; default: the path in the .kvc)");
  cmd->add_option("--context", o->context_file, "the context text the .kvc was compressed from")->check(CLI::ExistingFile);
  cmd->add_option("--context-text", o->context_text, "the context text, given inline");
  cmd->add_option("-o,--out", o->out, "HTML page to write (default: FILE with the extension .html)");
  cmd->add_option("--png", o->png, "also write a PNG heatmap (tokens x layers, fraction of heads keeping each token)");
  cmd->add_option("--mark", o->mark, "outline the tokens of this text in the context (e.g. the needle; red band on the heatmap)");
  cmd->callback([o] { run_inspect(*o); });
}

}  // namespace kvs::cli
