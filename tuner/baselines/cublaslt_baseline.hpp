#pragma once
// One cuBLASLt baseline GEMM on the GPU: operands prepared and uploaded, descriptors built, the top k algorithms of
// cuBLASLt's heuristic listed, each one verifiable against the CPU reference and launchable on a stream.
// tune() verifies and times every listed algorithm through qtune's measurement harness and keeps the fastest
// verified one selected.
#include <cuda.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/format.hpp"
#include "tuner/baselines/baseline.hpp"
#include "tuner/baselines/operands.hpp"
#include "tuner/baselines/verify.hpp"

namespace qtune::baselines {

struct BaselineOptions {
  int top_k = 8;                              // how many heuristic results to list (and time in tune())
  size_t workspace_bytes = size_t{32} << 20;  // cuBLASLt workspace limit
  int64_t max_verify_rows = 32;               // rows of C compared with the CPU reference (see verification_rows)
  OutputType fp8_output = OutputType::BF16;   // output type of the fp8 baselines
  int device = 0;                             // CUDA device ordinal
};

// One algorithm of the heuristic list, as cublasLtMatmulAlgoConfigGetAttribute describes it.
struct AlgoInfo {
  int heuristic_index = 0;  // position in cuBLASLt's list (0 = its first choice)
  int algo_id = 0;          // CUBLASLT_ALGO_CONFIG_ID
  int tile_id = 0;          // cublasLtMatmulTile_t
  int stages_id = 0;        // cublasLtMatmulStages_t
  int splitk = 1;
  int reduction_scheme = 0;
  int cta_swizzling = 0;
  int custom_option = 0;
  int inner_shape_id = 0;
  int cluster_shape_id = 0;
  size_t workspace_bytes = 0;  // what this algorithm needs
  float waves_count = 0;       // cuBLASLt's device-utilization estimate
  // "h0 algo=66 tile=128x256 stages=64xAUTO splitK=1 swizzle=0 cluster=2 ws=0"
  std::string describe() const;
  // The same fields as a JSON object text (stored with measurements).
  std::string to_json() const;
};

// Whether two AlgoInfo name the same cuBLASLt algorithm: equal in every configuration attribute (algo_id, tile_id,
// stages_id, splitk, reduction_scheme, cta_swizzling, custom_option, inner_shape_id, cluster_shape_id). The list
// position, workspace need and wave estimate describe one listing, not the algorithm, and are ignored.
bool same_algorithm(const AlgoInfo& a, const AlgoInfo& b);
// The position in `algorithms` of the first one that is the same_algorithm as `wanted`; nullopt when none is.
std::optional<size_t> find_algorithm(const std::vector<AlgoInfo>& algorithms, const AlgoInfo& wanted);
// Reads AlgoInfo::to_json() text back (as stored in the database's config params). The identifying fields are
// required; throws InputError naming the field when one is missing or not an integer, or the text is not JSON.
AlgoInfo algo_info_from_json(std::string_view json_text);

class CublasLtBaseline {
 public:
  explicit CublasLtBaseline(BaselineKind kind, BaselineOptions options = {});
  ~CublasLtBaseline();
  CublasLtBaseline(const CublasLtBaseline&) = delete;
  CublasLtBaseline& operator=(const CublasLtBaseline&) = delete;

  BaselineKind kind() const { return kind_; }
  const std::string& id() const;
  const BaselineOptions& options() const { return options_; }

  // Draws random operands (deterministic in `seed`), quantizes them as the baseline needs, uploads them, builds the
  // cuBLASLt descriptors and lists the heuristic's top k algorithms; the first is selected. Returns false, with
  // unsupported_reason(), when cuBLASLt cannot run this problem on this GPU. Throws NoGpuError without a GPU,
  // LibraryError when a CUDA or cuBLASLt call fails, InputError for a bad shape.
  bool prepare(const GemmProblem& problem, uint64_t seed);
  // prepare() with the operands of `source` (a successfully prepared baseline of the same kind and options), copied
  // device to device into new allocations: another placement of the same data, without drawing it again.
  bool prepare_copy_of(const CublasLtBaseline& source);

  bool prepared() const;
  bool supported() const;
  const std::string& unsupported_reason() const;
  const GemmProblem& problem() const;
  int64_t executed_m() const;        // problem().m, or M padded as cuBLASLt requires (see lt_layout.hpp)
  const std::string& notes() const;  // e.g. "M padded from 17 to 20 (...)"; empty when nothing to say
  int device_sm() const;             // compute capability x10 of the device prepare() ran on

  const std::vector<AlgoInfo>& algorithms() const;
  void select_algorithm(int heuristic_index);  // throws InputError for an index outside algorithms()
  int selected_algorithm() const;

  // Runs the selected algorithm once on a poisoned output, copies C back and compares the checked rows with the
  // CPU reference computed from the same quantized operands: poison_output, launch, check_output.
  VerifyResult verify();
  // Fills C with output_poison_byte(kind) and waits for it.
  void poison_output();
  // Waits for the device, copies C back and compares the checked rows with the CPU reference.
  VerifyResult check_output();

  // The host side of the prepared operands: checked rows, reference, tolerance and the f32 scales as uploaded
  // (the operand bytes themselves are released after the upload).
  const HostOperands& host_operands() const;

  // For diagnosis only: uploads other f32 scales (same modes) in place of the prepared ones, e.g. the same values in
  // another layout to learn which one cuBLASLt reads after a failed verification. verify() still compares with the
  // reference of the prepared operands. prepare() again to restore them.
  void replace_scales(const std::vector<float>& weight_scales, const std::vector<float>& activation_scales);

  // Enqueues the selected algorithm on `stream` (no synchronisation, no allocation). CUstream and cudaStream_t are
  // the same type, so runtime streams work too.
  void launch(CUstream stream);

 private:
  struct State;
  // The shared steps of prepare and prepare_copy_of: checks, descriptors and heuristic listing for each executed M
  // tried (`executed_m`, else the problem's own and then padded); place_operands(state, m) fills the operands'
  // buffers and host reference for M = m.
  bool prepare_operands(const GemmProblem& problem, std::optional<int64_t> executed_m,
                        const std::function<void(State&, int64_t)>& place_operands);
  BaselineKind kind_;
  BaselineOptions options_;
  std::unique_ptr<State> state_;
};

}  // namespace qtune::baselines
