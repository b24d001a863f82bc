#pragma once
// Kernel durations from CUPTI activity records (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: GPU start and end
// timestamps), never from host timers. Each repetition of an operation is bracketed by an external correlation id
// (cuptiActivityPushExternalCorrelationId / Pop); CUPTI's EXTERNAL_CORRELATION records map the correlation id of
// every driver/runtime call made inside the bracket to that id, and so to the kernels the calls launched. A
// repetition's time is the SUM of the durations of its kernels: gaps between them and work launched outside the
// bracket (the L2 flush) are not counted.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace qtune::measure {

struct RepetitionTiming {
  std::uint64_t id = 0;
  double total_us = 0;                    // sum of the kernels' end - start
  int kernel_count = 0;
  std::vector<std::string> kernel_names;  // in order of start time (mangled names as CUPTI gives them)
  std::vector<double> kernel_us;          // per kernel, same order
};

// Enables CUPTI activity collection for its lifetime. One timer at a time per process (a second throws
// qtune::Error); must be created after the CUDA context (runtime::Device::get). Launches of one repetition must
// come from the thread that calls begin_repetition/end_repetition. Every CUPTI call is checked:
// LibraryError("CUPTI", "cuptiXxx failed: CUPTI_ERROR_... (<cuptiGetResultString>)").
class CuptiTimer {
 public:
  CuptiTimer();
  ~CuptiTimer();
  CuptiTimer(const CuptiTimer&) = delete;
  CuptiTimer& operator=(const CuptiTimer&) = delete;

  // Pushes a fresh external correlation id (process-wide unique, increasing) and returns it.
  std::uint64_t begin_repetition();
  // Pops the id pushed by begin_repetition.
  void end_repetition();
  // Flushes CUPTI's buffers and returns the timing of each id, in the order given. Call after the GPU work of those
  // repetitions finished (synchronise first). An id whose kernels CUPTI did not deliver has kernel_count 0.
  std::vector<RepetitionTiming> collect(const std::vector<std::uint64_t>& ids);
  // Kernel records seen so far that no external id could be attributed to (launched outside any repetition, or
  // on another thread); 0 in a healthy measurement of an operation launched on the measuring thread.
  std::size_t unattributed_kernels() const { return unattributed_kernels_; }

 private:
  std::size_t unattributed_kernels_ = 0;
  std::unordered_map<std::uint32_t, std::uint64_t> external_ids_;  // correlation id -> external id, not yet used
};

namespace detail {
// Throws LibraryError("CUPTI", "<function> failed: <cuptiGetResultString>") unless result is CUPTI_SUCCESS.
void check_cupti(int result, const char* function, const char* file, int line);
}  // namespace detail

}  // namespace qtune::measure

#define QTUNE_CUPTI(function, ...) \
  ::qtune::measure::detail::check_cupti(static_cast<int>(function(__VA_ARGS__)), #function, __FILE__, __LINE__)
