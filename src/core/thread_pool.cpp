#include "core/thread_pool.h"

#include "core/section_profile.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KVS_PAUSE() _mm_pause()
#else
#define KVS_PAUSE() ((void)0)
#endif

namespace kvs {
namespace {
// Spin iterations before a worker goes to sleep (~tens of microseconds).
constexpr int kSpinIters = 20000;
// While spinning, yield the CPU this often: when the scheduler has put the thread we wait for on
// our own core (wake-affine placement does that), pure spinning would starve it for a whole time
// slice per dispatch.
constexpr int kYieldEvery = 256;
}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::thread::hardware_concurrency());
  if (n_threads <= 0) n_threads = 1;
  n_threads_ = n_threads;
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

// noinline: the call site recorded when profiling is the return address of this function.
__attribute__((noinline)) void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (section_profile::on()) [[unlikely]] {
    // The same section, timed (core/section_profile.h): start, the caller's part done, all done.
    const uint64_t t0 = section_profile::now_ns();
    const uint64_t gap = last_end_ns_ ? t0 - last_end_ns_ : 0;
    uint64_t t_work = 0;
    run_section(fn, &t_work);
    const uint64_t t1 = section_profile::now_ns();
    section_profile::record(__builtin_return_address(0), t0, t_work ? t_work : t1, t1, gap);
    last_end_ns_ = t1;
    return;
  }
  run_section(fn, nullptr);
}

void ThreadPool::run_section(const std::function<void(int, int)>& fn, uint64_t* t_work) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  task_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  fn(0, n_threads_);
  if (t_work) *t_work = section_profile::now_ns();
  // Wait for workers; they finish about when we do, so spin.
  int spins = 0;
  while (pending_.load(std::memory_order_acquire) != 0) {
    KVS_PAUSE();
    if (++spins > kSpinIters || spins % kYieldEvery == 0) std::this_thread::yield();
  }
  task_ = nullptr;
}

void ThreadPool::SectionBarrier::arrive_and_wait(int nth) {
  if (nth <= 1) return;
  arrived_.fetch_add(1, std::memory_order_acq_rel);
  int spins = 0;
  while (arrived_.load(std::memory_order_acquire) < nth) {
    KVS_PAUSE();
    if (++spins > kSpinIters || spins % kYieldEvery == 0) std::this_thread::yield();
  }
}

void ThreadPool::worker(int ith) {
  uint32_t seen = 0;  // the generation at construction; a late-starting worker must not skip one
  for (;;) {
    int spins = 0;
    uint32_t g;
    while ((g = generation_.load(std::memory_order_acquire)) == seen) {
      if (++spins < kSpinIters) {
        KVS_PAUSE();
        if (spins % kYieldEvery == 0) std::this_thread::yield();
      } else {
        generation_.wait(seen, std::memory_order_acquire);
      }
    }
    seen = g;
    if (stop_.load(std::memory_order_acquire)) return;
    (*task_)(ith, n_threads_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace kvs
