// `kvshrink inspect` end to end in a real browser: compress the needle context with the testbed
// model, write the page and the heatmap, render the page in headless Chromium, and check that the
// screenshot is not blank (tests/eval/png_stats.py decodes it) and that the DOM, after the page's
// script ran, holds one token element per context token. Skipped when chromium is not installed.
//
// KVS_INSPECT_SAVE=DIR also runs KeyDiff and copies the screenshots and heatmaps into DIR (how
// docs/inspect/*.png were made; see docs/inspect.md).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "cli_process.h"
#include "kvcache/cache_file.h"
#include "runtime/test_util.h"

namespace kvs {
namespace {

namespace fs = std::filesystem;

std::string source(const std::string& rel) { return std::string(KVS_SOURCE_DIR) + "/" + rel; }

std::string find_chromium() {
  if (const char* c = std::getenv("KVS_CHROMIUM"); c && *c) return c;
  for (const char* n : {"chromium", "chromium-browser", "google-chrome"})
    if (std::string p = test::find_program(n); !p.empty()) return p;
  return {};
}

size_t count_of(const std::string& s, const std::string& needle) {
  size_t n = 0;
  for (size_t at = 0; (at = s.find(needle, at)) != std::string::npos; at += needle.size()) ++n;
  return n;
}

struct Shot {
  int width = 0, height = 0, colours = 0;
  double stddev = 0;
};

// WIDTH HEIGHT COLOURS STDDEV of a PNG, through tests/eval/png_stats.py.
Shot png_stats(const std::string& python, const std::string& png, const std::string& dir) {
  const auto r = test::run_process({python, source("tests/eval/png_stats.py"), png}, dir, "png_stats", 120);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  Shot s;
  std::istringstream in(r.out);
  in >> s.width >> s.height >> s.colours >> s.stddev;
  return s;
}

std::vector<std::string> chromium_args(const std::string& chromium, const std::string& profile) {
  return {chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
          "--disable-extensions", "--user-data-dir=" + profile};
}

TEST(InspectBrowser, PageRendersInHeadlessChromium) {
  const std::string chromium = find_chromium();
  if (chromium.empty()) GTEST_SKIP() << "chromium is not installed (Debian package 'chromium')";
  const std::string python = test::find_program("python3");
  if (python.empty()) GTEST_SKIP() << "python3 is needed to decode the screenshot";
  if (!fs::exists(test::kvshrink_binary())) FAIL() << test::kvshrink_binary() << " is missing: build the kvshrink target first";
  const std::string model = source("testbed/models/v7s1/model-f16.gguf");
  const std::string context = source("eval/examples/needle_context.txt");
  const char* save = std::getenv("KVS_INSPECT_SAVE");
  std::vector<std::string> presses = {"snapkv"};
  if (save && *save) presses.push_back("keydiff");

  test::TempDir d("inspect_browser");
  for (const std::string& press : presses) {
    SCOPED_TRACE(press);
    const std::string kvc = d / (press + ".kvc"), html = d / (press + ".html"), heat = d / (press + "-heatmap.png");
    auto r = test::run_kvshrink({"compress", "-m", model, "--press", press, "--keep", "0.4", "--context", context,
                                 "--question-template", "\n{question}", "-t", "2", "-o", kvc},
                                d.str(), "compress");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    r = test::run_kvshrink({"inspect", kvc, "--context", context, "-o", html, "--png", heat, "--mark", "4071589"}, d.str(),
                           "inspect");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json header = read_cache_header(kvc);
    const int n_tokens = header.at("context_tokens").get<int>();
    const int n_layer = header.at("n_layer").get<int>(), n_head_kv = header.at("n_head_kv").get<int>();
    ASSERT_GT(n_tokens, 1000);

    // The heatmap: one pixel column per token (fewer than 2048 of them).
    const Shot hm = png_stats(python, heat, d.str());
    EXPECT_EQ(hm.width, n_tokens);
    EXPECT_GT(hm.colours, 3);

    // The page in the browser: the DOM after the script ran, then a screenshot.
    auto args = chromium_args(chromium, d / "profile");
    args.push_back("--dump-dom");
    args.push_back("file://" + html);
    r = test::run_process(args, d.str(), "dom", 60);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string& dom = r.out;
    EXPECT_EQ(count_of(dom, "<span class=\"tok"), static_cast<size_t>(n_tokens));
    EXPECT_EQ(count_of(dom, "id=\"t" + std::to_string(n_tokens - 1) + "\""), 1u);
    EXPECT_NE(dom.find(fmt::format("Shading: all {} layers x {} KV heads", n_layer, n_head_kv)), std::string::npos)
        << "the page's script did not run";
    EXPECT_NE(dom.find("outlined: "), std::string::npos) << "the needle was not found in the page's text";
    EXPECT_GE(count_of(dom, "tok mark"), 1u);
    EXPECT_EQ(count_of(dom, "class=\"cell"), static_cast<size_t>(n_layer * n_head_kv));  // the layer x KV-head grid
    // The overview canvas was drawn (the script sizes it to the text's width; 1000 is the HTML's).
    EXPECT_EQ(count_of(dom, "<canvas id=\"overview\""), 1u);
    EXPECT_EQ(count_of(dom, "<canvas id=\"overview\" width=\"1000\""), 0u);

    const std::string shot = d / (press + "-page.png");
    args = chromium_args(chromium, d / "profile");
    args.push_back("--screenshot=" + shot);
    args.push_back("--window-size=1280,1500");
    args.push_back("file://" + html);
    r = test::run_process(args, d.str(), "screenshot", 60);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_TRUE(fs::exists(shot));
    const Shot s = png_stats(python, shot, d.str());
    EXPECT_EQ(s.width, 1280);
    EXPECT_EQ(s.height, 1500);
    EXPECT_GT(s.colours, 20) << "the screenshot looks blank";
    EXPECT_GT(s.stddev, 10.0) << "the screenshot looks blank";

    if (save && *save) {
      fs::create_directories(save);
      fs::copy_file(shot, fs::path(save) / (press + "-page.png"), fs::copy_options::overwrite_existing);
      fs::copy_file(heat, fs::path(save) / (press + "-heatmap.png"), fs::copy_options::overwrite_existing);
    }
  }
}

}  // namespace
}  // namespace kvs
