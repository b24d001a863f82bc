#include "tuner/peers/peer_abi.h"

#include <Eigen/Core>

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/codec.hpp"
#include "kernels/error.hpp"
#include "kernels/moe.hpp"
#include "kernels/moe_reference.hpp"
#include "kernels/parallel.hpp"
#include "kernels/quantize.hpp"
#include "kernels/reference.hpp"
#include "tuner/gemm/gemm_runner.hpp"
#include "tuner/measure/measure.hpp"
#include "tuner/runtime/device.hpp"
#include "tuner/runtime/driver.hpp"

namespace {

using qtune::FormatSpec;
using qtune::OutputType;

thread_local std::string last_error = "{}";
thread_local std::string returned_text;

// The protocol's name of the error in flight (tuner/measure/worker.hpp's error_type), with its library if any.
nlohmann::json error_in_flight() {
  nlohmann::json error;
  try {
    throw;
  } catch (const qtune::runtime::DriverError& caught) {
    error = {{"error", caught.what()}, {"error_type", "DriverError"}, {"library", caught.library()}};
  } catch (const qtune::LibraryError& caught) {
    error = {{"error", caught.what()}, {"error_type", "LibraryError"}, {"library", caught.library()}};
  } catch (const qtune::NoGpuError& caught) {
    error = {{"error", caught.what()}, {"error_type", "NoGpuError"}};
  } catch (const qtune::InputError& caught) {
    error = {{"error", caught.what()}, {"error_type", "InputError"}};
  } catch (const qtune::UnsupportedError& caught) {
    error = {{"error", caught.what()}, {"error_type", "UnsupportedError"}};
  } catch (const qtune::Error& caught) {
    error = {{"error", caught.what()}, {"error_type", "Error"}};
  } catch (const std::exception& caught) {
    error = {{"error", caught.what()}, {"error_type", "exception"}};
  } catch (...) {
    error = {{"error", "an exception that is no std::exception"}, {"error_type", "exception"}};
  }
  return error;
}

// Runs `body`, turning an exception into last_error and `failed`.
template <typename Result, typename Body>
Result guarded(Result failed, Body&& body) {
  try {
    last_error = "{}";
    return body();
  } catch (...) {
    last_error = error_in_flight().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return failed;
  }
}

const char* returned(const nlohmann::json& json) {
  returned_text = json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return returned_text.c_str();
}

struct Buffer {
  std::string dtype;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;
  size_t bytes = 0;
};

template <typename T>
Buffer buffer_of(const char* dtype, int64_t rows, int64_t cols, const std::vector<T>& values) {
  return Buffer{dtype, rows, cols, values.data(), values.size() * sizeof(T)};
}

nlohmann::json scale_layout(const qtune::ScaleGrid& grid) {
  return {{"type", qtune::to_string(grid.type)},
          {"rows", grid.rows},
          {"cols", grid.cols},
          {"rows_per_scale", grid.rows_per_scale},
          {"cols_per_scale", grid.cols_per_scale}};
}

template <typename T>
T request_field(const nlohmann::json& request, const char* name) {
  if (!request.contains(name)) QTUNE_INPUT_ERROR(std::string("problem.") + name + ": missing");
  try {
    return request.at(name).get<T>();
  } catch (const nlohmann::json::exception& error) {
    QTUNE_INPUT_ERROR(std::string("problem.") + name + ": " + error.what());
  }
}

// The quantized experts of the last MoE shape (format, N, K, seed): a tune asks for the same experts at every token
// count, and DeepSeek-V3's 256 experts take minutes to quantize. A problem borrows the experts it touches and gives
// them back when destroyed (as the MoE provider's cache does), so they are held once.
struct ExpertCache {
  std::mutex mutex;
  std::string key;
  std::vector<qtune::QuantizedWeights> experts;  // n = 0: not made, or lent to a live problem
};

ExpertCache& expert_cache() {
  static auto* cache = new ExpertCache;  // never destroyed: a problem may be destroyed at exit
  return *cache;
}

std::string experts_key(const qtune::MoeProblem& problem, uint64_t seed) {
  return problem.format.to_string() + "|" + std::to_string(problem.experts) + "|" + std::to_string(problem.n) + "x" +
         std::to_string(problem.k) + "|" + std::to_string(seed);
}

std::string expert_buffer_name(int32_t expert, const char* name) { return "expert" + std::to_string(expert) + "." + name; }

}  // namespace

// One problem's operands, the buffers that expose them, and its reference once computed.
struct qtune_peer_problem {
  std::string operands;
  int64_t m = 0, n = 0, k = 0;
  uint64_t seed = 1;
  std::optional<FormatSpec> format;  // nullopt: a dense f16/bf16 problem
  OutputType output = OutputType::F16;
  double tolerance = 0;
  qtune::gemm::GemmData data;                    // quantized problems
  std::vector<uint16_t> dense_activation_bits;   // dense problems: [M][K]
  std::vector<uint16_t> dense_weight_bits;       // [N][K]
  std::vector<float> activation_values;          // dequantized, made on first request (or for a dense reference)
  std::vector<float> weight_values;
  std::optional<qtune::ReferenceResult> reference;
  std::map<std::string, Buffer> buffers;
  // MoE problems: the problem, its routing, activations and the touched experts' weights (data is unused).
  std::optional<qtune::MoeProblem> moe;
  qtune::MoeOperands moe_operands;
  std::vector<int32_t> touched;                    // the experts the routing touches, ascending
  std::map<int32_t, std::vector<float>> expert_values;  // dequantized on first request

  qtune_peer_problem() = default;
  qtune_peer_problem(const qtune_peer_problem&) = delete;
  qtune_peer_problem& operator=(const qtune_peer_problem&) = delete;
  ~qtune_peer_problem() {
    if (!moe) return;
    // The experts go back to the cache for the next token count of the same shape.
    ExpertCache& cache = expert_cache();
    std::lock_guard lock(cache.mutex);
    if (cache.key != experts_key(*moe, seed) || cache.experts.size() != moe_operands.experts.size()) return;
    for (size_t e = 0; e < cache.experts.size(); ++e) {
      if (moe_operands.experts[e].n != 0 && cache.experts[e].n == 0) {
        cache.experts[e] = std::exchange(moe_operands.experts[e], qtune::QuantizedWeights{});
      }
    }
  }

  const qtune::QuantizedActivations& activations() const { return moe ? moe_operands.activations : data.activations; }

  float decode16(uint16_t bits) const {
    return output == OutputType::F16 ? qtune::f16_bits_to_float(bits) : qtune::bf16_bits_to_float(bits);
  }

  // Makes a lazily dequantized buffer when `name` is one: activation_values, weight_values, expert<e>.weight_values.
  void make_lazy(const std::string& name) {
    if (name == "activation_values" || name == "weight_values") {
      make_values();
      return;
    }
    if (!moe) return;
    for (const int32_t e : touched) {
      const std::string wanted = expert_buffer_name(e, "weight_values");
      if (name != wanted || expert_values.contains(e)) continue;
      const qtune::QuantizedWeights& weights = moe_operands.experts[static_cast<size_t>(e)];
      expert_values[e] = qtune::dequantize(weights);
      buffers[wanted] = buffer_of("float32", weights.n, weights.k, expert_values[e]);
    }
  }

  void make_values() {
    if (!activation_values.empty()) return;
    if (moe) {
      activation_values = qtune::dequantize(moe_operands.activations);
      buffers["activation_values"] = buffer_of("float32", moe_operands.activations.m, k, activation_values);
      return;
    }
    if (format) {
      activation_values = qtune::dequantize(data.activations);
      weight_values = qtune::dequantize(data.weights);
    } else {
      activation_values.resize(dense_activation_bits.size());
      weight_values.resize(dense_weight_bits.size());
      for (size_t i = 0; i < activation_values.size(); ++i) activation_values[i] = decode16(dense_activation_bits[i]);
      for (size_t i = 0; i < weight_values.size(); ++i) weight_values[i] = decode16(dense_weight_bits[i]);
    }
    buffers["activation_values"] = buffer_of("float32", m, k, activation_values);
    buffers["weight_values"] = buffer_of("float32", n, k, weight_values);
  }

  const qtune::ReferenceResult& reference_result() {
    if (reference) return *reference;
    if (moe) {
      // Rows of the projection's output (gate-up: pairs; down: tokens after the weighted top-k sum).
      qtune::MoeReferenceResult moe_reference = qtune::reference_moe(*moe, moe_operands);
      qtune::ReferenceResult result;
      result.m = m;
      result.n = n;
      result.unrounded = std::move(moe_reference.unrounded);
      result.output = std::move(moe_reference.output);
      reference = std::move(result);
      return *reference;
    }
    if (format) {
      reference = qtune::gemm::reference_for(data);
      return *reference;
    }
    // Dense: C = A W^T in f32 from the 16-bit values, row blocks in parallel.
    make_values();
    qtune::ReferenceResult result;
    result.m = m;
    result.n = n;
    result.unrounded.assign(static_cast<size_t>(m * n), 0.0f);
    using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    const Eigen::Map<const Matrix> weights(weight_values.data(), n, k);
    qtune::parallel_for(m, [&](int64_t begin, int64_t end) {
      const Eigen::Map<const Matrix> rows(activation_values.data() + begin * k, end - begin, k);
      Eigen::Map<Matrix> out(result.unrounded.data() + begin * n, end - begin, n);
      out.noalias() = rows * weights.transpose();
    });
    reference = std::move(result);
    return *reference;
  }

  nlohmann::json verify(const std::vector<uint16_t>& output_bits) {
    const qtune::gemm::Verification check =
        qtune::gemm::verify_output(output_bits, output, reference_result(), tolerance);
    return {{"passed", check.passed},           {"relative_error", check.relative_error},
            {"tolerance", check.tolerance},     {"nan_count", check.nan_count},
            {"bad_count", check.bad_count},     {"summary", check.summary()}};
  }
};

namespace {

qtune_peer_problem* make_moe_problem(const nlohmann::json& request);

void add_weight_buffers(std::map<std::string, Buffer>& buffers, const std::string& prefix,
                        const qtune::QuantizedWeights& weights) {
  buffers[prefix + "weight_codes"] = buffer_of("uint8", weights.n, weights.k, weights.codes);
  buffers[prefix + "weight_scale_bits"] = buffer_of("uint32", weights.scales.rows, weights.scales.cols, weights.scales.bits);
  buffers[prefix + "weight_scale_values"] =
      buffer_of("float32", weights.scales.rows, weights.scales.cols, weights.scales.values);
  if (!weights.zero_point_bits.empty()) {
    buffers[prefix + "weight_zero_bits"] =
        buffer_of("uint32", weights.scales.rows, weights.scales.cols, weights.zero_point_bits);
    buffers[prefix + "weight_zero_values"] =
        buffer_of("float32", weights.scales.rows, weights.scales.cols, weights.zero_points);
  }
}

void add_activation_buffers(std::map<std::string, Buffer>& buffers, const FormatSpec& format,
                            const qtune::QuantizedActivations& activations) {
  if (format.activation_is_quantized()) {
    buffers["activation_codes"] = buffer_of("uint8", activations.m, activations.k, activations.codes);
    if (!activations.scales.empty()) {
      buffers["activation_scale_values"] =
          buffer_of("float32", activations.scales.rows, activations.scales.cols, activations.scales.values);
    }
  } else {
    buffers["activation_bits16"] = buffer_of("uint16", activations.m, activations.k, activations.bits16);
  }
}

qtune_peer_problem* make_problem(const nlohmann::json& request) {
  if (request.is_object() && request.contains("moe")) return make_moe_problem(request);
  auto problem = std::make_unique<qtune_peer_problem>();
  problem->operands = request_field<std::string>(request, "operands");
  problem->m = request_field<int64_t>(request, "m");
  problem->n = request_field<int64_t>(request, "n");
  problem->k = request_field<int64_t>(request, "k");
  problem->seed = request.contains("seed") ? request_field<uint64_t>(request, "seed") : 1;
  if (problem->m <= 0 || problem->n <= 0 || problem->k <= 0) QTUNE_INPUT_ERROR("problem: M, N and K must be positive");
  const int64_t m = problem->m, n = problem->n, k = problem->k;
  if (problem->operands == "f16" || problem->operands == "bf16") {
    problem->output = problem->operands == "f16" ? OutputType::F16 : OutputType::BF16;
    problem->tolerance = problem->output == OutputType::F16 ? 5e-3 : 1e-2;
    const auto round16 = [&](const std::vector<float>& values) {
      std::vector<uint16_t> bits(values.size());
      for (size_t i = 0; i < values.size(); ++i) {
        bits[i] = problem->output == OutputType::F16 ? qtune::float_to_f16_bits(values[i])
                                                     : qtune::float_to_bf16_bits(values[i]);
      }
      return bits;
    };
    problem->dense_weight_bits = round16(qtune::random_normal(static_cast<size_t>(n * k), problem->seed, 0.0f, 0.02f));
    problem->dense_activation_bits =
        round16(qtune::random_normal(static_cast<size_t>(m * k), problem->seed + 1, 0.0f, 1.0f));
    problem->buffers["weight_bits16"] = buffer_of("uint16", n, k, problem->dense_weight_bits);
    problem->buffers["activation_bits16"] = buffer_of("uint16", m, k, problem->dense_activation_bits);
    return problem.release();
  }
  problem->format = FormatSpec::parse(problem->operands);
  problem->output = problem->format->output;
  problem->tolerance = qtune::default_tolerance(*problem->format);
  problem->data = qtune::gemm::make_gemm_data(qtune::Problem{*problem->format, m, n, k}, problem->seed);
  add_weight_buffers(problem->buffers, "", problem->data.weights);
  add_activation_buffers(problem->buffers, *problem->format, problem->data.activations);
  return problem.release();
}

// A MoE problem: qtune's MoE operands for (problem, seed), the touched experts only (borrowed from the cache).
qtune_peer_problem* make_moe_problem(const nlohmann::json& request) {
  auto problem = std::make_unique<qtune_peer_problem>();
  try {
    problem->moe = qtune::MoeProblem::from_json(request.at("moe"));
  } catch (const nlohmann::json::exception& error) {
    QTUNE_INPUT_ERROR(std::string("problem.moe: ") + error.what());
  }
  const qtune::MoeProblem& moe = *problem->moe;
  problem->seed = request.contains("seed") ? request_field<uint64_t>(request, "seed") : 1;
  problem->format = moe.format;
  problem->operands = moe.format.to_string();
  problem->output = moe.format.output;
  problem->tolerance = qtune::default_tolerance(moe.format);
  problem->m = moe.output_rows();
  problem->n = moe.n;
  problem->k = moe.k;
  qtune::MoeOperands& operands = problem->moe_operands;
  operands.routing = moe.make_routing();
  operands.activations = qtune::make_moe_activations(moe, problem->seed);
  operands.experts.resize(static_cast<size_t>(moe.experts));
  const std::vector<int64_t> counts = operands.routing.pairs_per_expert();
  for (int32_t e = 0; e < moe.experts; ++e) {
    if (counts[static_cast<size_t>(e)] > 0) problem->touched.push_back(e);
  }
  {
    ExpertCache& cache = expert_cache();
    std::lock_guard lock(cache.mutex);
    const std::string key = experts_key(moe, problem->seed);
    if (cache.key != key || cache.experts.size() != operands.experts.size()) {
      cache.key = key;
      cache.experts.assign(operands.experts.size(), qtune::QuantizedWeights{});
    }
    for (const int32_t e : problem->touched) {
      // exchange, not move: a moved-from QuantizedWeights keeps its n, and the cache would lend that husk next time.
      qtune::QuantizedWeights& cached = cache.experts[static_cast<size_t>(e)];
      if (cached.n != 0) operands.experts[static_cast<size_t>(e)] = std::exchange(cached, qtune::QuantizedWeights{});
    }
  }
  std::vector<int32_t> missing;
  for (const int32_t e : problem->touched) {
    if (operands.experts[static_cast<size_t>(e)].n == 0) missing.push_back(e);
  }
  qtune::parallel_for(static_cast<int64_t>(missing.size()), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int32_t e = missing[static_cast<size_t>(i)];
      operands.experts[static_cast<size_t>(e)] = qtune::make_expert_weights(moe, e, problem->seed);
    }
  });

  auto& buffers = problem->buffers;
  add_activation_buffers(buffers, moe.format, operands.activations);
  buffers["topk_ids"] = buffer_of("int32", moe.tokens, moe.top_k, operands.routing.ids);
  buffers["router_weights"] = buffer_of("float32", moe.tokens, moe.top_k, operands.routing.weights);
  buffers["touched_experts"] = buffer_of("int32", static_cast<int64_t>(problem->touched.size()), 1, problem->touched);
  for (const int32_t e : problem->touched) {
    add_weight_buffers(buffers, "expert" + std::to_string(e) + ".", operands.experts[static_cast<size_t>(e)]);
  }
  return problem.release();
}

nlohmann::json describe(qtune_peer_problem& problem) {
  nlohmann::json buffers = nlohmann::json::object();
  for (const auto& [name, buffer] : problem.buffers) {
    buffers[name] = {{"dtype", buffer.dtype}, {"shape", {buffer.rows, buffer.cols}}, {"bytes", buffer.bytes}};
  }
  nlohmann::json json{{"operands", problem.operands},
                      {"m", problem.m},
                      {"n", problem.n},
                      {"k", problem.k},
                      {"seed", problem.seed},
                      {"format", problem.format ? problem.format->to_json() : nlohmann::json()},
                      {"output_type", qtune::to_string(problem.output)},
                      {"tolerance", problem.tolerance},
                      {"buffers", buffers}};
  json["kind"] = problem.moe ? "moe" : "dense";
  if (problem.moe) {
    const qtune::MoeProblem& moe = *problem.moe;
    json["moe"] = moe.to_json();
    json["experts"] = moe.experts;
    json["top_k"] = moe.top_k;
    json["tokens"] = moe.tokens;
    json["projection"] = std::string(qtune::moe_projection_name(moe.projection));
    json["input_rows"] = moe.input_rows();
    json["experts_touched"] = problem.touched;
    nlohmann::json global_scales = nlohmann::json::array();
    for (const int32_t e : problem.touched) global_scales.push_back(problem.moe_operands.experts[static_cast<size_t>(e)].global_scale);
    json["expert_global_scales"] = std::move(global_scales);
    json["weight_scales"] = scale_layout(problem.moe_operands.experts[static_cast<size_t>(problem.touched.front())].scales);
  } else if (problem.format) {
    json["weight_scales"] = scale_layout(problem.data.weights.scales);
    json["global_scale"] = problem.data.weights.global_scale;
  }
  if (problem.format && !problem.activations().scales.empty()) json["activation_scales"] = scale_layout(problem.activations().scales);
  return json;
}

// The [M][N] output of a buffer whose rows lie `row_stride` elements apart.
std::vector<uint16_t> packed_rows(const uint16_t* strided, const qtune_peer_problem& problem, int64_t row_stride) {
  std::vector<uint16_t> rows(static_cast<size_t>(problem.m * problem.n));
  for (int64_t r = 0; r < problem.m; ++r) {
    std::memcpy(rows.data() + r * problem.n, strided + r * row_stride, static_cast<size_t>(problem.n) * 2);
  }
  return rows;
}

void check_stride(const qtune_peer_problem& problem, int64_t row_stride) {
  if (row_stride < problem.n) QTUNE_INPUT_ERROR("row_stride: " + std::to_string(row_stride) + " < N");
}

}  // namespace

extern "C" {

int qtune_peer_abi_version(void) { return QTUNE_PEER_ABI_VERSION; }

const char* qtune_peer_last_error(void) { return last_error.c_str(); }

qtune_peer_problem* qtune_peer_problem_create(const char* request_json) {
  return guarded<qtune_peer_problem*>(nullptr, [&] {
    if (request_json == nullptr) QTUNE_INPUT_ERROR("problem: no request");
    nlohmann::json request;
    try {
      request = nlohmann::json::parse(request_json);
    } catch (const nlohmann::json::exception& error) {
      QTUNE_INPUT_ERROR(std::string("problem: not JSON: ") + error.what());
    }
    return make_problem(request);
  });
}

void qtune_peer_problem_destroy(qtune_peer_problem* problem) { delete problem; }

const char* qtune_peer_problem_describe(qtune_peer_problem* problem) {
  return guarded<const char*>(nullptr, [&] {
    if (problem == nullptr) QTUNE_INPUT_ERROR("problem: null");
    return returned(describe(*problem));
  });
}

int qtune_peer_problem_buffer(qtune_peer_problem* problem, const char* name, const void** data, size_t* bytes) {
  return guarded(-1, [&] {
    if (problem == nullptr || name == nullptr || data == nullptr || bytes == nullptr) {
      QTUNE_INPUT_ERROR("buffer: null argument");
    }
    const std::string wanted(name);
    problem->make_lazy(wanted);
    const auto found = problem->buffers.find(wanted);
    if (found == problem->buffers.end()) QTUNE_INPUT_ERROR("buffer: this problem has no buffer '" + wanted + "'");
    *data = found->second.data;
    *bytes = found->second.bytes;
    return 0;
  });
}

int qtune_peer_poison_device(uint64_t device_address, size_t bytes, int device) {
  return guarded(-1, [&] {
    qtune::runtime::Device::get(device).make_current();
    QTUNE_CU(cuMemsetD8, static_cast<CUdeviceptr>(device_address), 0xFF, bytes);
    return 0;
  });
}

const char* qtune_peer_verify_device(qtune_peer_problem* problem, uint64_t device_address, int64_t row_stride,
                                     int device) {
  return guarded<const char*>(nullptr, [&] {
    if (problem == nullptr) QTUNE_INPUT_ERROR("problem: null");
    check_stride(*problem, row_stride);
    qtune::runtime::Device& gpu = qtune::runtime::Device::get(device);
    gpu.make_current();
    gpu.synchronize();  // the launch was asynchronous; a fault shows here
    std::vector<uint16_t> strided(static_cast<size_t>((problem->m - 1) * row_stride + problem->n));
    QTUNE_CU(cuMemcpyDtoH, strided.data(), static_cast<CUdeviceptr>(device_address), strided.size() * 2);
    return returned(problem->verify(packed_rows(strided.data(), *problem, row_stride)));
  });
}

const char* qtune_peer_verify_host(qtune_peer_problem* problem, const void* output, int64_t row_stride) {
  return guarded<const char*>(nullptr, [&] {
    if (problem == nullptr || output == nullptr) QTUNE_INPUT_ERROR("verify: null argument");
    check_stride(*problem, row_stride);
    return returned(problem->verify(packed_rows(static_cast<const uint16_t*>(output), *problem, row_stride)));
  });
}

const char* qtune_peer_measure(const char* options_json, qtune_peer_launch launch, void* user_data) {
  return guarded<const char*>(nullptr, [&] {
    if (launch == nullptr) QTUNE_INPUT_ERROR("measure: no launch function");
    nlohmann::json options = nlohmann::json::object();
    if (options_json != nullptr && *options_json != '\0') {
      try {
        options = nlohmann::json::parse(options_json);
      } catch (const nlohmann::json::exception& error) {
        QTUNE_INPUT_ERROR(std::string("measure: not JSON: ") + error.what());
      }
    }
    const qtune::measure::MeasureOptions parsed = qtune::measure::measure_options_from_json(options);
    const qtune::measure::Measurement measurement = qtune::measure::measure(
        [&](CUstream stream) {
          if (launch(user_data, reinterpret_cast<uint64_t>(stream)) != 0) {
            QTUNE_THROW(qtune::Error, "the provider's launch failed (its adapter says why)");
          }
        },
        parsed);
    return returned(nlohmann::json(measurement));
  });
}

const char* qtune_peer_sticky_error(void) {
  return guarded<const char*>(nullptr, [&]() -> const char* {
    const std::optional<std::string> sticky = qtune::runtime::sticky_context_error();
    if (!sticky) return nullptr;
    returned_text = *sticky;
    return returned_text.c_str();
  });
}

const char* qtune_peer_device_info(int device) {
  return guarded<const char*>(nullptr, [&] { return returned(nlohmann::json(qtune::runtime::Device::get(device).info())); });
}

}  // extern "C"
