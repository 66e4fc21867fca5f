// A small persistent thread pool tuned for inference: the caller is thread 0, workers spin briefly
// between dispatches (decode issues hundreds of short parallel sections per token) and then sleep.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

namespace kvs {

class ThreadPool {
 public:
  // n_threads: total threads including the caller (>= 1). 0 = hardware concurrency.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(ith, nth) on every thread (the caller is ith = 0) and returns when all are done.
  // Not reentrant: fn must not call run() on the same pool.
  void run(const std::function<void(int ith, int nth)>& fn);

  // Splits [0, n) into nth contiguous chunks and calls f(begin, end) for each non-empty one.
  template <typename F>
  void parallel_for(int64_t n, F&& f) {
    if (n <= 0) return;
    if (n_threads_ == 1 || n == 1) {
      f(int64_t{0}, n);
      return;
    }
    run([&](int ith, int nth) {
      auto [b, e] = split(n, ith, nth);
      if (b < e) f(b, e);
    });
  }

  // A point inside one run() section that every thread reaches before any goes on (a spin on a
  // counter, as the pool's own join). Valid because run() calls fn on all nth threads at once;
  // make one per section, on the caller's stack, and call arrive_and_wait(nth) once per thread.
  class SectionBarrier {
   public:
    void arrive_and_wait(int nth);

   private:
    std::atomic<int> arrived_{0};
  };

  // [begin, end) of chunk ith out of nth over n items (balanced, contiguous).
  static std::pair<int64_t, int64_t> split(int64_t n, int ith, int nth) {
    const int64_t base = n / nth, rem = n % nth;
    const int64_t b = ith * base + (ith < rem ? ith : rem);
    return {b, b + base + (ith < rem ? 1 : 0)};
  }

 private:
  void worker(int ith);
  // run() without the profiling check; *t_work (when given) = when the caller's own part ended.
  void run_section(const std::function<void(int, int)>& fn, uint64_t* t_work);

  int n_threads_ = 1;
  std::vector<std::thread> threads_;
  const std::function<void(int, int)>* task_ = nullptr;
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  uint64_t last_end_ns_ = 0;  // when the previous section ended (KVS_SECTION_PROFILE only)
};

}  // namespace kvs
