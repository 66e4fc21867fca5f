// KVS_SECTION_PROFILE's per-call-site table (core/section_profile.h), from sections whose times
// are known from below: the caller's part, the other thread's longer part and the serial time
// between sections are sleeps of set lengths, so every figure has a floor the timer must reach.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/section_profile.h"
#include "core/thread_pool.h"

namespace kvs {
namespace {

using std::chrono::milliseconds;

struct Row {
  long calls = 0;
  double work_us = 0, wait_us = 0, gap_us = 0;
  std::string site;
};

// The idle time the report left out (gaps of 10 ms or more), in microseconds.
double idle_us_of(const std::string& report) {
  const size_t at = report.find(" of them, ");
  return at == std::string::npos ? 0.0 : std::stod(report.substr(at + 10)) * 1e6;
}

// The report's rows (not the comments, the header or the total).
std::vector<Row> rows_of(const std::string& report, Row* total) {
  std::vector<Row> rows;
  std::istringstream in(report);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#' || line.find("calls") != std::string::npos) continue;
    std::istringstream l(line);
    Row r;
    double per[3];
    l >> r.calls >> r.work_us >> r.wait_us >> r.gap_us >> per[0] >> per[1] >> per[2];
    std::getline(l, r.site);
    if (r.site == "  total")
      *total = r;
    else
      rows.push_back(r);
  }
  return rows;
}

// Three sections: the caller's part 2 ms, the other thread's 5 ms; 1 ms of serial work before each.
__attribute__((noinline)) void three_sections(ThreadPool& pool) {
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(milliseconds(1));
    pool.run([](int ith, int) { std::this_thread::sleep_for(milliseconds(ith == 0 ? 2 : 5)); });
  }
}

__attribute__((noinline)) void one_section(ThreadPool& pool) {
  pool.run([](int, int) { std::this_thread::sleep_for(milliseconds(1)); });
}

TEST(SectionProfile, TimesEachCallSiteFromBelow) {
  section_profile::enable("");
  ThreadPool pool(2);
  three_sections(pool);
  one_section(pool);
  Row total;
  const std::string report = section_profile::report();
  const std::vector<Row> rows = rows_of(report, &total);
  section_profile::disable();
  ASSERT_EQ(rows.size(), 2u) << report;
  const Row& three = rows[0].calls == 3 ? rows[0] : rows[1];
  const Row& one = rows[0].calls == 3 ? rows[1] : rows[0];
  EXPECT_EQ(three.calls, 3);
  EXPECT_EQ(one.calls, 1);
  EXPECT_NE(three.site, one.site);
  EXPECT_GE(three.work_us, 3 * 2000.0);  // the caller's parts
  // The caller's part and its wait: at least the other thread's 5 ms, which starts after the
  // section does (a caller's sleep stretched by the machine leaves less to wait for).
  EXPECT_GE(three.work_us + three.wait_us, 3 * 5000.0);
  EXPECT_GT(three.wait_us, 0.0);
  // The serial time before the 2nd and 3rd (a sleep that a loaded machine stretched past 10 ms is
  // counted as idle instead).
  EXPECT_GE(three.gap_us + idle_us_of(report), 2 * 1000.0) << report;
  EXPECT_GE(one.work_us, 1000.0);
  EXPECT_EQ(total.calls, 4);
  EXPECT_NEAR(total.work_us, three.work_us + one.work_us, 0.2);
}

TEST(SectionProfile, OneThreadPoolHasNoWait) {
  section_profile::enable("");
  ThreadPool pool(1);
  one_section(pool);
  Row total;
  const std::vector<Row> rows = rows_of(section_profile::report(), &total);
  section_profile::disable();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].calls, 1);
  EXPECT_GE(rows[0].work_us, 1000.0);
  EXPECT_EQ(rows[0].wait_us, 0.0);
}

// SIGUSR1 clears the counts (at the next section); a gap of 10 ms or more is idle, not serial work.
TEST(SectionProfile, Sigusr1ClearsAndLongGapsAreIdle) {
  section_profile::enable("");
  ThreadPool pool(2);
  three_sections(pool);
  std::raise(SIGUSR1);
  one_section(pool);
  std::this_thread::sleep_for(milliseconds(12));
  one_section(pool);
  const std::string report = section_profile::report();
  section_profile::disable();
  Row total;
  const std::vector<Row> rows = rows_of(report, &total);
  ASSERT_EQ(rows.size(), 1u) << report;
  EXPECT_EQ(rows[0].calls, 2);
  EXPECT_LT(rows[0].gap_us, 10000.0) << report;
  EXPECT_NE(report.find("(1 of them"), std::string::npos) << report;
}

TEST(SectionProfile, OffRecordsNothing) {
  section_profile::enable("");
  section_profile::disable();
  ThreadPool pool(2);
  one_section(pool);
  section_profile::enable("");  // clears
  Row total;
  EXPECT_TRUE(rows_of(section_profile::report(), &total).empty());
  section_profile::disable();
}

}  // namespace
}  // namespace kvs
