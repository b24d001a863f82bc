#include "tuner/runtime/stream.hpp"

#include <utility>

#include "kernels/error.hpp"
#include "tuner/runtime/driver.hpp"

namespace qtune::runtime {

namespace {

CUcontext current_context(const char* who) {
  CUcontext context = nullptr;
  QTUNE_CU(cuCtxGetCurrent, &context);
  if (context == nullptr) {
    QTUNE_THROW(Error, std::string(who) + ": no CUDA context is current on this thread (call runtime::Device::get first)");
  }
  return context;
}

}  // namespace

Stream::Stream() : context_(current_context("Stream")) { QTUNE_CU(cuStreamCreate, &stream_, CU_STREAM_NON_BLOCKING); }

Stream::~Stream() { release(); }

Stream::Stream(Stream&& other) noexcept
    : stream_(std::exchange(other.stream_, nullptr)), context_(std::exchange(other.context_, nullptr)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    release();
    stream_ = std::exchange(other.stream_, nullptr);
    context_ = std::exchange(other.context_, nullptr);
  }
  return *this;
}

void Stream::release() noexcept {
  if (stream_ == nullptr) return;
  const Driver& driver = Driver::get();
  if (driver.cuCtxSetCurrent(context_) == CUDA_SUCCESS) driver.cuStreamDestroy(stream_);
  stream_ = nullptr;
}

void Stream::synchronize() const { QTUNE_CU(cuStreamSynchronize, stream_); }

bool Stream::idle() const {
  const CUresult result = Driver::get().cuStreamQuery(stream_);
  if (result == CUDA_ERROR_NOT_READY) return false;
  detail::check_driver(result, "cuStreamQuery", __FILE__, __LINE__);
  return true;
}

Event::Event() : context_(current_context("Event")) { QTUNE_CU(cuEventCreate, &event_, CU_EVENT_DEFAULT); }

Event::~Event() {
  const Driver& driver = Driver::get();
  if (driver.cuCtxSetCurrent(context_) == CUDA_SUCCESS) driver.cuEventDestroy(event_);
}

void Event::record(CUstream stream) const { QTUNE_CU(cuEventRecord, event_, stream); }

void Event::synchronize() const { QTUNE_CU(cuEventSynchronize, event_); }

float Event::elapsed_ms(const Event& start, const Event& end) {
  float milliseconds = 0;
  QTUNE_CU(cuEventElapsedTime, &milliseconds, start.event_, end.event_);
  return milliseconds;
}

}  // namespace qtune::runtime
