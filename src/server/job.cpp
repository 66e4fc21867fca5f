#include "server/job.h"

#include <algorithm>

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

void Job::add_logprobs(std::span<const TokenLogprob> more) {
  {
    std::lock_guard<std::mutex> l(mu_);
    logprobs_.insert(logprobs_.end(), more.begin(), more.end());
    s_.n_logprobs = logprobs_.size();
    ++s_.version;
  }
  cv_.notify_all();
}

void Job::set_prompt_logprobs(std::vector<TokenLogprob> lp) {
  {
    std::lock_guard<std::mutex> l(mu_);
    prompt_logprobs_ = std::move(lp);
    s_.prompt_scored = true;
    ++s_.version;
  }
  cv_.notify_all();
}

std::vector<TokenLogprob> Job::logprobs(size_t from, size_t to) {
  std::lock_guard<std::mutex> l(mu_);
  to = std::min(to, logprobs_.size());
  if (from >= to) return {};
  return {logprobs_.begin() + static_cast<std::ptrdiff_t>(from), logprobs_.begin() + static_cast<std::ptrdiff_t>(to)};
}

std::vector<TokenLogprob> Job::prompt_logprobs() {
  std::lock_guard<std::mutex> l(mu_);
  return prompt_logprobs_;
}

}  // namespace kvs::server
