#include "tuner/baselines/cublaslt_baseline.hpp"

#include <cublasLt.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "kernels/error.hpp"
#include "tuner/baselines/lt_layout.hpp"
#include "tuner/baselines/operands.hpp"
#include "tuner/baselines/verify.hpp"
#include "tuner/runtime/device.hpp"
#include "tuner/runtime/memory.hpp"

namespace qtune::baselines {

namespace {

std::string status_text(cublasStatus_t status) {
  return std::string(cublasLtGetStatusName(status)) + " (" + cublasLtGetStatusString(status) + ")";
}

void check_lt(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw LibraryError("cuBLASLt", std::string(call) + " failed: " + status_text(status), file, line);
  }
}

#define QTUNE_LT_CHECK(call) check_lt((call), #call, __FILE__, __LINE__)

// Owners of the cuBLASLt objects; destruction failures are ignored (nothing can be done about them).
struct LtHandleDeleter {
  void operator()(cublasLtContext* handle) const { cublasLtDestroy(handle); }
};
struct LtDescDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* desc) const { cublasLtMatmulDescDestroy(desc); }
};
struct LtLayoutDeleter {
  void operator()(cublasLtMatrixLayoutOpaque_t* layout) const { cublasLtMatrixLayoutDestroy(layout); }
};
struct LtPreferenceDeleter {
  void operator()(cublasLtMatmulPreferenceOpaque_t* preference) const { cublasLtMatmulPreferenceDestroy(preference); }
};
using LtHandle = std::unique_ptr<cublasLtContext, LtHandleDeleter>;
using LtDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, LtDescDeleter>;
using LtLayout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LtLayoutDeleter>;
using LtPreference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, LtPreferenceDeleter>;

LtLayout make_layout(const LtMatrix& matrix) {
  cublasLtMatrixLayout_t layout = nullptr;
  QTUNE_LT_CHECK(cublasLtMatrixLayoutCreate(&layout, matrix.type, matrix.rows, matrix.cols, matrix.ld));
  return LtLayout(layout);
}

template <typename T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const T& value, const char* name) {
  const cublasStatus_t status = cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value));
  if (status != CUBLAS_STATUS_SUCCESS) {
    QTUNE_LIBRARY_ERROR("cuBLASLt",
                        std::string("cublasLtMatmulDescSetAttribute(") + name + ") failed: " + status_text(status));
  }
}

template <typename T>
T algo_config(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attribute, const char* name) {
  T value{};
  size_t written = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, &value, sizeof(value), &written);
  if (status != CUBLAS_STATUS_SUCCESS) {
    QTUNE_LIBRARY_ERROR(
        "cuBLASLt", std::string("cublasLtMatmulAlgoConfigGetAttribute(") + name + ") failed: " + status_text(status));
  }
  return value;
}

AlgoInfo describe_algo(const cublasLtMatmulHeuristicResult_t& result, int index) {
  AlgoInfo info;
  info.heuristic_index = index;
  info.algo_id = algo_config<int32_t>(result.algo, CUBLASLT_ALGO_CONFIG_ID, "ID");
  info.tile_id = static_cast<int>(algo_config<uint32_t>(result.algo, CUBLASLT_ALGO_CONFIG_TILE_ID, "TILE_ID"));
  info.stages_id = static_cast<int>(algo_config<uint32_t>(result.algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, "STAGES_ID"));
  info.splitk = algo_config<int32_t>(result.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, "SPLITK_NUM");
  info.reduction_scheme =
      static_cast<int>(algo_config<uint32_t>(result.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, "REDUCTION_SCHEME"));
  info.cta_swizzling =
      static_cast<int>(algo_config<uint32_t>(result.algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, "CTA_SWIZZLING"));
  info.custom_option =
      static_cast<int>(algo_config<uint32_t>(result.algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, "CUSTOM_OPTION"));
  info.inner_shape_id =
      static_cast<int>(algo_config<uint16_t>(result.algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, "INNER_SHAPE_ID"));
  info.cluster_shape_id =
      static_cast<int>(algo_config<uint16_t>(result.algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, "CLUSTER_SHAPE_ID"));
  info.workspace_bytes = result.workspaceSize;
  info.waves_count = result.wavesCount;
  return info;
}

// DeviceBuffer of zero bytes holds no allocation; empty host vectors need no copy.
template <typename T>
void upload(runtime::DeviceBuffer& buffer, const std::vector<T>& host) {
  if (!host.empty()) buffer.upload(host);
}

void* device_pointer(const runtime::DeviceBuffer& buffer) { return buffer.as<void>(); }

bool is_fp8(BaselineKind kind) {
  return kind == BaselineKind::Fp8Tensor || kind == BaselineKind::Fp8Outer || kind == BaselineKind::Fp8Block128;
}

}  // namespace

std::string AlgoInfo::describe() const {
  std::ostringstream text;
  text << "h" << heuristic_index << " algo=" << algo_id << " tile=" << tile_name(tile_id)
       << " stages=" << stages_name(stages_id) << " splitK=" << splitk;
  if (splitk > 1) text << " reduction=" << reduction_scheme;
  text << " swizzle=" << cta_swizzling;
  if (custom_option != 0) text << " custom=" << custom_option;
  if (cluster_shape_id != 0) text << " cluster=" << cluster_shape_id;
  text << " ws=" << workspace_bytes;
  return text.str();
}

std::string AlgoInfo::to_json() const {
  const nlohmann::json json = {
      {"heuristic_index", heuristic_index},
      {"algo_id", algo_id},
      {"tile_id", tile_id},
      {"tile", tile_name(tile_id)},
      {"stages_id", stages_id},
      {"stages", stages_name(stages_id)},
      {"splitk", splitk},
      {"reduction_scheme", reduction_scheme},
      {"cta_swizzling", cta_swizzling},
      {"custom_option", custom_option},
      {"inner_shape_id", inner_shape_id},
      {"cluster_shape_id", cluster_shape_id},
      {"workspace_bytes", workspace_bytes},
      {"waves_count", waves_count},
  };
  return json.dump();
}

bool same_algorithm(const AlgoInfo& a, const AlgoInfo& b) {
  return a.algo_id == b.algo_id && a.tile_id == b.tile_id && a.stages_id == b.stages_id && a.splitk == b.splitk &&
         a.reduction_scheme == b.reduction_scheme && a.cta_swizzling == b.cta_swizzling &&
         a.custom_option == b.custom_option && a.inner_shape_id == b.inner_shape_id &&
         a.cluster_shape_id == b.cluster_shape_id;
}

std::optional<size_t> find_algorithm(const std::vector<AlgoInfo>& algorithms, const AlgoInfo& wanted) {
  for (size_t i = 0; i < algorithms.size(); ++i) {
    if (same_algorithm(algorithms[i], wanted)) return i;
  }
  return std::nullopt;
}

AlgoInfo algo_info_from_json(std::string_view json_text) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& error) {
    QTUNE_INPUT_ERROR(std::string("algorithm: not JSON: ") + error.what());
  }
  if (!json.is_object()) QTUNE_INPUT_ERROR("algorithm: expected a JSON object, got " + json.dump());
  const auto required_int = [&](const char* name) {
    if (!json.contains(name)) QTUNE_INPUT_ERROR(std::string("algorithm.") + name + ": missing");
    const nlohmann::json& value = json.at(name);
    if (!value.is_number_integer()) {
      QTUNE_INPUT_ERROR(std::string("algorithm.") + name + ": not an integer: " + value.dump());
    }
    return value.get<int>();
  };
  AlgoInfo info;
  info.algo_id = required_int("algo_id");
  info.tile_id = required_int("tile_id");
  info.stages_id = required_int("stages_id");
  info.splitk = required_int("splitk");
  info.reduction_scheme = required_int("reduction_scheme");
  info.cta_swizzling = required_int("cta_swizzling");
  info.custom_option = required_int("custom_option");
  info.inner_shape_id = required_int("inner_shape_id");
  info.cluster_shape_id = required_int("cluster_shape_id");
  // Descriptive fields of the listing it came from: kept when present.
  try {
    info.heuristic_index = json.value("heuristic_index", 0);
    info.workspace_bytes = json.value("workspace_bytes", size_t{0});
    info.waves_count = json.value("waves_count", 0.0f);
  } catch (const nlohmann::json::exception& error) {
    QTUNE_INPUT_ERROR(std::string("algorithm: ") + error.what());
  }
  return info;
}

struct CublasLtBaseline::State {
  bool prepared = false;
  bool supported = false;
  std::string unsupported_reason;
  std::string notes;
  int sm = 0;
  GemmProblem problem;
  int64_t executed_m = 0;
  HostOperands operands;  // the uploaded operands' reference part (the operand vectors are released after upload)

  LtHandle handle;
  LtDesc desc;
  LtLayout a_layout, b_layout, c_layout, d_layout;
  runtime::DeviceBuffer weight, activation, output, workspace, weight_scales, activation_scales;
  float alpha_f32 = 1.0F;
  float beta_f32 = 0.0F;
  int32_t alpha_i32 = 1;
  int32_t beta_i32 = 0;

  std::vector<cublasLtMatmulHeuristicResult_t> heuristics;
  std::vector<AlgoInfo> algorithms;
  int selected = 0;
};

CublasLtBaseline::CublasLtBaseline(BaselineKind kind, BaselineOptions options)
    : kind_(kind), options_(options), state_(std::make_unique<State>()) {
  if (options_.top_k < 1) QTUNE_INPUT_ERROR("top-k: must be at least 1, got " + std::to_string(options_.top_k));
}

CublasLtBaseline::~CublasLtBaseline() = default;

const std::string& CublasLtBaseline::id() const { return baseline_id(kind_); }
bool CublasLtBaseline::prepared() const { return state_->prepared; }
bool CublasLtBaseline::supported() const { return state_->supported; }
const std::string& CublasLtBaseline::unsupported_reason() const { return state_->unsupported_reason; }
const GemmProblem& CublasLtBaseline::problem() const { return state_->problem; }
int64_t CublasLtBaseline::executed_m() const { return state_->executed_m; }
const std::string& CublasLtBaseline::notes() const { return state_->notes; }
int CublasLtBaseline::device_sm() const { return state_->sm; }
const std::vector<AlgoInfo>& CublasLtBaseline::algorithms() const { return state_->algorithms; }
int CublasLtBaseline::selected_algorithm() const { return state_->selected; }

bool CublasLtBaseline::prepare(const GemmProblem& problem, uint64_t seed) {
  return prepare_operands(problem, std::nullopt, [&](State& s, int64_t m) {
    OperandOptions operand_options;
    operand_options.fp8_output = options_.fp8_output;
    operand_options.max_verify_rows = options_.max_verify_rows;
    HostOperands operands = make_host_operands(kind_, problem, m, seed, operand_options);
    s.weight = runtime::DeviceBuffer(operands.weight.size());
    upload(s.weight, operands.weight);
    s.activation = runtime::DeviceBuffer(operands.activation.size());
    upload(s.activation, operands.activation);
    s.weight_scales = runtime::DeviceBuffer(operands.weight_scales.size() * sizeof(float));
    upload(s.weight_scales, operands.weight_scales);
    s.activation_scales = runtime::DeviceBuffer(operands.activation_scales.size() * sizeof(float));
    upload(s.activation_scales, operands.activation_scales);
    // The reference, scales and tolerance stay; the operand bytes live on the GPU now.
    operands.weight = {};
    operands.activation = {};
    s.operands = std::move(operands);
  });
}

bool CublasLtBaseline::prepare_copy_of(const CublasLtBaseline& source) {
  const State& from = *source.state_;
  if (source.kind_ != kind_ || !from.supported) {
    QTUNE_THROW(Error, id() + ": prepare_copy_of needs a successfully prepared " + id() + ", got " + source.id());
  }
  const auto copied = [](const runtime::DeviceBuffer& buffer) {
    runtime::DeviceBuffer copy(buffer.bytes());
    if (buffer.bytes() > 0) copy.copy_from(buffer, buffer.bytes());
    return copy;
  };
  return prepare_operands(from.problem, from.executed_m, [&](State& s, int64_t) {
    s.weight = copied(from.weight);
    s.activation = copied(from.activation);
    s.weight_scales = copied(from.weight_scales);
    s.activation_scales = copied(from.activation_scales);
    s.operands = from.operands;
  });
}

bool CublasLtBaseline::prepare_operands(const GemmProblem& problem, std::optional<int64_t> executed_m,
                                        const std::function<void(State&, int64_t)>& place_operands) {
  validate_problem(problem);
  state_ = std::make_unique<State>();
  State& s = *state_;
  s.problem = problem;
  s.prepared = true;
  const auto unsupported = [&](std::string reason) {
    s.supported = false;
    s.unsupported_reason = std::move(reason);
    return false;
  };
  // Shape rules first: they need no GPU.
  if (const auto reason = shape_unsupported_reason(kind_, problem)) return unsupported(*reason);
  if (const auto format = baseline_format(kind_)) {
    // qtune's quantizer produces the operands, so the shape must suit the format (e.g. whole 128x128 blocks).
    try {
      format->validate_shape(problem.n, problem.k);
    } catch (const InputError& error) {
      return unsupported(std::string("the operands' format ") + format->to_string() +
                         " cannot describe this shape: " + error.what());
    }
  }

  // Device::get makes the primary context current; the CUDA runtime inside cuBLASLt uses the same one.
  s.sm = runtime::Device::get(options_.device).info().compute_capability();
  if (is_fp8(kind_) && s.sm < 89) {
    return unsupported("fp8 tensor cores need sm_89 or newer; this GPU is sm_" + std::to_string(s.sm));
  }
  if (kind_ == BaselineKind::Int8 && s.sm < 75) {
    return unsupported("int8 IMMA through cuBLASLt needs sm_75 or newer; this GPU is sm_" + std::to_string(s.sm));
  }
  // The M values to try: the problem's own (padded where the docs require it), then M padded to a multiple of 4 if
  // cuBLASLt lists no algorithm for the exact M (alignment rules the docs do not state for every mode and type).
  std::vector<int64_t> candidates{baselines::executed_m(kind_, problem.m)};
  if (candidates.front() % 4 != 0) candidates.push_back(round_up(problem.m, 4));
  if (executed_m) candidates = {*executed_m};

  QTUNE_LT_CHECK([&] {
    cublasLtHandle_t handle = nullptr;
    const cublasStatus_t status = cublasLtCreate(&handle);
    s.handle.reset(handle);
    return status;
  }());

  const LtTypes types = lt_types(kind_, options_.fp8_output);
  const LtScaleModes modes = lt_scale_modes(kind_);
  std::string rejections;
  for (const int64_t m : candidates) {
    s.executed_m = m;
    place_operands(s, m);
    s.output = runtime::DeviceBuffer(static_cast<size_t>(m * problem.n) * s.operands.output_element_bytes());
    s.workspace = runtime::DeviceBuffer(options_.workspace_bytes);

    cublasLtMatmulDesc_t desc = nullptr;
    QTUNE_LT_CHECK(cublasLtMatmulDescCreate(&desc, types.compute, types.scale));
    s.desc.reset(desc);
    const LtGemmLayout layout = lt_gemm_layout({m, problem.n, problem.k}, types);
    const auto trans_a = static_cast<int32_t>(layout.trans_a);
    const auto trans_b = static_cast<int32_t>(layout.trans_b);
    set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSA, trans_a, "TRANSA");
    set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSB, trans_b, "TRANSB");
    if (modes.sets_scale_modes) {
      set_desc(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, static_cast<int32_t>(modes.weight), "A_SCALE_MODE");
      set_desc(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, static_cast<int32_t>(modes.activation), "B_SCALE_MODE");
    }
    if (modes.uses_scale_pointers) {
      const void* weight_scale_pointer = device_pointer(s.weight_scales);
      const void* activation_scale_pointer = device_pointer(s.activation_scales);
      set_desc(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, weight_scale_pointer, "A_SCALE_POINTER");
      set_desc(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, activation_scale_pointer, "B_SCALE_POINTER");
    }
    s.a_layout = make_layout(layout.a);
    s.b_layout = make_layout(layout.b);
    s.c_layout = make_layout(layout.c);
    s.d_layout = make_layout(layout.d);

    cublasLtMatmulPreference_t preference_raw = nullptr;
    QTUNE_LT_CHECK(cublasLtMatmulPreferenceCreate(&preference_raw));
    const LtPreference preference(preference_raw);
    const uint64_t workspace_limit = options_.workspace_bytes;
    QTUNE_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(preference.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                        &workspace_limit, sizeof(workspace_limit)));

    std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(options_.top_k));
    int returned = 0;
    const cublasStatus_t status =
        cublasLtMatmulAlgoGetHeuristic(s.handle.get(), desc, s.a_layout.get(), s.b_layout.get(), s.c_layout.get(),
                                       s.d_layout.get(), preference.get(), options_.top_k, results.data(), &returned);
    const std::string described = "A=W " + data_type_name(layout.a.type) + " " + std::to_string(layout.a.rows) + "x" +
                                  std::to_string(layout.a.cols) + " opT, B=A " + std::to_string(layout.b.rows) + "x" +
                                  std::to_string(layout.b.cols) + " opN, D " + data_type_name(layout.d.type) + " " +
                                  std::to_string(layout.d.rows) + "x" + std::to_string(layout.d.cols) +
                                  (modes.sets_scale_modes ? ", scale modes A=" + scale_mode_name(modes.weight) +
                                                                " B=" + scale_mode_name(modes.activation)
                                                          : std::string()) +
                                  ", sm_" + std::to_string(s.sm);
    if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE) {
      rejections += (rejections.empty() ? "" : "; ") + std::string("M=") + std::to_string(m) +
                    ": cublasLtMatmulAlgoGetHeuristic returned " + status_text(status) + " for " + described;
      continue;
    }
    check_lt(status, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
    s.heuristics.clear();
    s.algorithms.clear();
    for (int i = 0; i < returned; ++i) {
      if (results[static_cast<size_t>(i)].state != CUBLAS_STATUS_SUCCESS) continue;
      s.algorithms.push_back(describe_algo(results[static_cast<size_t>(i)], static_cast<int>(s.heuristics.size())));
      s.heuristics.push_back(results[static_cast<size_t>(i)]);
    }
    if (s.heuristics.empty()) {
      rejections += (rejections.empty() ? "" : "; ") + std::string("M=") + std::to_string(m) +
                    ": cuBLASLt's heuristic listed no algorithm for " + described;
      continue;
    }
    if (m != problem.m) {
      s.notes = "M padded from " + std::to_string(problem.m) + " to " + std::to_string(m) +
                (kind_ == BaselineKind::Fp8Block128
                     ? " (cuBLAS requires M and N multiples of 4 with 128x128/1x128 block scaling)"
                     : " (cuBLASLt listed no algorithm for the exact M)");
    }
    s.supported = true;
    s.selected = 0;
    return true;
  }
  return unsupported(rejections + " (set CUBLASLT_LOG_LEVEL=5 to see cuBLASLt's own reasons)");
}

const HostOperands& CublasLtBaseline::host_operands() const { return state_->operands; }

void CublasLtBaseline::replace_scales(const std::vector<float>& weight_scales,
                                      const std::vector<float>& activation_scales) {
  State& s = *state_;
  if (!s.supported) QTUNE_THROW(Error, id() + ": replace_scales before a successful prepare()");
  if (!lt_scale_modes(kind_).uses_scale_pointers) QTUNE_THROW(Error, id() + " takes no scales");
  s.weight_scales = runtime::DeviceBuffer(weight_scales.size() * sizeof(float));
  upload(s.weight_scales, weight_scales);
  s.activation_scales = runtime::DeviceBuffer(activation_scales.size() * sizeof(float));
  upload(s.activation_scales, activation_scales);
  const void* weight_scale_pointer = device_pointer(s.weight_scales);
  const void* activation_scale_pointer = device_pointer(s.activation_scales);
  set_desc(s.desc.get(), CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, weight_scale_pointer, "A_SCALE_POINTER");
  set_desc(s.desc.get(), CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, activation_scale_pointer, "B_SCALE_POINTER");
}

void CublasLtBaseline::select_algorithm(int heuristic_index) {
  if (!state_->supported) QTUNE_THROW(Error, id() + ": select_algorithm before a successful prepare()");
  if (heuristic_index < 0 || heuristic_index >= static_cast<int>(state_->heuristics.size())) {
    QTUNE_INPUT_ERROR("algorithm: index " + std::to_string(heuristic_index) + " outside the heuristic list of " +
                      std::to_string(state_->heuristics.size()));
  }
  state_->selected = heuristic_index;
}

void CublasLtBaseline::launch(CUstream stream) {
  State& s = *state_;
  if (!s.supported) QTUNE_THROW(Error, id() + ": launch before a successful prepare()");
  const void* alpha = kind_ == BaselineKind::Int8 ? static_cast<const void*>(&s.alpha_i32) : &s.alpha_f32;
  const void* beta = kind_ == BaselineKind::Int8 ? static_cast<const void*>(&s.beta_i32) : &s.beta_f32;
  const auto& heuristic = s.heuristics[static_cast<size_t>(s.selected)];
  QTUNE_LT_CHECK(cublasLtMatmul(s.handle.get(), s.desc.get(), alpha, device_pointer(s.weight), s.a_layout.get(),
                                device_pointer(s.activation), s.b_layout.get(), beta, device_pointer(s.output),
                                s.c_layout.get(), device_pointer(s.output), s.d_layout.get(), &heuristic.algo,
                                device_pointer(s.workspace), s.workspace.bytes(), stream));
}

VerifyResult CublasLtBaseline::verify() {
  poison_output();
  launch(nullptr);  // the legacy default stream; check_output's synchronize surfaces any fault
  return check_output();
}

void CublasLtBaseline::poison_output() {
  State& s = *state_;
  if (!s.supported) QTUNE_THROW(Error, id() + ": verify before a successful prepare()");
  s.output.fill_bytes(output_poison_byte(kind_));
  runtime::Device::get(options_.device).synchronize();
}

VerifyResult CublasLtBaseline::check_output() {
  State& s = *state_;
  if (!s.supported) QTUNE_THROW(Error, id() + ": verify before a successful prepare()");
  runtime::Device::get(options_.device).synchronize();
  std::vector<uint8_t> output = s.output.download<uint8_t>(s.output.bytes());
  VerifyResult result = compare_with_reference(s.operands, output, options_.fp8_output);
  result.message = id() + " " + s.algorithms[static_cast<size_t>(s.selected)].describe() + ": " + result.message;
  return result;
}

}  // namespace qtune::baselines
