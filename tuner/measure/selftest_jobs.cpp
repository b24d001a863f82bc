#include "tuner/measure/selftest_jobs.hpp"

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "kernels/error.hpp"
#include "tuner/jit/compiler.hpp"
#include "tuner/measure/measure.hpp"
#include "tuner/measure/worker.hpp"
#include "tuner/runtime/device.hpp"
#include "tuner/runtime/memory.hpp"
#include "tuner/runtime/stream.hpp"

namespace qtune::measure {

namespace {

const char* const kCopySource = R"(
extern "C" __global__ void qtune_selftest_copy(const uint4* __restrict__ source, uint4* __restrict__ destination,
                                               unsigned long long count) {
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < count; i += 4 * stride) {
    const uint4 a = source[i];
    const uint4 b = source[i + stride];
    const uint4 c = source[i + 2 * stride];
    const uint4 d = source[i + 3 * stride];
    destination[i] = a;
    destination[i + stride] = b;
    destination[i + 2 * stride] = c;
    destination[i + 3 * stride] = d;
  }
  for (; i < count; i += stride) destination[i] = source[i];
}
)";

// kind 0 writes to an address no allocation covers; kind 1 executes a trap instruction.
const char* const kFaultSource = R"(
extern "C" __global__ void qtune_selftest_fault(unsigned long long address, int kind) {
  if (kind == 0) {
    *reinterpret_cast<volatile int*>(address) = 42;
  } else {
    __trap();
  }
}
)";

// Spins until *flag becomes non-zero, which nothing ever does.
const char* const kHangSource = R"(
extern "C" __global__ void qtune_selftest_hang(const volatile int* flag) {
  while (*flag == 0) {
    __nanosleep(1000);
  }
}
)";

const jit::Compiler& compiler() {
  static const jit::Compiler* instance = new jit::Compiler;  // compile() is thread-safe
  return *instance;
}

int device_of(const nlohmann::json& params) { return params.value("device", 0); }

nlohmann::json fault_job(const nlohmann::json& params) {
  const std::string kind = params.value("kind", std::string("illegal-address"));
  int kind_code = 0;
  if (kind == "illegal-address") {
    kind_code = 0;
  } else if (kind == "trap") {
    kind_code = 1;
  } else {
    QTUNE_INPUT_ERROR("kind: '" + kind + "' is not one of illegal-address, trap");
  }
  const runtime::Kernel kernel = compile_kernel_for_device(kFaultSource, "qtune_selftest_fault", device_of(params));
  runtime::Stream stream;
  const unsigned long long address = 0x10;  // the first page is never mapped
  kernel.launch_with(runtime::LaunchConfig{{1, 1, 1}, {32, 1, 1}, 0}, stream.get(), address, kind_code);
  stream.synchronize();  // the fault surfaces here as a sticky DriverError
  return nlohmann::json{{"faulted", false}, {"kind", kind}};
}

nlohmann::json hang_job(const nlohmann::json& params) {
  const runtime::Kernel kernel = compile_kernel_for_device(kHangSource, "qtune_selftest_hang", device_of(params));
  runtime::DeviceBuffer flag(sizeof(int));
  flag.fill_bytes(0);
  runtime::Stream stream;
  kernel.launch_with(runtime::LaunchConfig{{1, 1, 1}, {1, 1, 1}, 0}, stream.get(), flag.get());
  stream.synchronize();  // never returns: the parent's watchdog kills this process
  return nlohmann::json{{"returned", true}};
}

nlohmann::json copy_job(const nlohmann::json& params) {
  const std::uint64_t bytes = params.value("bytes", std::uint64_t{1} << 30);
  if (bytes < 16 || bytes % 16 != 0) {
    QTUNE_INPUT_ERROR("bytes: " + std::to_string(bytes) + " is not a positive multiple of 16");
  }
  const int device_ordinal = device_of(params);
  runtime::Device& device = runtime::Device::get(device_ordinal);
  const runtime::Kernel kernel = compile_kernel_for_device(selftest_copy_source(), kSelftestCopyKernel, device_ordinal);
  runtime::DeviceBuffer source(bytes);
  runtime::DeviceBuffer destination(bytes);
  // Random bytes at both ends (checked after the copy), a pattern between; the destination is poisoned.
  const std::size_t check_bytes = std::min<std::uint64_t>(bytes / 2 / 16 * 16, 4u << 20);
  std::mt19937_64 generator(params.value("seed", std::uint64_t{20240611}));
  std::vector<std::uint64_t> head(check_bytes / 8);
  std::vector<std::uint64_t> tail(check_bytes / 8);
  for (auto& word : head) word = generator();
  for (auto& word : tail) word = generator();
  source.fill_bytes(0x5a);
  source.upload(head.data(), check_bytes, 0);
  source.upload(tail.data(), check_bytes, bytes - check_bytes);
  destination.fill_bytes(0xff);

  MeasureOptions options;
  options.device = device_ordinal;
  options.warm_l2 = params.value("warm_l2", false);
  options.time_budget_s = params.value("time_budget_s", options.time_budget_s);
  options.min_repetitions = params.value("min_repetitions", options.min_repetitions);
  const unsigned long long count = bytes / 16;
  const runtime::LaunchConfig launch = selftest_copy_launch(device_ordinal);
  const CUdeviceptr source_pointer = source.get();
  const CUdeviceptr destination_pointer = destination.get();
  const Measurement measurement = measure(
      [&](CUstream stream) { kernel.launch_with(launch, stream, source_pointer, destination_pointer, count); },
      options);

  std::vector<std::uint64_t> copied(check_bytes / 8);
  destination.download(copied.data(), check_bytes, 0);
  if (copied != head) QTUNE_THROW(Error, "selftest-copy: the first bytes of the destination differ from the source");
  destination.download(copied.data(), check_bytes, bytes - check_bytes);
  if (copied != tail) QTUNE_THROW(Error, "selftest-copy: the last bytes of the destination differ from the source");

  const double bandwidth_gbps = 2.0 * static_cast<double>(bytes) / (measurement.median_us * 1e-6) / 1e9;
  return nlohmann::json{{"measurement", measurement},
                        {"bytes", bytes},
                        {"bandwidth_gbps", bandwidth_gbps},
                        {"device", device.info()}};
}

}  // namespace

runtime::Kernel compile_kernel_for_device(const std::string& source, const std::string& kernel_name, int device) {
  const runtime::DeviceInfo& info = runtime::Device::get(device).info();
  jit::CompileRequest request;
  request.source = source;
  request.kernel_name = kernel_name;
  request.arch = info.sm_name();
  const jit::CompiledKernel compiled = compiler().compile(request);
  const runtime::Module module(compiled.cubin);
  return module.kernel(compiled.lowered_name.empty() ? kernel_name : compiled.lowered_name);
}

const std::string& selftest_copy_source() {
  static const std::string source = kCopySource;
  return source;
}

runtime::LaunchConfig selftest_copy_launch(int device) {
  const runtime::DeviceInfo& info = runtime::Device::get(device).info();
  constexpr unsigned threads = 256;
  // Enough resident threads per SM to keep the memory system busy (8 x 256 = 2048 on most GPUs).
  const unsigned blocks_per_sm = std::max(1u, static_cast<unsigned>(info.max_threads_per_sm) / threads);
  return runtime::LaunchConfig{{static_cast<unsigned>(info.sm_count) * blocks_per_sm, 1, 1}, {threads, 1, 1}, 0};
}

namespace {

std::string mma_peak_source(const MmaPeakKernel& kernel, const std::string& accumulator_type, char constraint_letter) {
  const std::string chains = std::to_string(kernel.chains);
  const std::string c = std::string("+") + constraint_letter;
  return "extern \"C\" __global__ void " + kernel.kernel_name + R"((int iterations, unsigned* sink) {
  // Operands vary by thread so nothing folds; small values keep f16/fp8 products finite.
  const unsigned seed = (threadIdx.x & 7u) * 0x00010001u;
  const unsigned a0 = 0x3C003C00u ^ seed, a1 = 0x3C013C01u ^ seed, a2 = 0x3C023C02u ^ seed, a3 = 0x3C033C03u ^ seed;
  const unsigned b0 = 0x38003800u ^ seed, b1 = 0x38013801u ^ seed;
  )" + accumulator_type + " acc[" + chains + R"(][4];
#pragma unroll
  for (int c = 0; c < )" + chains + R"(; ++c) acc[c][0] = acc[c][1] = acc[c][2] = acc[c][3] = 0;
  for (int i = 0; i < iterations; ++i) {
#pragma unroll
    for (int c = 0; c < )" + chains + R"(; ++c) {
      asm volatile(")" + kernel.instruction + R"( {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                   : ")" + c + R"("(acc[c][0]), ")" + c + R"("(acc[c][1]), ")" + c + R"("(acc[c][2]), ")" + c + R"("(acc[c][3])
                   : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
  }
  unsigned folded = 0;
#pragma unroll
  for (int c = 0; c < )" + chains + R"(; ++c)
    for (int e = 0; e < 4; ++e) folded ^= static_cast<unsigned>(acc[c][e]);
  if (folded == 0x9E3779B9u) *sink = folded;  // keeps the MMAs alive
}
)";
}

MmaPeakKernel make_peak_kernel(std::string type, std::string instruction, int k, int min_sm, bool integer) {
  MmaPeakKernel kernel;
  kernel.kernel_name = "qtune_mma_peak_" + type;
  kernel.type = std::move(type);
  kernel.instruction = std::move(instruction);
  kernel.k = k;
  kernel.min_sm = min_sm;
  kernel.source = mma_peak_source(kernel, integer ? "int" : "float", integer ? 'r' : 'f');
  return kernel;
}

}  // namespace

const std::vector<MmaPeakKernel>& mma_peak_kernels() {
  static const std::vector<MmaPeakKernel> kernels{
      make_peak_kernel("f16", "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", 16, 80, false),
      make_peak_kernel("bf16", "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", 16, 80, false),
      make_peak_kernel("int8", "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32", 32, 80, true),
      make_peak_kernel("fp8_e4m3", "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32", 32, 89, false)};
  return kernels;
}

const MmaPeakKernel& mma_peak_kernel(const std::string& type) {
  for (const MmaPeakKernel& kernel : mma_peak_kernels()) {
    if (kernel.type == type) return kernel;
  }
  QTUNE_INPUT_ERROR("type: '" + type + "' is not one of f16, bf16, int8, fp8_e4m3");
}

runtime::LaunchConfig mma_peak_launch(int device) {
  const runtime::DeviceInfo& info = runtime::Device::get(device).info();
  constexpr unsigned threads = 128;
  constexpr unsigned blocks_per_sm = 8;
  return runtime::LaunchConfig{{static_cast<unsigned>(info.sm_count) * blocks_per_sm, 1, 1}, {threads, 1, 1}, 0};
}

double mma_peak_operations(const MmaPeakKernel& kernel, const runtime::LaunchConfig& launch) {
  const double warps = static_cast<double>(launch.grid.x) * launch.block.x / 32.0;
  return warps * kernel.iterations * kernel.chains * 2.0 * 16 * 8 * kernel.k;
}

void register_selftest_jobs() {
  register_job("selftest-echo", [](const nlohmann::json& params) { return params; });
  register_job("selftest-throw", [](const nlohmann::json& params) -> nlohmann::json {
    QTUNE_INPUT_ERROR(params.value("message", std::string("selftest-throw: thrown on purpose")));
  });
  register_job("selftest-segfault", [](const nlohmann::json&) -> nlohmann::json {
    std::signal(SIGSEGV, SIG_DFL);
    std::raise(SIGSEGV);
    return nlohmann::json{{"survived", true}};
  });
  register_job("selftest-sleep", [](const nlohmann::json& params) {
    const double seconds = params.value("seconds", 1.0);
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    return nlohmann::json{{"slept_s", seconds}};
  });
  register_job("selftest-device",
               [](const nlohmann::json& params) { return nlohmann::json(runtime::Device::get(device_of(params)).info()); });
  register_job("selftest-fault", fault_job);
  register_job("selftest-hang", hang_job);
  register_job("selftest-copy", copy_job);
}

}  // namespace qtune::measure
