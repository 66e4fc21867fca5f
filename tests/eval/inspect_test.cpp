// The data behind `kvshrink inspect`: kept fractions and the layer x head grid from a cache with
// hand-placed positions, the hex bitmaps the page decodes, token texts (UTF-8 split across
// tokens), and the HTML's structure (one span per token, escaping, the data block).
#include <gtest/gtest.h>

#include <regex>

#include "core/error.h"
#include "eval/inspect/heatmap.h"
#include "eval/inspect/html.h"
#include "eval/inspect/kvc_positions.h"
#include "eval/inspect/page.h"
#include "cli_process.h"
#include "kvcache/cache_file.h"
#include "runtime/test_util.h"
#include "kvcache/kv_cache.h"
#include "kvcache/page_pool.h"
#include "model/tokenizer/tokenizer.h"

namespace kvs::inspect {
namespace {

// 2 layers x 2 KV heads x 8 tokens; kept positions per head listed below.
struct SmallCache {
  KvLayout layout;
  std::unique_ptr<PagePool> pool;
  std::unique_ptr<KvCache> cache;
  SmallCache() {
    layout.n_layer = 2;
    layout.n_head_kv = 2;
    layout.head_dim = 4;
    layout.page_tokens = 4;
    pool = std::make_unique<PagePool>(layout.page_bytes());
    cache = std::make_unique<KvCache>(*pool, layout);
    const std::vector<std::vector<int32_t>> kept = {{0, 1, 2, 3, 4, 5, 6, 7}, {0, 7}, {0, 3, 7}, {}};
    for (int l = 0; l < 2; ++l)
      for (int h = 0; h < 2; ++h) {
        const auto& pos = kept[static_cast<size_t>(l * 2 + h)];
        std::vector<float> rows(pos.size() * 4, 0.5f);  // [n][head_dim]
        if (!pos.empty()) {
          EXPECT_TRUE(cache->load_head(l, h, rows.data(), rows.data(), pos.data(), static_cast<int32_t>(pos.size()), nullptr));
        }
      }
    cache->set_n_past(8);
  }
};

TEST(InspectKeptMap, FractionsAndGrid) {
  SmallCache c;
  const KeptMap m = KeptMap::from_cache(*c.cache, 8);
  ASSERT_EQ(m.n_layer, 2);
  ASSERT_EQ(m.n_head_kv, 2);
  ASSERT_EQ(m.n_tokens, 8);
  EXPECT_TRUE(m.at(0, 1, 7));
  EXPECT_FALSE(m.at(0, 1, 6));
  EXPECT_FALSE(m.at(1, 1, 0));
  const std::vector<double> f = m.token_fraction();
  // token 0: heads (0,0) (0,1) (1,0) -> 3/4; token 3: (0,0) (1,0) -> 2/4; token 7: 3/4; token 1: 1/4.
  EXPECT_DOUBLE_EQ(f[0], 0.75);
  EXPECT_DOUBLE_EQ(f[1], 0.25);
  EXPECT_DOUBLE_EQ(f[3], 0.5);
  EXPECT_DOUBLE_EQ(f[7], 0.75);
  const std::vector<double> l1 = m.layer_token_fraction(1);
  EXPECT_DOUBLE_EQ(l1[0], 0.5);
  EXPECT_DOUBLE_EQ(l1[1], 0.0);
  EXPECT_DOUBLE_EQ(l1[3], 0.5);
  const std::vector<double> g = m.head_keep_ratio();  // [layer][head]
  ASSERT_EQ(g.size(), 4u);
  EXPECT_DOUBLE_EQ(g[0], 1.0);
  EXPECT_DOUBLE_EQ(g[1], 2.0 / 8);
  EXPECT_DOUBLE_EQ(g[2], 3.0 / 8);
  EXPECT_DOUBLE_EQ(g[3], 0.0);
  const std::vector<double> lr = m.layer_keep_ratio();
  EXPECT_DOUBLE_EQ(lr[0], 10.0 / 16);
  EXPECT_DOUBLE_EQ(lr[1], 3.0 / 16);
  EXPECT_DOUBLE_EQ(m.keep_ratio(), 13.0 / 32);
  EXPECT_THROW(m.layer_token_fraction(2), Error);
}

TEST(InspectKeptMap, PositionsPastTheContextAreIgnored) {
  SmallCache c;
  const KeptMap m = KeptMap::from_cache(*c.cache, 5);  // a 5-token context; 7 was a question token
  EXPECT_EQ(m.n_tokens, 5);
  EXPECT_DOUBLE_EQ(m.head_keep_ratio()[1], 1.0 / 5);  // (0,1) kept 0 (and 7, ignored)
}

TEST(InspectKeptMap, HexBitmaps) {
  KeptMap m(1, 2, 6);
  m.set(0, 0, 0);
  m.set(0, 0, 3);
  m.set(0, 0, 4);
  m.set(0, 1, 5);
  const auto hex = kept_bitmaps_hex(m);
  ASSERT_EQ(hex.size(), 2u);
  EXPECT_EQ(hex[0], "91");  // tokens 0 and 3 -> 0b1001; token 4 -> bit 0 of the 2nd digit
  EXPECT_EQ(hex[1], "02");  // token 5 -> bit 1 of the 2nd digit
}

TEST(InspectHeatmap, ColoursAndShape) {
  EXPECT_EQ(keep_color(0.0), (std::array<uint8_t, 3>{255, 255, 255}));
  EXPECT_EQ(keep_color(1.0), (std::array<uint8_t, 3>{8, 29, 88}));
  EXPECT_EQ(keep_color(2.0), keep_color(1.0));
  EXPECT_EQ(keep_color(-1.0), keep_color(0.0));
  SmallCache c;
  const KeptMap m = KeptMap::from_cache(*c.cache, 8);
  HeatmapOptions o;
  o.max_width = 32;  // 4 px per token
  o.row_height = 3;
  const RgbImage img = render_heatmap(m, o);
  EXPECT_EQ(img.width, 32);
  EXPECT_EQ(img.height, 2 * 3 + 1);
  // layer 0, token 1: 1 of 2 heads; layer 1, token 1: none (white); the gap row is grey.
  const auto half = keep_color(0.5);
  EXPECT_EQ(img.at(5, 0)[0], half[0]);
  EXPECT_EQ(img.at(5, 4)[0], 255);
  EXPECT_EQ(img.at(5, 3)[0], 235);
  o.max_width = 4;  // binned: 2 tokens per column
  const RgbImage binned = render_heatmap(m, o);
  EXPECT_EQ(binned.width, 4);
  const auto c01 = keep_color(0.75);  // layer 0, tokens 0-1: (1 + 0.5) / 2
  EXPECT_EQ(binned.at(0, 0)[1], c01[1]);
}

TEST(InspectTokenText, Utf8SplitAcrossTokens) {
  bool bad = false;
  EXPECT_EQ(utf8_complete_prefix("ab\xC3", &bad), 2u);
  EXPECT_FALSE(bad);
  EXPECT_EQ(utf8_complete_prefix("a\xFFz", &bad), 1u);
  EXPECT_TRUE(bad);
  // A byte-fallback SPM vocabulary: "é" = <0xC3><0xA9> split over two tokens.
  VocabSpec v;
  v.kind = TokenizerKind::SPM;
  v.tokens = {"<unk>", "<s>", "</s>", "<0xC3>", "<0xA9>", "\xE2\x96\x81" "caf"};
  v.scores.assign(v.tokens.size(), 0.0f);
  v.types = {2, 3, 3, 6, 6, 1};
  v.unk = 0;
  v.bos = 1;
  v.eos = 2;
  const auto tok = Tokenizer::create(v);
  const std::vector<int32_t> ids = {1, 5, 3, 4, 5};
  const auto pieces = token_pieces(*tok, ids);
  ASSERT_EQ(pieces.size(), 5u);
  EXPECT_TRUE(pieces[0].special);
  EXPECT_EQ(pieces[1].text, "caf");  // leading space dropped after BOS, as decode does
  EXPECT_EQ(pieces[2].text, "");     // the first byte of é
  EXPECT_EQ(pieces[3].text, "\xC3\xA9");
  EXPECT_EQ(pieces[4].text, " caf");
}

TEST(InspectHtml, OneSpanPerTokenEscapedWithData) {
  SmallCache c;
  nlohmann::json header = {{"press", "snapkv"}, {"press_options", {"window=4"}}, {"keep", 0.5}, {"context_tokens", 8},
                           {"model_name", "m</script>"}};
  InspectPage p = make_page(header, *c.cache, nullptr, {}, "ctx.kvc");
  p.tokens[2].text = "<b>&";
  p.mark = "x</script>";
  const std::string html = render_html(p);
  const std::regex span("<span class=\"tok[^\"]*\" id=\"t([0-9]+)\"");
  std::vector<int> ids;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), span); it != std::sregex_iterator(); ++it)
    ids.push_back(std::stoi((*it)[1]));
  ASSERT_EQ(ids.size(), 8u);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(ids[static_cast<size_t>(i)], i);
  EXPECT_NE(html.find("&lt;b&gt;&amp;"), std::string::npos);
  EXPECT_EQ(html.find("<b>&"), std::string::npos);
  // The press, its options, and the grid (2 layers x 2 heads) are on the page.
  EXPECT_NE(html.find("<code>snapkv</code>"), std::string::npos);
  EXPECT_NE(html.find("window=4"), std::string::npos);
  EXPECT_EQ(std::count(html.begin(), html.end(), '\n') > 0, true);
  size_t cells = 0;
  for (size_t at = 0; (at = html.find("class=\"cell\"", at)) != std::string::npos; ++at) ++cells;
  EXPECT_EQ(cells, 4u);
  // Only the page's own two script elements close; the mark and header text cannot end them.
  size_t closes = 0;
  for (size_t at = 0; (at = html.find("</script>", at)) != std::string::npos; ++at) ++closes;
  EXPECT_EQ(closes, 2u);
  EXPECT_NE(html.find("\"heads\":[\"ff\",\"18\",\"98\",\"00\"]"), std::string::npos);
  // Nothing is fetched from the network.
  EXPECT_EQ(html.find("http://"), std::string::npos);
  EXPECT_EQ(html.find("https://"), std::string::npos);
}

TEST(InspectPage, LengthsMustMatch) {
  SmallCache c;
  const nlohmann::json header = {{"context_tokens", 8}};
  const std::vector<int32_t> ids(5, 0);
  EXPECT_THROW(make_page(header, *c.cache, nullptr, ids, "x"), Error);
  EXPECT_EQ(context_length(nlohmann::json::object(), 8), 8);
  EXPECT_EQ(context_length(nlohmann::json{{"context_tokens", 5}}, 8), 5);
  EXPECT_EQ(context_length(nlohmann::json{{"context_tokens", 9}}, 8), 8);
  const nlohmann::json bad = {{"context_ids", {1, 2, 99}}};
  EXPECT_THROW(header_context_ids(bad, 10, "f.kvc"), Error);
  EXPECT_EQ(header_context_ids(nlohmann::json{{"context_ids", {1, 2}}}, 10, "f.kvc"), (std::vector<int32_t>{1, 2}));
}

}  // namespace
}  // namespace kvs::inspect

namespace kvs::inspect {
namespace {

TEST(InspectPage, FindMarkedAndTheHeatmapBand) {
  const std::vector<TokenPiece> pieces = {{"<s>", true}, {"The", false}, {" number is 40", false}, {"715", false},
                                          {"", false},    {"89.", false}, {" Bye", false}};
  EXPECT_EQ(find_marked(pieces, "4071589"), (std::vector<int32_t>{2, 3, 5}));  // the empty piece is not marked
  EXPECT_TRUE(find_marked(pieces, "").empty());
  EXPECT_TRUE(find_marked(pieces, "missing").empty());
  KeptMap m(2, 1, 7);
  HeatmapOptions o;
  o.max_width = 14;  // 2 px per token
  o.row_height = 4;
  o.marked = {3};
  const RgbImage img = render_heatmap(m, o);
  EXPECT_EQ(img.height, 6 + 1 + 2 * 4 + 1);
  EXPECT_EQ(img.at(6, 0)[0], 214);  // token 3: red band
  EXPECT_EQ(img.at(7, 5)[1], 39);
  EXPECT_EQ(img.at(4, 0)[0], 235);  // token 2: no mark
  EXPECT_EQ(img.at(6, 7)[0], 255);  // layer 0 starts under the band (nothing kept: white)
}

}  // namespace
}  // namespace kvs::inspect

namespace kvs::inspect {
namespace {

// The positions-only reader gives the map load_cache + from_cache give, and refuses what
// load_cache refuses (a flipped byte, a truncated file).
TEST(InspectKvcPositions, SameAsLoadingTheCache) {
  SmallCache c;
  test::TempDir d("kvc_positions");
  const std::string path = d / "small.kvc";
  save_cache(path, *c.cache, nlohmann::json{{"press", "snapkv"}, {"context_tokens", 8}});
  const KvcPositions p = read_kvc_positions(path);
  EXPECT_EQ(p.n_layer, 2);
  EXPECT_EQ(p.n_head_kv, 2);
  EXPECT_EQ(p.n_past, 8);
  EXPECT_EQ(p.header.value("press", ""), "snapkv");
  EXPECT_EQ(p.heads[2], (std::vector<int32_t>{0, 3, 7}));
  EXPECT_EQ(p.kept(8).kept, KeptMap::from_cache(*c.cache, 8).kept);
  EXPECT_EQ(p.kept(5).kept, KeptMap::from_cache(*c.cache, 5).kept);
  std::string bytes = test::read_all(path);
  std::string bad = bytes;
  bad[bad.size() / 2] ^= 0x40;
  EXPECT_THROW(read_kvc_positions(reinterpret_cast<const uint8_t*>(bad.data()), bad.size(), "flipped"), Error);
  const std::string cut = bytes.substr(0, bytes.size() - 20);
  EXPECT_THROW(read_kvc_positions(reinterpret_cast<const uint8_t*>(cut.data()), cut.size(), "cut"), Error);
}

}  // namespace
}  // namespace kvs::inspect
