#include "tuner/jit/thread_pool.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>

namespace qtune::jit {
namespace {

TEST(ThreadPool, DefaultSizeIsTheCoreCount) {
  const ThreadPool pool;
  const unsigned cores = std::thread::hardware_concurrency();
  EXPECT_EQ(pool.size(), cores == 0 ? 1u : cores);
  EXPECT_EQ(ThreadPool(3).size(), 3u);
}

TEST(ThreadPool, ReturnsEveryResult) {
  ThreadPool pool(4);
  std::vector<std::future<long>> futures;
  for (long i = 0; i < 200; ++i) futures.push_back(pool.submit([i] { return i * i; }));
  for (long i = 0; i < 200; ++i) EXPECT_EQ(futures[static_cast<std::size_t>(i)].get(), i * i);
}

TEST(ThreadPool, ExceptionsArriveThroughTheFuture) {
  ThreadPool pool(2);
  std::future<int> failing = pool.submit([]() -> int { throw std::runtime_error("task failed"); });
  std::future<int> fine = pool.submit([] { return 5; });
  EXPECT_THROW(failing.get(), std::runtime_error);
  EXPECT_EQ(fine.get(), 5);
}

TEST(ThreadPool, TasksRunInParallel) {
  // Each of 4 tasks waits until all 4 have started: they all see 4 only if 4 workers run them at once.
  constexpr int kTasks = 4;
  ThreadPool pool(kTasks);
  std::atomic<int> started{0};
  std::vector<std::future<bool>> futures;
  for (int i = 0; i < kTasks; ++i) {
    futures.push_back(pool.submit([&] {
      started.fetch_add(1);
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (started.load() < kTasks && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
      return started.load() == kTasks;
    }));
  }
  for (auto& future : futures) EXPECT_TRUE(future.get()) << "tasks did not run concurrently";
}

TEST(ThreadPool, DestructorFinishesQueuedTasks) {
  std::atomic<int> ran{0};
  {
    ThreadPool pool(1);
    for (int i = 0; i < 50; ++i) {
      pool.submit([&] {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        ran.fetch_add(1);
      });
    }
  }
  EXPECT_EQ(ran.load(), 50);
}

}  // namespace
}  // namespace qtune::jit
