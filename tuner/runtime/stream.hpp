#pragma once
// RAII wrappers of driver streams and events.
#include <cuda.h>

namespace qtune::runtime {

// A non-blocking stream in the current context (it does not synchronise with the legacy default stream).
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  CUstream get() const { return stream_; }
  // Waits for the stream; faults of kernels on it surface here as DriverError.
  void synchronize() const;
  // True when all work on the stream has finished.
  bool idle() const;

 private:
  void release() noexcept;
  CUstream stream_ = nullptr;
  CUcontext context_ = nullptr;
};

// A timing event (host-side timing reference for tests; measurements use CUPTI).
class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  CUevent get() const { return event_; }
  void record(CUstream stream) const;
  void synchronize() const;
  // Milliseconds between two recorded, completed events.
  static float elapsed_ms(const Event& start, const Event& end);

 private:
  CUevent event_ = nullptr;
  CUcontext context_ = nullptr;
};

}  // namespace qtune::runtime
