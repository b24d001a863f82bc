#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <random>
#include <regex>
#include <vector>

#include "kernels/error.hpp"
#include "tests/tuner/runtime/gpu_test_support.hpp"
#include "tuner/measure/selftest_jobs.hpp"
#include "tuner/runtime/runtime.hpp"

namespace qtune::runtime {
namespace {

// ---- Without a GPU (all machines) ----

TEST(Driver, MissingLibraryIsNoGpuErrorNamingTheLibrary) {
  try {
    Driver driver("libcuda-qtune-test-missing.so.1");
    FAIL() << "loading a missing driver library succeeded";
  } catch (const NoGpuError& error) {
    EXPECT_STREQ(error.what(), "no NVIDIA driver found (libcuda-qtune-test-missing.so.1 could not be loaded)");
  }
}

TEST(Driver, StickyErrorsAreTheOnesThatCorruptTheContext) {
  EXPECT_TRUE(is_sticky_error(CUDA_ERROR_ILLEGAL_ADDRESS));
  EXPECT_TRUE(is_sticky_error(CUDA_ERROR_ILLEGAL_INSTRUCTION));
  EXPECT_TRUE(is_sticky_error(CUDA_ERROR_LAUNCH_FAILED));
  EXPECT_TRUE(is_sticky_error(CUDA_ERROR_MISALIGNED_ADDRESS));
  EXPECT_FALSE(is_sticky_error(CUDA_SUCCESS));
  EXPECT_FALSE(is_sticky_error(CUDA_ERROR_INVALID_VALUE));
  EXPECT_FALSE(is_sticky_error(CUDA_ERROR_OUT_OF_MEMORY));
  EXPECT_FALSE(is_sticky_error(CUDA_ERROR_NOT_FOUND));
  const DriverError error(CUDA_ERROR_ILLEGAL_ADDRESS, "cuStreamSynchronize failed: x", "file.cpp", 7);
  EXPECT_TRUE(error.sticky());
  EXPECT_EQ(error.library(), "CUDA driver");
  EXPECT_STREQ(error.what(), "CUDA driver: cuStreamSynchronize failed: x");
}

TEST(Driver, WithoutADriverEveryEntryPointThrowsNoGpuError) {
  QTUNE_REQUIRE_NO_GPU();
  try {
    Driver::get();
    FAIL() << "Driver::get() succeeded";
  } catch (const NoGpuError& error) {
    const std::string message = error.what();
    std::cout << "Driver::get(): " << message << "\n";
    EXPECT_TRUE(message == "no NVIDIA driver found (libcuda.so.1 could not be loaded)" ||
                message == "no CUDA device found" || message.find("stub") != std::string::npos)
        << message;
  }
  EXPECT_FALSE(Driver::loaded());
  EXPECT_THROW(Device::get(), NoGpuError);
  EXPECT_THROW(Device::count(), NoGpuError);
  EXPECT_THROW(DeviceBuffer(64), NoGpuError);
  EXPECT_THROW(Stream(), NoGpuError);
  EXPECT_THROW(measure::compile_kernel_for_device("extern \"C\" __global__ void k() {}", "k"), NoGpuError);
  // No context was opened, so none can be broken.
  EXPECT_EQ(sticky_context_error(), std::nullopt);
}

TEST(Runtime, RuntimeVersionIsKnownWithoutADriver) {
  EXPECT_GE(runtime_version(), 13000);
  EXPECT_EQ(runtime_version() / 1000, CUDA_VERSION / 1000);
}

TEST(Runtime, GpuUuidsAreSpelledAsNvidiaSmiSpellsThem) {
  CUuuid uuid{};
  for (int i = 0; i < 16; ++i) uuid.bytes[i] = static_cast<char>(i == 0 ? 0xf3 : i * 17);
  EXPECT_EQ(gpu_uuid_text(uuid), "GPU-f3112233-4455-6677-8899-aabbccddeeff");
}

TEST(Runtime, DeviceInfoRoundTripsThroughJson) {
  DeviceInfo info;
  info.ordinal = 1;
  info.name = "NVIDIA H200";
  info.uuid = "GPU-01234567-89ab-cdef-0123-456789abcdef";
  info.pci_bus_id = "0000:19:00.0";
  info.compute_capability_major = 9;
  info.compute_capability_minor = 0;
  info.sm_count = 132;
  info.shared_memory_per_block_optin_bytes = 232448;
  info.shared_memory_per_sm_bytes = 233472;
  info.l2_cache_bytes = 52428800;
  info.registers_per_sm = 65536;
  info.max_threads_per_sm = 2048;
  info.memory_bus_width_bits = 6144;
  info.sm_clock_mhz = 1980;
  info.memory_clock_mhz = 3201;
  info.current_sm_clock_mhz = 1755;
  info.current_memory_clock_mhz = 3201;
  info.max_sm_clock_mhz = 1980;
  info.total_memory_bytes = 150754820096ull;
  info.driver_version = 13000;
  info.runtime_version = 13000;
  const nlohmann::json json = info;
  const DeviceInfo back = json.get<DeviceInfo>();
  EXPECT_EQ(nlohmann::json(back), json);
  EXPECT_EQ(back.total_memory_bytes, 150754820096ull);
  EXPECT_EQ(back.sm_name(), "sm_90");
  EXPECT_EQ(back.compute_capability(), 90);
}

// ---- With a GPU ----

TEST(RuntimeGpu, DeviceQueryIsSane) {
  QTUNE_REQUIRE_GPU();
  const Device& device = Device::get();
  const DeviceInfo& info = device.info();
  std::cout << "device: " << nlohmann::json(info).dump(2) << "\n";
  EXPECT_FALSE(info.name.empty());
  EXPECT_TRUE(std::regex_match(info.uuid, std::regex("GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")))
      << info.uuid;
  EXPECT_FALSE(info.pci_bus_id.empty());
  EXPECT_GE(info.compute_capability(), 75);
  EXPECT_GT(info.sm_count, 0);
  EXPECT_GT(info.l2_cache_bytes, 0);
  EXPECT_GE(info.shared_memory_per_block_optin_bytes, 48 * 1024);
  EXPECT_GE(info.shared_memory_per_sm_bytes, info.shared_memory_per_block_optin_bytes);
  EXPECT_GE(info.registers_per_sm, 32768);
  EXPECT_GE(info.max_threads_per_sm, 1024);
  EXPECT_GT(info.memory_bus_width_bits, 0);
  EXPECT_GT(info.sm_clock_mhz, 0);
  EXPECT_GT(info.memory_clock_mhz, 0);
  EXPECT_GT(info.total_memory_bytes, std::size_t{1} << 30);
  EXPECT_GE(info.driver_version, 13000);
  EXPECT_EQ(info.runtime_version, runtime_version());
  EXPECT_EQ(Device::count(), Driver::get().device_count());
  EXPECT_GT(device.free_memory_bytes(), std::size_t{0});
  EXPECT_TRUE(Driver::loaded());
  if (info.name.find("H200") != std::string::npos) {
    EXPECT_EQ(info.compute_capability(), 90);
    EXPECT_EQ(info.sm_count, 132);
    EXPECT_GE(info.l2_cache_bytes, 50 * 1024 * 1024);
    EXPECT_GT(info.total_memory_bytes, std::size_t{128} << 30);  // 141 GB = 131 GiB
  }
  const DeviceInfo again = device.query();
  EXPECT_EQ(again.uuid, info.uuid);
  EXPECT_THROW(Device::get(Device::count()), InputError);
}

constexpr const char* kAffineSource = R"(
extern "C" __global__ void qtune_test_affine(const unsigned* x, unsigned* y, unsigned a, unsigned b, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + b;
}
)";

TEST(RuntimeGpu, LaunchesAJitKernelOnRandomData) {
  QTUNE_REQUIRE_GPU();
  Device::get();
  const Kernel kernel = measure::compile_kernel_for_device(kAffineSource, "qtune_test_affine");
  std::cout << "registers per thread: " << kernel.registers_per_thread()
            << ", max threads per block: " << kernel.max_threads_per_block() << "\n";
  EXPECT_GT(kernel.registers_per_thread(), 0);
  const unsigned n = 1000003;  // not a multiple of the block size
  std::mt19937 generator(7);
  std::vector<unsigned> x(n);
  for (auto& value : x) value = generator();
  DeviceBuffer x_device = make_device_buffer(x);
  DeviceBuffer y_device(n * sizeof(unsigned));
  y_device.fill_bytes(0xab);  // poison
  Stream stream;
  const unsigned a = 2654435761u;
  const unsigned b = 12345u;
  const CUdeviceptr x_pointer = x_device.get();
  const CUdeviceptr y_pointer = y_device.get();
  kernel.launch_with(LaunchConfig{{(n + 255) / 256, 1, 1}, {256, 1, 1}, 0}, stream.get(), x_pointer, y_pointer, a, b,
                     n);
  stream.synchronize();
  EXPECT_TRUE(stream.idle());
  const std::vector<unsigned> y = y_device.download<unsigned>(n);
  std::size_t wrong = 0;
  for (unsigned i = 0; i < n; ++i) wrong += y[i] != a * x[i] + b;
  EXPECT_EQ(wrong, 0u);
}

constexpr const char* kSharedSource = R"(
extern "C" __global__ void qtune_test_reverse_in_shared(const unsigned* x, unsigned* y, unsigned n) {
  extern __shared__ unsigned staging[];
  for (unsigned i = threadIdx.x; i < n; i += blockDim.x) staging[i] = x[i];
  __syncthreads();
  for (unsigned i = threadIdx.x; i < n; i += blockDim.x) y[i] = staging[n - 1 - i];
}
)";

TEST(RuntimeGpu, DynamicSharedMemoryAbove48KiBNeedsTheAttribute) {
  QTUNE_REQUIRE_GPU();
  const DeviceInfo& info = Device::get().info();
  const Kernel kernel = measure::compile_kernel_for_device(kSharedSource, "qtune_test_reverse_in_shared");
  const int shared_bytes = info.shared_memory_per_block_optin_bytes;
  const unsigned n = static_cast<unsigned>(shared_bytes) / sizeof(unsigned);
  std::vector<unsigned> x(n);
  std::mt19937 generator(11);
  for (auto& value : x) value = generator();
  DeviceBuffer x_device = make_device_buffer(x);
  DeviceBuffer y_device(n * sizeof(unsigned));
  y_device.fill_bytes(0xcd);
  Stream stream;
  const LaunchConfig config{{1, 1, 1}, {256, 1, 1}, static_cast<unsigned>(shared_bytes)};
  const CUdeviceptr x_pointer = x_device.get();
  const CUdeviceptr y_pointer = y_device.get();
  try {
    kernel.launch_with(config, stream.get(), x_pointer, y_pointer, n);
    stream.synchronize();
    ADD_FAILURE() << "a launch with " << shared_bytes << " bytes of dynamic shared memory worked without opting in";
  } catch (const DriverError& error) {
    std::cout << "without the attribute: " << error.what() << "\n";
    EXPECT_NE(std::string(error.what()).find("cuLaunchKernel failed"), std::string::npos);
    EXPECT_FALSE(error.sticky());
  }
  kernel.set_max_dynamic_shared_memory(shared_bytes);
  kernel.launch_with(config, stream.get(), x_pointer, y_pointer, n);
  stream.synchronize();
  const std::vector<unsigned> y = y_device.download<unsigned>(n);
  for (unsigned i = 0; i < n; ++i) ASSERT_EQ(y[i], x[n - 1 - i]) << "at " << i;
}

TEST(RuntimeGpu, RejectedLaunchNamesTheCallAndTheError) {
  QTUNE_REQUIRE_GPU();
  Device::get();
  const Kernel kernel = measure::compile_kernel_for_device(kAffineSource, "qtune_test_affine");
  DeviceBuffer buffer(1024);
  Stream stream;
  const CUdeviceptr pointer = buffer.get();
  const unsigned zero = 0;
  try {
    kernel.launch_with(LaunchConfig{{1, 1, 1}, {4096, 1, 1}, 0}, stream.get(), pointer, pointer, zero, zero, zero);
    FAIL() << "a launch of 4096 threads per block was accepted";
  } catch (const DriverError& error) {
    std::cout << error.located() << "\n";
    EXPECT_EQ(error.library(), "CUDA driver");
    EXPECT_EQ(error.result(), CUDA_ERROR_INVALID_VALUE);
    const std::string message = error.what();
    EXPECT_NE(message.find("cuLaunchKernel failed"), std::string::npos) << message;
    EXPECT_NE(message.find("CUDA_ERROR_INVALID_VALUE"), std::string::npos) << message;
    EXPECT_NE(message.find("qtune_test_affine"), std::string::npos) << message;
    EXPECT_NE(error.file().find("module.cpp"), std::string::npos);
  }
  // A rejected launch does not break the context.
  EXPECT_EQ(sticky_context_error(), std::nullopt);
  EXPECT_NO_THROW(Device::get().synchronize());
}

TEST(RuntimeGpu, QtuneCuThrowsWithTheFunctionAndLocation) {
  QTUNE_REQUIRE_GPU();
  Device::get();
  CUdeviceptr pointer = 0;
  try {
    QTUNE_CU(cuMemAlloc, &pointer, std::size_t{1} << 62);  // 4 EiB: no device has that
    FAIL() << "allocating 4 EiB succeeded";
  } catch (const DriverError& error) {
    std::cout << error.located() << "\n";
    EXPECT_TRUE(error.result() == CUDA_ERROR_OUT_OF_MEMORY || error.result() == CUDA_ERROR_INVALID_VALUE)
        << error.result();
    EXPECT_EQ(std::string(error.what()), "CUDA driver: cuMemAlloc failed: " + Driver::get().describe(error.result()));
    if (error.result() == CUDA_ERROR_OUT_OF_MEMORY) {
      EXPECT_EQ(std::string(error.what()), "CUDA driver: cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)");
    }
    EXPECT_NE(error.file().find("runtime_test.cpp"), std::string::npos);
  }
}

TEST(RuntimeGpu, BuffersCopyBothWaysAndCheckTheirBounds) {
  QTUNE_REQUIRE_GPU();
  Device::get();
  std::vector<std::uint8_t> data(3 << 20);
  std::mt19937 generator(3);
  for (auto& value : data) value = static_cast<std::uint8_t>(generator());
  DeviceBuffer first = make_device_buffer(data);
  DeviceBuffer second(data.size());
  second.fill_bytes(0xee);
  second.copy_from(first, data.size());
  EXPECT_EQ(second.download<std::uint8_t>(data.size()), data);
  std::vector<std::uint8_t> part(100);
  second.download(part.data(), part.size(), 1000);
  EXPECT_TRUE(std::equal(part.begin(), part.end(), data.begin() + 1000));
  EXPECT_THROW(second.download(part.data(), part.size(), data.size() - 50), Error);
  EXPECT_THROW(second.upload(part.data(), data.size() + 1), Error);
  DeviceBuffer moved = std::move(second);
  EXPECT_EQ(second.get(), CUdeviceptr{0});
  EXPECT_EQ(moved.bytes(), data.size());
  const DeviceBuffer empty(0);
  EXPECT_EQ(empty.get(), CUdeviceptr{0});
}

TEST(RuntimeGpu, LoadingGarbageIsADriverErrorWithTheCall) {
  QTUNE_REQUIRE_GPU();
  Device::get();
  const std::vector<char> garbage(4096, 'q');
  try {
    const Module module(garbage);
    FAIL() << "garbage loaded as a module";
  } catch (const DriverError& error) {
    std::cout << error.what() << "\n";
    EXPECT_NE(std::string(error.what()).find("cuModuleLoadData failed"), std::string::npos);
  }
  const Kernel kernel = measure::compile_kernel_for_device(kAffineSource, "qtune_test_affine");
  EXPECT_EQ(kernel.name(), "qtune_test_affine");
}

TEST(RuntimeGpu, EventsTimeAKernel) {
  QTUNE_REQUIRE_GPU();
  Device::get();
  const Kernel kernel = measure::compile_kernel_for_device(measure::selftest_copy_source(), measure::kSelftestCopyKernel);
  const std::size_t bytes = std::size_t{256} << 20;
  DeviceBuffer source(bytes);
  DeviceBuffer destination(bytes);
  source.fill_bytes(0x11);
  Stream stream;
  Event start;
  Event end;
  const CUdeviceptr source_pointer = source.get();
  const CUdeviceptr destination_pointer = destination.get();
  const unsigned long long count = bytes / 16;
  start.record(stream.get());
  kernel.launch_with(measure::selftest_copy_launch(), stream.get(), source_pointer, destination_pointer, count);
  end.record(stream.get());
  end.synchronize();
  const float milliseconds = Event::elapsed_ms(start, end);
  std::cout << "256 MiB copy: " << milliseconds << " ms by events\n";
  EXPECT_GT(milliseconds, 0.0f);
  EXPECT_LT(milliseconds, 1000.0f);
}

}  // namespace
}  // namespace qtune::runtime
