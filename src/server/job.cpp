#include "server/job.h"

namespace kvs::server {

JobSnapshot Job::wait(uint64_t seen, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_for(l, timeout, [&] { return s_.version > seen; });
  return s_;
}

JobSnapshot Job::wait_for_state(bool (*done)(const JobSnapshot&), std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  state_cv_.wait_for(l, timeout, [&] { return done(s_); });
  return s_;
}

JobSnapshot Job::snapshot() {
  std::lock_guard<std::mutex> l(mu_);
  return s_;
}

void Job::update(const std::function<void(JobSnapshot&)>& fn) {
  bool state_changed;
  {
    std::lock_guard<std::mutex> l(mu_);
    const JobSnapshot::State before = s_.state;
    fn(s_);
    ++s_.version;
    state_changed = s_.state != before;
  }
  cv_.notify_all();
  if (state_changed) state_cv_.notify_all();
}

void Job::fail(const ApiError& e) {
  update([&](JobSnapshot& s) {
    s.state = JobSnapshot::State::Failed;
    s.error = e;
  });
}

}  // namespace kvs::server
