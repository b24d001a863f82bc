#pragma once
// Device memory from plain allocations (cuMemAlloc; never managed memory) and copies to and from the host.
#include <cuda.h>

#include <cstddef>
#include <vector>

namespace qtune::runtime {

// Owns `bytes` of device memory in the context current when it was made (Device::get makes one current).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  CUdeviceptr get() const { return pointer_; }
  std::size_t bytes() const { return bytes_; }
  // The address as a typed pointer, for kernel arguments.
  template <typename T>
  T* as() const {
    return reinterpret_cast<T*>(pointer_);
  }

  // Synchronous copies; [offset, offset + bytes) must lie inside the buffer (else qtune::Error).
  void upload(const void* host, std::size_t bytes, std::size_t offset = 0);
  void download(void* host, std::size_t bytes, std::size_t offset = 0) const;
  void copy_from(const DeviceBuffer& source, std::size_t bytes);
  void fill_bytes(unsigned char value);
  // Asynchronous variants on `stream` (the host memory must stay valid until the stream reaches the copy).
  void upload_async(const void* host, std::size_t bytes, CUstream stream, std::size_t offset = 0);
  void download_async(void* host, std::size_t bytes, CUstream stream, std::size_t offset = 0) const;
  void fill_bytes_async(unsigned char value, CUstream stream);

  template <typename T>
  void upload(const std::vector<T>& host) {
    upload(host.data(), host.size() * sizeof(T));
  }
  template <typename T>
  std::vector<T> download(std::size_t count) const {
    std::vector<T> host(count);
    download(host.data(), count * sizeof(T));
    return host;
  }

 private:
  void check_range(std::size_t bytes, std::size_t offset, const char* what) const;
  void release() noexcept;
  CUdeviceptr pointer_ = 0;
  std::size_t bytes_ = 0;
  CUcontext context_ = nullptr;
};

// Allocates a buffer holding a copy of `host`.
template <typename T>
DeviceBuffer make_device_buffer(const std::vector<T>& host) {
  DeviceBuffer buffer(host.size() * sizeof(T));
  buffer.upload(host);
  return buffer;
}

}  // namespace qtune::runtime
