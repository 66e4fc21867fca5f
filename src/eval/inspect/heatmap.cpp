#include "eval/inspect/heatmap.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace kvs::inspect {

std::array<uint8_t, 3> keep_color(double f) {
  if (!(f >= 0)) f = 0;  // NaN too
  f = std::min(f, 1.0);
  // Color stops (fraction, r, g, b); also used by the HTML page (html.cpp writes the same ramp).
  static constexpr double stops[][4] = {
      {0.00, 255, 255, 255}, {0.25, 255, 237, 160}, {0.50, 120, 198, 121}, {0.75, 44, 127, 184}, {1.00, 8, 29, 88}};
  int i = 0;
  while (i < 3 && f > stops[i + 1][0]) ++i;
  const double t = (f - stops[i][0]) / (stops[i + 1][0] - stops[i][0]);
  std::array<uint8_t, 3> c{};
  for (int k = 0; k < 3; ++k)
    c[static_cast<size_t>(k)] =
        static_cast<uint8_t>(std::lround(stops[i][k + 1] + t * (stops[i + 1][k + 1] - stops[i][k + 1])));
  return c;
}

RgbImage render_heatmap(const KeptMap& m, const HeatmapOptions& opt) {
  if (m.n_tokens <= 0 || m.n_layer <= 0) fail("heatmap: nothing to draw ({} tokens, {} layers)", m.n_tokens, m.n_layer);
  if (opt.max_width < 1) fail("heatmap: max_width must be >= 1, got {}", opt.max_width);
  // Columns: cw pixels per token, or tokens binned into max_width columns.
  const int cols = std::min(m.n_tokens, opt.max_width);
  const int cw = std::clamp(opt.max_width / m.n_tokens, 1, 8);
  const int width = cols == m.n_tokens ? m.n_tokens * cw : cols;
  const int rh = opt.row_height > 0 ? opt.row_height : std::clamp(240 / m.n_layer, 4, 32);
  const int gap = std::max(0, opt.gap);
  const int band = opt.marked.empty() ? 0 : 6 + gap;  // the marked tokens' band on top
  const int height = band + m.n_layer * rh + (m.n_layer - 1) * gap;
  RgbImage img(width, height, 235);
  auto column_of = [&](int32_t t) { return cols == m.n_tokens ? t * cw : static_cast<int>(int64_t{t} * width / m.n_tokens); };
  for (int32_t t : opt.marked) {
    if (t < 0 || t >= m.n_tokens) continue;
    const int x1 = cols == m.n_tokens ? column_of(t) + cw : column_of(t) + 1;
    for (int x = column_of(t); x < std::min(x1, width); ++x)
      for (int y = 0; y < 6; ++y) img.set(x, y, 214, 39, 40);
  }
  for (int layer = 0; layer < m.n_layer; ++layer) {
    const std::vector<double> f = m.layer_token_fraction(layer);  // [n_tokens]
    const int y0 = band + layer * (rh + gap);
    for (int x = 0; x < width; ++x) {
      double v;
      if (cols == m.n_tokens) {
        v = f[static_cast<size_t>(x / cw)];
      } else {  // tokens [t0, t1) fall in column x
        const int64_t t0 = int64_t{x} * m.n_tokens / width, t1 = std::max<int64_t>(t0 + 1, int64_t{x + 1} * m.n_tokens / width);
        double s = 0;
        for (int64_t t = t0; t < t1; ++t) s += f[static_cast<size_t>(t)];
        v = s / static_cast<double>(t1 - t0);
      }
      const auto c = keep_color(v);
      for (int y = y0; y < y0 + rh; ++y) img.set(x, y, c[0], c[1], c[2]);
    }
  }
  return img;
}

}  // namespace kvs::inspect
