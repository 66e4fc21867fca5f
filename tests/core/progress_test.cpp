// core/progress: the plain-line format used when stderr is not a terminal (logs, CI), the
// terminal redraw, the delay that keeps short work silent, and the per-run callback (prefill).
#include <gtest/gtest.h>

#include <cstdio>
#include <regex>
#include <string>
#include <vector>

#include "core/progress.h"

namespace kvs {
namespace {

// What a Progress wrote to a temporary file.
struct Sink {
  std::FILE* f = std::tmpfile();
  ~Sink() { std::fclose(f); }
  std::string text() const {
    std::fflush(f);
    std::rewind(f);
    std::string s;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
    return s;
  }
  std::vector<std::string> lines() const {
    std::vector<std::string> v;
    std::string s = text(), cur;
    for (char c : s) {
      if (c == '\n') {
        v.push_back(cur);
        cur.clear();
      } else {
        cur += c;
      }
    }
    if (!cur.empty()) v.push_back(cur);
    return v;
  }
};

ProgressOptions lines_to(std::FILE* f) {
  ProgressOptions o;
  o.mode = ProgressOptions::Mode::Lines;
  o.out = f;
  o.line_interval = 0;  // a line per advance
  return o;
}

TEST(Progress, PlainLinesFormat) {
  Sink s;
  ProgressOptions o = lines_to(s.f);
  o.unit = "tokens";
  {
    Progress p(10, 10.0, o);
    p.set_label("prefill");
    p.advance(3, 3);
    p.advance(7, 7);
  }
  const auto ls = s.lines();
  ASSERT_EQ(ls.size(), 2u) << s.text();  // the last advance drew the final line; finish adds none
  const std::regex first(R"(\[#######\.{17}\] 3/10 tokens  30\.0% \| elapsed \d+s ETA \d+s \| prefill)");
  const std::regex last(R"(\[#{24}\] 10/10 tokens 100\.0% \| elapsed \d+s ETA 0s \| prefill)");
  EXPECT_TRUE(std::regex_match(ls[0], first)) << ls[0];
  EXPECT_TRUE(std::regex_match(ls[1], last)) << ls[1];
  EXPECT_EQ(s.text().find('\r'), std::string::npos);
  EXPECT_EQ(s.text().find('\x1b'), std::string::npos);
}

TEST(Progress, WeightsDriveThePercentAndUnitsTheCount) {
  Sink s;
  Progress p(4, 100.0, lines_to(s.f));
  p.set_label("eval");
  p.advance(70);  // one unit of weight 70
  EXPECT_TRUE(std::regex_match(p.line(), std::regex(R"(\[#{16}\.{8}\] 1/4  70\.0% \| elapsed \d+s ETA \d+s \| eval)"))) << p.line();
  p.finish();
  const auto ls = s.lines();
  ASSERT_EQ(ls.size(), 2u);  // the advance, then finish's line (not all units done)
  EXPECT_NE(ls[1].find("1/4"), std::string::npos);
}

TEST(Progress, LinesAreRateLimited) {
  Sink s;
  ProgressOptions o = lines_to(s.f);
  o.line_interval = 1e6;
  Progress p(100, 100.0, o);
  for (int i = 0; i < 100; ++i) p.advance(1);
  p.finish();
  // the first advance (nothing drawn yet) and the last unit
  EXPECT_EQ(s.lines().size(), 2u) << s.text();
}

TEST(Progress, DelayKeepsShortWorkSilent) {
  Sink s;
  ProgressOptions o = lines_to(s.f);
  o.delay = 1e9;
  {
    Progress p(5, 5.0, o);
    for (int i = 0; i < 5; ++i) p.advance(1);
  }
  EXPECT_EQ(s.text(), "");
}

TEST(Progress, OffWritesNothing) {
  Sink s;
  ProgressOptions o = lines_to(s.f);
  o.mode = ProgressOptions::Mode::Off;
  Progress p(3, 3.0, o);
  p.advance(1);
  p.finish();
  EXPECT_EQ(s.text(), "");
  Progress q(3, 3.0, false);
  EXPECT_EQ(q.mode(), ProgressOptions::Mode::Off);
}

TEST(Progress, TerminalRedrawsInPlaceAndEndsTheLine) {
  Sink s;
  ProgressOptions o;
  o.mode = ProgressOptions::Mode::Terminal;
  o.out = s.f;
  o.terminal_interval = 0;
  Progress p(2, 2.0, o);
  p.advance(1);
  p.advance(1);
  p.finish();
  const std::string t = s.text();
  EXPECT_EQ(t.rfind("\r[", 0), 0u) << t;
  EXPECT_NE(t.find("\x1b[K"), std::string::npos);
  EXPECT_EQ(t.back(), '\n');
  EXPECT_EQ(std::count(t.begin(), t.end(), '\n'), 1);
}

TEST(Progress, AutoOnAFileIsLines) {
  Sink s;
  ProgressOptions o;
  o.out = s.f;
  Progress p(1, 1.0, o);
  EXPECT_EQ(p.mode(), ProgressOptions::Mode::Lines);
}

TEST(Progress, CallbackStartsANewDisplayPerRun) {
  Sink s;
  ProgressOptions o = lines_to(s.f);
  o.unit = "tokens";
  auto cb = progress_callback("prefill", o);
  cb(512, 1042);
  cb(1024, 1042);
  cb(1042, 1042);  // run 1 ends
  cb(8, 20);       // run 2
  cb(20, 20);
  const auto ls = s.lines();
  ASSERT_EQ(ls.size(), 5u) << s.text();
  EXPECT_NE(ls[0].find(" 512/1042 tokens  49.1% "), std::string::npos) << ls[0];
  EXPECT_NE(ls[2].find(" 1042/1042 tokens 100.0% "), std::string::npos) << ls[2];
  EXPECT_NE(ls[3].find(" 8/20 tokens  40.0% "), std::string::npos) << ls[3];
  EXPECT_NE(ls[4].find(" 20/20 tokens 100.0% "), std::string::npos) << ls[4];
}

TEST(Progress, FormatDuration) {
  EXPECT_EQ(format_duration(42), "42s");
  EXPECT_EQ(format_duration(185), "3m05s");
  EXPECT_EQ(format_duration(7620), "2h07m");
  EXPECT_EQ(format_duration(-3), "0s");
}

}  // namespace
}  // namespace kvs
