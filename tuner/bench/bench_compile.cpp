// Compile-time benchmarks of the NVRTC JIT: a cold compile (empty cache), a cached load, and compile_all's throughput
// on 1..16 threads. The kernel is a stand-in W4A16 GEMM written here (cp.async pipeline, ldmatrix, int4 dequant,
// mma.sync); representative_request() is the one place to swap in the real kernels/ W4A16 instantiation.
// BM_CompileColdFamilyW4A16 compiles the real one: the mma family's default config for w4a16-int4-g128 on sm_90a.
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "kernels/error.hpp"
#include "kernels/family.hpp"
#include "kernels/format.hpp"
#include "tuner/jit/compiler.hpp"

namespace qtune::jit {
namespace {

constexpr const char* kArch = "sm_90a";

// Stand-in for the real W4A16 kernel: a multistage tensor-core GEMM with 4-bit weights and fp16 group scales.
constexpr const char* kW4A16Header = R"cuda(#pragma once
#include <cuda_fp16.h>

namespace bench {

__device__ inline unsigned shared_address(const void* pointer) {
  return static_cast<unsigned>(__cvta_generic_to_shared(pointer));
}

// 16-byte global->shared copy; reads nothing (and writes zeros) when `valid` is false.
__device__ inline void copy_async_16(void* shared, const void* global, bool valid) {
  const int source_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(shared)), "l"(global), "r"(source_bytes));
}
__device__ inline void commit_async() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ inline void wait_async() { asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending)); }

__device__ inline void load_matrix_x4(unsigned (&fragment)[4], const half* shared) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(fragment[0]), "=r"(fragment[1]), "=r"(fragment[2]), "=r"(fragment[3])
               : "r"(shared_address(shared)));
}

__device__ inline void mma_16x8x16(float (&accumulator)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(accumulator[0]), "+f"(accumulator[1]), "+f"(accumulator[2]), "+f"(accumulator[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Two signed 4-bit weights (nibbles `first` and `first + 1` of `packed`) as scaled halves.
__device__ inline unsigned dequantize_pair(unsigned packed, int first, half2 scale) {
  const int low = static_cast<int>((packed >> (4 * first)) & 15u) - 8;
  const int high = static_cast<int>((packed >> (4 * (first + 1))) & 15u) - 8;
  const half2 values = __hmul2(__halves2half2(__int2half_rn(low), __int2half_rn(high)), scale);
  return *reinterpret_cast<const unsigned*>(&values);
}

// C[m,n] = A[m,k] (fp16, row-major) * dequant(B)[k,n]; B holds 8 nibbles along k per word, laid out [k/8][n];
// scales are [k/kGroupSize][n].
template <int kBlockM, int kBlockN, int kBlockK, int kWarpsM, int kWarpsN, int kStages, int kGroupSize>
__global__ void __launch_bounds__(kWarpsM * kWarpsN * 32)
w4a16_gemm(const half* __restrict__ a, const unsigned* __restrict__ b, const half* __restrict__ scales,
           half* __restrict__ c, int m, int n, int k) {
  static_assert(kBlockM % (kWarpsM * 16) == 0, "each warp's M tile must be a multiple of 16 (mma m16)");
  static_assert(kBlockN % (kWarpsN * 8) == 0, "each warp's N tile must be a multiple of 8 (mma n8)");
  static_assert(kBlockK % 16 == 0 && kGroupSize % kBlockK == 0, "K tile: multiple of 16 dividing the group size");
  static_assert(kStages >= 2, "a pipeline needs at least two stages");
  constexpr int kThreads = kWarpsM * kWarpsN * 32;
  constexpr int kWarpTileM = kBlockM / kWarpsM;
  constexpr int kWarpTileN = kBlockN / kWarpsN;
  constexpr int kMmaM = kWarpTileM / 16;
  constexpr int kMmaN = kWarpTileN / 8;
  constexpr int kAStageHalves = kBlockM * kBlockK;
  constexpr int kBStageWords = kBlockK / 8 * kBlockN;

  extern __shared__ uint4 shared_memory[];
  half* a_stages = reinterpret_cast<half*>(shared_memory);
  unsigned* b_stages = reinterpret_cast<unsigned*>(a_stages + kStages * kAStageHalves);

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int warp_m = warp / kWarpsN;
  const int warp_n = warp % kWarpsN;
  const int block_m = blockIdx.y * kBlockM;
  const int block_n = blockIdx.x * kBlockN;
  const int k_tiles = k / kBlockK;

  auto load_stage = [&](int stage, int k_tile) {
#pragma unroll
    for (int chunk = threadIdx.x; chunk < kAStageHalves / 8; chunk += kThreads) {
      const int row = chunk / (kBlockK / 8);
      const int column = chunk % (kBlockK / 8) * 8;
      const bool valid = block_m + row < m;
      const half* source = a + static_cast<long>(valid ? block_m + row : 0) * k + k_tile * kBlockK + column;
      copy_async_16(a_stages + stage * kAStageHalves + row * kBlockK + column, source, valid);
    }
#pragma unroll
    for (int chunk = threadIdx.x; chunk < kBStageWords / 4; chunk += kThreads) {
      const int row = chunk / (kBlockN / 4);
      const int column = chunk % (kBlockN / 4) * 4;
      const bool valid = block_n + column < n;
      const unsigned* source = b + static_cast<long>(k_tile * (kBlockK / 8) + row) * n + (valid ? block_n + column : 0);
      copy_async_16(b_stages + stage * kBStageWords + row * kBlockN + column, source, valid);
    }
    commit_async();
  };

  float accumulators[kMmaM][kMmaN][4] = {};
#pragma unroll
  for (int stage = 0; stage < kStages - 1; ++stage) {
    if (stage < k_tiles) {
      load_stage(stage, stage);
    } else {
      commit_async();
    }
  }
  for (int k_tile = 0; k_tile < k_tiles; ++k_tile) {
    wait_async<kStages - 2>();
    __syncthreads();
    const int next = k_tile + kStages - 1;
    if (next < k_tiles) {
      load_stage(next % kStages, next);
    } else {
      commit_async();
    }
    const half* a_tile = a_stages + (k_tile % kStages) * kAStageHalves;
    const unsigned* b_tile = b_stages + (k_tile % kStages) * kBStageWords;
    const int group = k_tile * kBlockK / kGroupSize;
#pragma unroll
    for (int kk = 0; kk < kBlockK; kk += 16) {
      unsigned a_fragments[kMmaM][4];
#pragma unroll
      for (int i = 0; i < kMmaM; ++i) {
        const int row = warp_m * kWarpTileM + i * 16 + lane % 16;
        load_matrix_x4(a_fragments[i], a_tile + row * kBlockK + kk + lane / 16 * 8);
      }
#pragma unroll
      for (int j = 0; j < kMmaN; ++j) {
        const int column = warp_n * kWarpTileN + j * 8 + lane / 4;
        const half scale = scales[static_cast<long>(group) * n + block_n + column];
        const half2 scale2 = __halves2half2(scale, scale);
        const unsigned low_rows = b_tile[(kk / 8) * kBlockN + column];
        const unsigned high_rows = b_tile[(kk / 8 + 1) * kBlockN + column];
        const unsigned b_fragment[2] = {dequantize_pair(low_rows, lane % 4 * 2, scale2),
                                        dequantize_pair(high_rows, lane % 4 * 2, scale2)};
#pragma unroll
        for (int i = 0; i < kMmaM; ++i) mma_16x8x16(accumulators[i][j], a_fragments[i], b_fragment);
      }
    }
  }
  wait_async<0>();

#pragma unroll
  for (int i = 0; i < kMmaM; ++i) {
#pragma unroll
    for (int j = 0; j < kMmaN; ++j) {
      const int row = block_m + warp_m * kWarpTileM + i * 16 + lane / 4;
      const int column = block_n + warp_n * kWarpTileN + j * 8 + lane % 4 * 2;
#pragma unroll
      for (int half_index = 0; half_index < 2; ++half_index) {
        const int out_row = row + half_index * 8;
        if (out_row < m && column + 1 < n) {
          *reinterpret_cast<half2*>(c + static_cast<long>(out_row) * n + column) =
              __floats2half2_rn(accumulators[i][j][2 * half_index], accumulators[i][j][2 * half_index + 1]);
        }
      }
    }
  }
}

}  // namespace bench
)cuda";

struct TileConfig {
  int block_m, block_n, block_k, warps_m, warps_n, stages, group_size;
};

// The request the benchmarks compile. Swap in the kernels/ W4A16 instantiation here once it exists.
CompileRequest representative_request(const TileConfig& tile) {
  CompileRequest request;
  request.arch = kArch;
  request.kernel_name = "bench::w4a16_gemm<" + std::to_string(tile.block_m) + ", " + std::to_string(tile.block_n) + ", " +
                        std::to_string(tile.block_k) + ", " + std::to_string(tile.warps_m) + ", " +
                        std::to_string(tile.warps_n) + ", " + std::to_string(tile.stages) + ", " +
                        std::to_string(tile.group_size) + ">";
  request.source = "#include \"bench/w4a16_gemm.cuh\"\n";
  request.extra_headers = {{"bench/w4a16_gemm.cuh", kW4A16Header}};
  return request;
}

// 16 distinct instantiations for the throughput benchmark.
std::vector<CompileRequest> representative_batch() {
  std::vector<CompileRequest> requests;
  for (int block_m : {64, 128}) {
    for (int block_n : {64, 128}) {
      for (int block_k : {32, 64}) {
        for (int stages : {2, 3}) requests.push_back(representative_request({block_m, block_n, block_k, 2, 2, stages, 128}));
      }
    }
  }
  return requests;
}

// A fresh cache directory per use, so that "cold" really starts empty.
class TemporaryDirectory {
 public:
  TemporaryDirectory() {
    std::string pattern = (std::filesystem::temp_directory_path() / "qtune-bench-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) QTUNE_LIBRARY_ERROR("system", "mkdtemp failed for " + pattern);
    path_ = pattern;
  }
  ~TemporaryDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

Compiler compiler_with_cache(const std::filesystem::path& directory, std::size_t threads = 0) {
  CompilerSettings settings;
  settings.cache_directory = directory;
  settings.threads = threads;
  return Compiler(settings);
}

const TileConfig kRepresentativeTile{128, 128, 64, 2, 2, 3, 128};

void BM_CompileCold(benchmark::State& state) {
  const CompileRequest request = representative_request(kRepresentativeTile);
  int registers = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto directory = std::make_unique<TemporaryDirectory>();
    const Compiler compiler = compiler_with_cache(directory->path());
    state.ResumeTiming();
    const CompiledKernel kernel = compiler.compile(request);
    state.PauseTiming();
    if (kernel.from_cache) state.SkipWithError("a cold compile was answered from the cache");
    registers = kernel.resources.registers;
    directory.reset();
    state.ResumeTiming();
  }
  state.counters["registers"] = registers;
}
BENCHMARK(BM_CompileCold)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(5);

// The kernels/ mma family's default W4A16 instantiation for a decode-sized problem.
CompileRequest family_w4a16_request() {
  const KernelFamily& family = find_family("mma");
  Problem problem;
  problem.format = FormatSpec::parse("w4a16-int4-g128");
  problem.m = 16;
  problem.n = 8192;
  problem.k = 8192;
  const KernelConfig config = family.default_config(problem, ArchLimits::for_sm(90));
  CompileRequest request;
  request.arch = kArch;
  request.kernel_name = family.kernel_name(config, problem.format);
  request.source = family.instantiation_source(config, problem.format, kArch);
  return request;
}

void BM_CompileColdFamilyW4A16(benchmark::State& state) {
  CompileRequest request;
  try {
    request = family_w4a16_request();
  } catch (const std::exception& error) {
    state.SkipWithError((std::string("no W4A16 instantiation from kernels/: ") + error.what()).c_str());
    return;
  }
  int registers = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto directory = std::make_unique<TemporaryDirectory>();
    const Compiler compiler = compiler_with_cache(directory->path());
    state.ResumeTiming();
    try {
      registers = compiler.compile(request).resources.registers;
    } catch (const std::exception& error) {
      state.SkipWithError(error.what());
      break;
    }
    state.PauseTiming();
    directory.reset();
    state.ResumeTiming();
  }
  state.counters["registers"] = registers;
}
BENCHMARK(BM_CompileColdFamilyW4A16)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(5);

// Loads `request` from a warm cache each iteration: hash the sources, read the cubin and its resource report.
void measure_cached_load(benchmark::State& state, const CompileRequest& request) {
  TemporaryDirectory directory;
  const Compiler compiler = compiler_with_cache(directory.path());
  const std::size_t cubin_bytes = compiler.compile(request).cubin.size();
  for (auto _ : state) {
    const CompiledKernel kernel = compiler.compile(request);
    if (!kernel.from_cache) state.SkipWithError("the second compile missed the cache");
    benchmark::DoNotOptimize(kernel.cubin.data());
  }
  state.counters["cubin_bytes"] = static_cast<double>(cubin_bytes);
}

void BM_CompileCached(benchmark::State& state) { measure_cached_load(state, representative_request(kRepresentativeTile)); }
BENCHMARK(BM_CompileCached)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The issue-3 target: a cached load of the family's W4A16 kernel.
void BM_CompileCachedFamilyW4A16(benchmark::State& state) {
  try {
    measure_cached_load(state, family_w4a16_request());
  } catch (const std::exception& error) {
    state.SkipWithError((std::string("no W4A16 instantiation from kernels/: ") + error.what()).c_str());
  }
}
BENCHMARK(BM_CompileCachedFamilyW4A16)->Unit(benchmark::kMicrosecond)->UseRealTime();

// compile_all of 16 instantiations on state.range(0) threads, from an empty cache each iteration.
void BM_CompileAllThroughput(benchmark::State& state) {
  const std::vector<CompileRequest> requests = representative_batch();
  const auto threads = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    state.PauseTiming();
    auto directory = std::make_unique<TemporaryDirectory>();
    const Compiler compiler = compiler_with_cache(directory->path(), threads);
    state.ResumeTiming();
    const std::vector<CompileOutcome> outcomes = compiler.compile_all(requests);
    state.PauseTiming();
    for (const CompileOutcome& outcome : outcomes) {
      if (!outcome.ok()) state.SkipWithError(outcome.error_message.c_str());
    }
    directory.reset();
    state.ResumeTiming();
  }
  state.counters["kernels_per_second"] =
      benchmark::Counter(static_cast<double>(requests.size()) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_CompileAllThroughput)
    ->Arg(1)
    ->Arg(2)
    ->Arg(4)
    ->Arg(8)
    ->Arg(16)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(1);

}  // namespace
}  // namespace qtune::jit
