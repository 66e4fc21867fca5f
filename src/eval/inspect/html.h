// The self-contained HTML page of `kvshrink inspect` (inline CSS and JavaScript, no network):
// the context with each token shaded by the fraction of (layer, KV head) pairs that kept it, a
// layer x KV-head grid of keep ratios, per-layer selection (hover a layer row to shade the text by
// that layer's heads only, click to pin it; click a cell for one head), and the press and its
// parameters from the .kvc header. The address may pin a selection: page.html#layer=3 or
// #layer=3&head=1. Every token is one <span class="tok"> with id "t<position>",
// in context order (the browser test counts them).
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "eval/inspect/kept_map.h"
#include "eval/inspect/token_text.h"

namespace kvs::inspect {

struct InspectPage {
  std::string title;               // shown in the title bar and heading (e.g. the .kvc file name)
  nlohmann::json header;           // the .kvc header: press, press_options, keep, ... (any object)
  std::vector<TokenPiece> tokens;  // [kept.n_tokens]
  std::vector<int32_t> token_ids;  // [kept.n_tokens] or empty
  KeptMap kept;
  std::string mark;                // text to outline in the context (e.g. the needle); "" = none
};

std::string render_html(const InspectPage& page);

std::string html_escape(const std::string& s);
// Per (layer, KV head) the kept bits as hex, 4 tokens per digit (token t is bit (t % 4) of digit
// t / 4): what the page's script decodes.
std::vector<std::string> kept_bitmaps_hex(const KeptMap& m);

}  // namespace kvs::inspect
