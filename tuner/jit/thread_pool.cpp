#include "tuner/jit/thread_pool.hpp"

#include <algorithm>
#include <system_error>

#include "kernels/error.hpp"

namespace qtune::jit {

std::size_t default_thread_count() {
  const unsigned cores = std::thread::hardware_concurrency();
  return cores == 0 ? 1 : cores;
}

std::size_t compiler_thread_count(std::size_t requested) {
  return requested == 0 ? default_thread_count() : std::min(requested, default_thread_count());
}

ThreadPool::ThreadPool(std::size_t threads) {
  if (threads == 0) threads = default_thread_count();
  workers_.reserve(threads);
  try {
    for (std::size_t i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
  } catch (const std::system_error& error) {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& worker : workers_) worker.join();
    QTUNE_LIBRARY_ERROR("system", std::string("cannot start a worker thread: ") + error.what());
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::enqueue(std::function<void()> job) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) QTUNE_THROW(Error, "ThreadPool::submit called on a pool that is shutting down");
    queue_.push_back(std::move(job));
  }
  wake_.notify_one();
}

void ThreadPool::work() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to run
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job();  // a packaged_task stores any exception in its future, so nothing escapes here
  }
}

}  // namespace qtune::jit
