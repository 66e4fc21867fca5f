// The PNG heatmap of `kvshrink inspect --png`: tokens left to right, layers top (layer 0) to
// bottom, each cell shaded by the fraction of that layer's KV heads that kept the token (white
// = none, dark blue = all). Long contexts are binned to at most max_width columns (a column's
// shade is the mean over its tokens); short ones get cells several pixels wide. Marked tokens
// (--mark) are red in a 6-pixel band on top.
#pragma once
#include <array>
#include <vector>

#include "eval/inspect/kept_map.h"
#include "eval/inspect/png.h"

namespace kvs::inspect {

struct HeatmapOptions {
  int max_width = 2048;  // pixels
  int row_height = 0;    // pixels per layer; 0 = chosen so the image is ~240 px tall (4..32 per layer)
  int gap = 1;           // light rows between layers
  std::vector<int32_t> marked;  // tokens drawn red in a band above the layers (e.g. the needle); empty: no band
};

// Shade of a fraction in [0, 1] (clamped): white -> light yellow -> teal -> dark blue.
std::array<uint8_t, 3> keep_color(double fraction);

RgbImage render_heatmap(const KeptMap& m, const HeatmapOptions& opt = {});

}  // namespace kvs::inspect
