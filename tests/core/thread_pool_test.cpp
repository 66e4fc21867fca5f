#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "core/thread_pool.h"

namespace kvs {

TEST(ThreadPool, CoversRangeExactlyOnce) {
  ThreadPool pool(3);
  std::vector<int> hits(1000, 0);
  for (int rep = 0; rep < 50; ++rep) {
    pool.parallel_for(1000, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i]++;
    });
  }
  for (int h : hits) EXPECT_EQ(h, 50);
  auto [b, e] = ThreadPool::split(10, 2, 3);
  EXPECT_EQ(b, 7);
  EXPECT_EQ(e, 10);
}

// Every thread writes its own slot, waits at the barrier, then reads every other thread's slot:
// without the barrier a fast thread reads a slot not yet written for this round (each round
// writes new values). A thread is held back at random so that the threads arrive in every order.
TEST(ThreadPool, SectionBarrierWaitsForEveryThread) {
  for (int n : {2, 3, 4}) {
    ThreadPool pool(n);
    std::vector<std::atomic<int>> slot(n);
    std::atomic<int> wrong{0};
    for (int round = 1; round <= 2000; ++round) {
      ThreadPool::SectionBarrier barrier;
      pool.run([&](int ith, int nth) {
        if ((round * 7 + ith * 3) % 5 == 0)
          for (volatile int spin = 0; spin < 2000; spin = spin + 1) {
          }
        slot[ith].store(round, std::memory_order_relaxed);
        barrier.arrive_and_wait(nth);
        for (int j = 0; j < nth; ++j)
          if (slot[j].load(std::memory_order_relaxed) != round) wrong.fetch_add(1);
      });
    }
    EXPECT_EQ(wrong.load(), 0) << n << " threads";
  }
  ThreadPool::SectionBarrier alone;
  alone.arrive_and_wait(1);  // one thread: returns at once
}

}  // namespace kvs
