#include "kernels/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace qtune {

void parallel_for(int64_t count, const std::function<void(int64_t, int64_t)>& body, int threads, int64_t min_chunk) {
  if (count <= 0) return;
  int64_t thread_count = threads > 0 ? threads : std::max(1u, std::thread::hardware_concurrency());
  min_chunk = std::max<int64_t>(min_chunk, 1);
  thread_count = std::min(thread_count, (count + min_chunk - 1) / min_chunk);
  if (thread_count <= 1) {
    body(0, count);
    return;
  }
  // A few chunks per thread even out uneven work; chunks are taken in order from a shared counter.
  const int64_t chunk = std::max(min_chunk, (count + thread_count * 4 - 1) / (thread_count * 4));
  std::atomic<int64_t> next{0};
  std::exception_ptr first_error;
  std::mutex error_mutex;
  auto worker = [&]() {
    while (true) {
      int64_t begin = next.fetch_add(chunk);
      if (begin >= count) return;
      try {
        body(begin, std::min(count, begin + chunk));
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
        next.store(count);  // stop handing out work
        return;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int64_t i = 1; i < thread_count; ++i) {
    try {
      pool.emplace_back(worker);
    } catch (const std::system_error&) {
      break;  // no more threads to be had: the ones running (and this one) finish the work
    }
  }
  worker();
  for (std::thread& thread : pool) thread.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace qtune
