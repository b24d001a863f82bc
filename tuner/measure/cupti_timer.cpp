#include "tuner/measure/cupti_timer.hpp"

#include <cupti.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

#include "kernels/error.hpp"

namespace qtune::measure {

namespace detail {

void check_cupti(int result, const char* function, const char* file, int line) {
  if (result == CUPTI_SUCCESS) return;
  const char* text = nullptr;
  if (cuptiGetResultString(static_cast<CUptiResult>(result), &text) != CUPTI_SUCCESS || text == nullptr) {
    text = "unknown CUPTI result";
  }
  throw LibraryError("CUPTI", std::string(function) + " failed: " + text + " (" + std::to_string(result) + ")", file,
                     line);
}

}  // namespace detail

namespace {

constexpr std::size_t kBufferBytes = 8u << 20;
constexpr CUpti_ExternalCorrelationKind kCorrelationKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
// Driver and runtime API records are enabled only because external correlation records accompany them.
constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
                                         CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_RUNTIME};

struct KernelRecord {
  std::uint32_t correlation_id = 0;
  std::uint64_t start_ns = 0;
  std::uint64_t end_ns = 0;
  std::string name;
};

// What the buffer callbacks deliver, from CUPTI's threads or inside cuptiActivityFlushAll.
struct ActivityStore {
  std::mutex mutex;
  std::vector<KernelRecord> kernels;
  std::unordered_map<std::uint32_t, std::uint64_t> external_ids;  // correlation id -> external id
  std::size_t dropped_records = 0;
  std::string callback_error;  // first error met inside a callback (they cannot throw)
};

ActivityStore& store() {
  static ActivityStore* activity = new ActivityStore;  // never destroyed: CUPTI may call back during exit
  return *activity;
}

std::atomic<bool> timer_active{false};
std::atomic<std::uint64_t> next_external_id{1};

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(ACTIVITY_RECORD_ALIGNMENT, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream_id, uint8_t* buffer, size_t /*size*/,
                               size_t valid_size) {
  ActivityStore& activity = store();
  std::vector<KernelRecord> kernels;
  std::vector<std::pair<std::uint32_t, std::uint64_t>> correlations;
  std::string error;
  CUpti_Activity* record = nullptr;
  while (true) {
    const CUptiResult result = cuptiActivityGetNextRecord(buffer, valid_size, &record);
    if (result == CUPTI_ERROR_MAX_LIMIT_REACHED) break;
    if (result != CUPTI_SUCCESS) {
      const char* text = nullptr;
      cuptiGetResultString(result, &text);
      error = std::string("cuptiActivityGetNextRecord failed: ") + (text != nullptr ? text : "?");
      break;
    }
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      // The fields read here sit at the same offsets in every kernel record version.
      const auto* kernel = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      kernels.push_back({kernel->correlationId, kernel->start, kernel->end,
                         kernel->name != nullptr ? kernel->name : "<unnamed>"});
    } else if (record->kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
      const auto* correlation = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
      if (correlation->externalKind == kCorrelationKind) {
        correlations.emplace_back(correlation->correlationId, correlation->externalId);
      }
    }
  }
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(context, stream_id, &dropped) != CUPTI_SUCCESS) dropped = 0;
  std::free(buffer);

  std::lock_guard lock(activity.mutex);
  for (auto& kernel : kernels) activity.kernels.push_back(std::move(kernel));
  for (const auto& [correlation_id, external_id] : correlations) activity.external_ids[correlation_id] = external_id;
  activity.dropped_records += dropped;
  if (activity.callback_error.empty()) activity.callback_error = error;
}

void register_callbacks_once() {
  static std::once_flag once;
  static std::exception_ptr failure;
  std::call_once(once, [] {
    try {
      QTUNE_CUPTI(cuptiActivityRegisterCallbacks, buffer_requested, buffer_completed);
    } catch (...) {
      failure = std::current_exception();
    }
  });
  if (failure) std::rethrow_exception(failure);
}

// Takes everything the callbacks stored and clears the store.
void drain(std::vector<KernelRecord>& kernels, std::unordered_map<std::uint32_t, std::uint64_t>& external_ids) {
  ActivityStore& activity = store();
  std::lock_guard lock(activity.mutex);
  if (!activity.callback_error.empty()) {
    const std::string error = std::exchange(activity.callback_error, {});
    QTUNE_LIBRARY_ERROR("CUPTI", error);
  }
  if (activity.dropped_records > 0) {
    const std::size_t dropped = std::exchange(activity.dropped_records, 0);
    QTUNE_LIBRARY_ERROR("CUPTI", std::to_string(dropped) + " activity records were dropped (buffers too small)");
  }
  for (auto& kernel : activity.kernels) kernels.push_back(std::move(kernel));
  activity.kernels.clear();
  external_ids.merge(activity.external_ids);
  activity.external_ids.clear();
}

}  // namespace

CuptiTimer::CuptiTimer() {
  if (timer_active.exchange(true)) {
    QTUNE_THROW(Error, "CuptiTimer: another timer is already active in this process");
  }
  try {
    register_callbacks_once();
    for (const CUpti_ActivityKind kind : kKinds) QTUNE_CUPTI(cuptiActivityEnable, kind);
    // Records of work done before this timer belong to nobody: flush and forget them.
    QTUNE_CUPTI(cuptiActivityFlushAll, CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    std::vector<KernelRecord> stale_kernels;
    std::unordered_map<std::uint32_t, std::uint64_t> stale_ids;
    drain(stale_kernels, stale_ids);
  } catch (...) {
    for (const CUpti_ActivityKind kind : kKinds) cuptiActivityDisable(kind);
    timer_active = false;
    throw;
  }
}

CuptiTimer::~CuptiTimer() {
  // Errors cannot leave a destructor; the next timer discards whatever is still buffered.
  for (const CUpti_ActivityKind kind : kKinds) cuptiActivityDisable(kind);
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  timer_active = false;
}

std::uint64_t CuptiTimer::begin_repetition() {
  const std::uint64_t id = next_external_id.fetch_add(1);
  QTUNE_CUPTI(cuptiActivityPushExternalCorrelationId, kCorrelationKind, id);
  return id;
}

void CuptiTimer::end_repetition() {
  std::uint64_t last_id = 0;
  QTUNE_CUPTI(cuptiActivityPopExternalCorrelationId, kCorrelationKind, &last_id);
}

std::vector<RepetitionTiming> CuptiTimer::collect(const std::vector<std::uint64_t>& ids) {
  std::unordered_map<std::uint64_t, std::size_t> index_of;
  std::vector<RepetitionTiming> timings(ids.size());
  std::vector<std::vector<KernelRecord>> kernels_of(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    index_of[ids[i]] = i;
    timings[i].id = ids[i];
  }
  std::vector<KernelRecord> pending;  // kernels whose correlation record has not arrived yet
  std::unordered_map<std::uint32_t, std::uint64_t>& external_ids = external_ids_;
  std::size_t repetitions_with_kernels = 0;
  // After a synchronisation one forced flush normally delivers everything; retry briefly in case it does not.
  for (int attempt = 0; attempt < 50; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    QTUNE_CUPTI(cuptiActivityFlushAll, CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    drain(pending, external_ids);
    std::vector<KernelRecord> unmatched;
    for (auto& kernel : pending) {
      const auto external = external_ids.find(kernel.correlation_id);
      if (external == external_ids.end()) {
        unmatched.push_back(std::move(kernel));
        continue;
      }
      const auto index = index_of.find(external->second);
      if (index == index_of.end()) continue;  // a repetition of an earlier collect (already reported) or foreign
      kernels_of[index->second].push_back(std::move(kernel));
    }
    pending = std::move(unmatched);
    repetitions_with_kernels = static_cast<std::size_t>(
        std::count_if(kernels_of.begin(), kernels_of.end(), [](const auto& kernels) { return !kernels.empty(); }));
    if (repetitions_with_kernels == ids.size()) break;
  }
  unattributed_kernels_ += pending.size();
  // Correlations of these repetitions and of older ones are spent; later repetitions have larger ids.
  const std::uint64_t newest = ids.empty() ? 0 : *std::max_element(ids.begin(), ids.end());
  std::erase_if(external_ids, [newest](const auto& entry) { return entry.second <= newest; });

  for (std::size_t i = 0; i < ids.size(); ++i) {
    auto& kernels = kernels_of[i];
    std::sort(kernels.begin(), kernels.end(),
              [](const KernelRecord& a, const KernelRecord& b) { return a.start_ns < b.start_ns; });
    RepetitionTiming& timing = timings[i];
    timing.kernel_count = static_cast<int>(kernels.size());
    for (const KernelRecord& kernel : kernels) {
      const double microseconds = static_cast<double>(kernel.end_ns - kernel.start_ns) / 1000.0;
      timing.total_us += microseconds;
      timing.kernel_us.push_back(microseconds);
      timing.kernel_names.push_back(kernel.name);
    }
  }
  return timings;
}

}  // namespace qtune::measure
