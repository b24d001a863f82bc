#include "tuner/runtime/memory.hpp"

#include <string>
#include <utility>

#include "kernels/error.hpp"
#include "tuner/runtime/driver.hpp"

namespace qtune::runtime {

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  QTUNE_CU(cuCtxGetCurrent, &context_);
  if (context_ == nullptr) {
    QTUNE_THROW(Error, "DeviceBuffer: no CUDA context is current on this thread (call runtime::Device::get first)");
  }
  if (bytes > 0) QTUNE_CU(cuMemAlloc, &pointer_, bytes);
}

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : pointer_(std::exchange(other.pointer_, 0)),
      bytes_(std::exchange(other.bytes_, 0)),
      context_(std::exchange(other.context_, nullptr)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    pointer_ = std::exchange(other.pointer_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
    context_ = std::exchange(other.context_, nullptr);
  }
  return *this;
}

void DeviceBuffer::release() noexcept {
  if (pointer_ == 0) return;
  // A destructor cannot report a failure; after a sticky error the context is gone anyway.
  const Driver& driver = Driver::get();
  if (driver.cuCtxSetCurrent(context_) == CUDA_SUCCESS) driver.cuMemFree(pointer_);
  pointer_ = 0;
  bytes_ = 0;
}

void DeviceBuffer::check_range(std::size_t bytes, std::size_t offset, const char* what) const {
  if (offset > bytes_ || bytes > bytes_ - offset) {
    QTUNE_THROW(Error, std::string("DeviceBuffer::") + what + ": " + std::to_string(bytes) + " bytes at offset " +
                           std::to_string(offset) + " exceed the buffer's " + std::to_string(bytes_) + " bytes");
  }
}

void DeviceBuffer::upload(const void* host, std::size_t bytes, std::size_t offset) {
  check_range(bytes, offset, "upload");
  if (bytes > 0) QTUNE_CU(cuMemcpyHtoD, pointer_ + offset, host, bytes);
}

void DeviceBuffer::download(void* host, std::size_t bytes, std::size_t offset) const {
  check_range(bytes, offset, "download");
  if (bytes > 0) QTUNE_CU(cuMemcpyDtoH, host, pointer_ + offset, bytes);
}

void DeviceBuffer::copy_from(const DeviceBuffer& source, std::size_t bytes) {
  check_range(bytes, 0, "copy_from");
  source.check_range(bytes, 0, "copy_from");
  if (bytes > 0) QTUNE_CU(cuMemcpyDtoD, pointer_, source.pointer_, bytes);
}

void DeviceBuffer::fill_bytes(unsigned char value) {
  if (bytes_ > 0) QTUNE_CU(cuMemsetD8, pointer_, value, bytes_);
}

void DeviceBuffer::upload_async(const void* host, std::size_t bytes, CUstream stream, std::size_t offset) {
  check_range(bytes, offset, "upload_async");
  if (bytes > 0) QTUNE_CU(cuMemcpyHtoDAsync, pointer_ + offset, host, bytes, stream);
}

void DeviceBuffer::download_async(void* host, std::size_t bytes, CUstream stream, std::size_t offset) const {
  check_range(bytes, offset, "download_async");
  if (bytes > 0) QTUNE_CU(cuMemcpyDtoHAsync, host, pointer_ + offset, bytes, stream);
}

void DeviceBuffer::fill_bytes_async(unsigned char value, CUstream stream) {
  if (bytes_ > 0) QTUNE_CU(cuMemsetD8Async, pointer_, value, bytes_, stream);
}

}  // namespace qtune::runtime
