// How production code uses libqtune_runtime: load the table `qtune export` wrote (and its precompiled cubins), pack a
// weight matrix once, upload it, then run GEMMs on a CUDA stream.
//
//   qtune_runtime_example [--table table.json] [--cubins DIR] [--format w4a16-int4-ch] [--m 16] [--n 4096] [--k 4096]
//
// Without a GPU it only says what it would run on an H100/H200 (sm_90a).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "tuner/production/qtune_runtime.hpp"

namespace rt = qtune::runtime_api;

namespace {

void check(cudaError_t result, const char* what) {
  if (result != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(result));
}

// A device copy of a host buffer (nullptr for an empty one).
void* upload(const void* host, std::size_t bytes) {
  if (bytes == 0) return nullptr;
  void* device = nullptr;
  check(cudaMalloc(&device, bytes), "cudaMalloc");
  check(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  return device;
}

void print_plan(const rt::KernelPlan& plan) {
  std::printf("config  %s:%s\n  from %s (%s)\nkernel  %s for %s%s%s\n", plan.choice.family.c_str(), plan.choice.config.c_str(),
              std::string(rt::to_string(plan.choice.source)).c_str(), plan.choice.detail.c_str(),
              std::string(rt::to_string(plan.origin)).c_str(), plan.arch.c_str(), plan.cubin.empty() ? "" : ": ",
              plan.cubin.string().c_str());
}

int run(int argc, char** argv) {
  rt::RuntimeOptions options;
  std::string format = "w4a16-int4-ch";
  std::int64_t m = 16, n = 4096, k = 4096;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--table") options.table = value;
    else if (flag == "--cubins") options.cubin_directory = value;
    else if (flag == "--format") format = value;
    else if (flag == "--m") m = std::stoll(value);
    else if (flag == "--n") n = std::stoll(value);
    else if (flag == "--k") k = std::stoll(value);
    else throw qtune::InputError("unknown option " + flag, __FILE__, __LINE__);
  }

  // One Runtime per device and process: it keeps the loaded kernels and the split-K workspaces.
  std::unique_ptr<rt::Runtime> runtime;
  try {
    runtime = std::make_unique<rt::Runtime>(options);
  } catch (const qtune::NoGpuError& error) {
    std::printf("no GPU (%s): planning for sm_90a only\n", error.what());
    options.arch = "sm_90a";
    print_plan(rt::Runtime(options).plan(format, m, n, k));
    return 0;
  }
  print_plan(runtime->plan(format, m, n, k));

  // Once per weight matrix: quantize (or take a checkpoint's codes and scales with prepack()), pack, upload.
  std::mt19937 random(42);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> weights(static_cast<std::size_t>(n * k));
  for (float& value : weights) value = normal(random);
  const rt::PackedWeights packed = runtime->quantize_and_prepack(format, n, k, weights);
  void* device_weights = upload(packed.weights.data(), packed.weights.size());
  void* device_scales = upload(packed.scales.data(), packed.scales.size());
  void* device_zeros = upload(packed.zeros.data(), packed.zeros.size());
  void* device_global_scale = upload(packed.global_scale.data(), packed.global_scale.size());

  // Per call: activations in, output out, on the caller's stream. Here they are quantized on the host in the format's
  // activation type (f16 for weight-only formats; codes and per-token scales for W4A8/W8A8); a model does it on the GPU.
  std::vector<float> activations(static_cast<std::size_t>(m * k));
  std::normal_distribution<float> unit(0.0f, 1.0f);
  for (float& value : activations) value = unit(random);
  const rt::PackedActivations packed_a = runtime->quantize_activations(format, m, n, k, activations);
  void* device_a = upload(packed_a.a.data(), packed_a.a.size());
  void* device_a_scales = upload(packed_a.a_scales.data(), packed_a.a_scales.size());
  void* device_c = nullptr;
  check(cudaMalloc(&device_c, static_cast<std::size_t>(m * n) * sizeof(__half)), "cudaMalloc");
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");

  rt::GemmArguments arguments;
  arguments.a = device_a;
  arguments.a_scales = device_a_scales;
  arguments.weights = device_weights;
  arguments.scales = device_scales;
  arguments.zeros = device_zeros;
  arguments.global_scale = device_global_scale;
  arguments.c = device_c;
  runtime->gemm(format, m, n, k, arguments, stream);
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");

  std::vector<__half> output(static_cast<std::size_t>(m * n));
  check(cudaMemcpy(output.data(), device_c, output.size() * sizeof(__half), cudaMemcpyDeviceToHost), "cudaMemcpy");
  double sum = 0;
  for (const __half& value : output) sum += static_cast<double>(__half2float(value));
  std::printf("C[0][0..3] = %.4f %.4f %.4f %.4f, sum %.4f; %zu kernel(s) loaded\n", static_cast<double>(__half2float(output[0])),
              static_cast<double>(__half2float(output[1])), static_cast<double>(__half2float(output[2])),
              static_cast<double>(__half2float(output[3])), sum, runtime->loaded_kernel_count());

  check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  for (void* pointer : {device_weights, device_scales, device_zeros, device_global_scale, device_a, device_a_scales, device_c}) {
    if (pointer != nullptr) check(cudaFree(pointer), "cudaFree");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const qtune::InputError& error) {
    std::fprintf(stderr, "error: %s\n", error.what());
    return 2;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "error: %s\n", error.what());
    return 1;
  }
}
