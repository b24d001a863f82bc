#pragma once
// A fixed set of worker threads that run submitted tasks in submission order; used to compile kernels in parallel.
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace qtune::jit {

// std::thread::hardware_concurrency(), or 1 where the platform cannot tell.
std::size_t default_thread_count();
// Compiler threads for a request of `requested` (0: every core): never more than the cores, since NVRTC is CPU-bound
// and each thread holds a compiler's memory.
std::size_t compiler_thread_count(std::size_t requested);

class ThreadPool {
 public:
  // `threads` == 0 means default_thread_count().
  explicit ThreadPool(std::size_t threads = 0);
  // Runs every task already submitted, then joins the workers.
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  std::size_t size() const { return workers_.size(); }

  // Queues `task`; its result, or the exception it threw, arrives through the future.
  template <typename Task>
  auto submit(Task task) -> std::future<std::invoke_result_t<Task&>> {
    using Result = std::invoke_result_t<Task&>;
    // packaged_task is move-only and std::function needs a copyable callable, hence the shared_ptr.
    auto packaged = std::make_shared<std::packaged_task<Result()>>(std::move(task));
    std::future<Result> result = packaged->get_future();
    enqueue([packaged] { (*packaged)(); });
    return result;
  }

 private:
  void enqueue(std::function<void()> job);
  void work();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace qtune::jit
