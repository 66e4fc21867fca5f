// Job's two waits: a streamed answer's handler (wait) wakes at every update; an answer sent whole
// (wait_for_state) wakes only when the job's state changes — not at each of the tokens the
// scheduler publishes every decode step — and still sees the final snapshot, or times out with
// the current one.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "server/job.h"

namespace kvs::server {
namespace {

using State = JobSnapshot::State;
using namespace std::chrono_literals;

std::atomic<int> g_evaluations{0};  // how often the state waiter's predicate ran (once per wake-up)
bool counting_finished(const JobSnapshot& s) {
  ++g_evaluations;
  return s.state == State::Done || s.state == State::Failed || s.state == State::Cancelled;
}

void progress(Job& job, int tokens) {
  for (int i = 0; i < tokens; ++i) {
    job.update([&](JobSnapshot& s) {
      s.state = State::Running;
      s.text += "x";
      ++s.n_generated;
    });
    std::this_thread::sleep_for(200us);
  }
}

TEST(JobWait, StateWaiterSleepsThroughTokensAndSeesTheEnd) {
  Job job{JobInput{}};
  g_evaluations = 0;
  JobSnapshot got;
  std::thread waiter([&] { got = job.wait_for_state(counting_finished, 10s); });
  std::this_thread::sleep_for(5ms);  // the waiter is waiting
  progress(job, 200);                // Queued -> Running once, then 199 updates of text alone
  job.update([](JobSnapshot& s) {
    s.state = State::Done;
    s.finish_reason = "length";
  });
  waiter.join();
  EXPECT_EQ(got.state, State::Done);
  EXPECT_EQ(got.text, std::string(200, 'x'));
  EXPECT_EQ(got.n_generated, 200);
  EXPECT_EQ(got.version, 201u);
  // The first check, the Queued -> Running change, Done (and room for a spurious wake-up or two);
  // woken at every update it would be ~200.
  EXPECT_LE(g_evaluations.load(), 8);
}

TEST(JobWait, StateWaiterTimesOutWithTheCurrentSnapshot) {
  Job job{JobInput{}};
  progress(job, 3);
  const auto t0 = std::chrono::steady_clock::now();
  const JobSnapshot s = job.wait_for_state(counting_finished, 20ms);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 20ms);
  EXPECT_EQ(s.state, State::Running);
  EXPECT_EQ(s.text, "xxx");
  // Already finished: returns at once.
  job.fail(ApiError(500, "boom", "server_error"));
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_EQ(job.wait_for_state(counting_finished, 10s).state, State::Failed);
  EXPECT_LT(std::chrono::steady_clock::now() - t1, 5s);
}

TEST(JobWait, StreamWaiterWakesAtEveryUpdate) {
  Job job{JobInput{}};
  uint64_t seen = 0;
  std::thread scheduler([&] {
    std::this_thread::sleep_for(5ms);
    job.update([](JobSnapshot& s) { s.text = "a"; });  // no state change
  });
  const JobSnapshot s = job.wait(seen, 10s);
  scheduler.join();
  EXPECT_EQ(s.version, 1u);
  EXPECT_EQ(s.text, "a");
  EXPECT_EQ(s.state, State::Queued);
}

}  // namespace
}  // namespace kvs::server
