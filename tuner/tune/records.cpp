#include "tuner/tune/records.hpp"

#include <unistd.h>

#include <cmath>

#include "tuner/runtime/build_info.hpp"

#ifndef QTUNE_VERSION
#define QTUNE_VERSION "unknown"
#endif

namespace qtune::tune {

db::RunInfo run_info_of_this_build(std::string kind) {
  db::RunInfo info;
  info.kind = std::move(kind);
  info.tool_version = QTUNE_VERSION;
  info.git_sha = build_git_sha();
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) info.host = host;
  return info;
}

db::KernelConfig config_record(const KernelConfig& config, const std::string& source_hash) {
  db::KernelConfig record;
  record.kind = db::ConfigKind::Kernel;
  record.family = config.family;
  record.params_json = config.to_json().at("params").dump();
  record.source_hash = source_hash;
  return record;
}

InstantiationResult instantiation_result(const jit::CompiledKernel& kernel) {
  InstantiationResult result;
  result.ok = true;
  result.cache_key = kernel.cache_key;
  result.cache_hit = kernel.from_cache;
  result.compile_seconds = kernel.compile_seconds;
  result.spill_store_bytes = kernel.resources.spill_store_bytes;
  result.spill_load_bytes = kernel.resources.spill_load_bytes;
  result.resources.registers = kernel.resources.registers;
  result.resources.spill_bytes = kernel.resources.spill_store_bytes + kernel.resources.spill_load_bytes;
  result.resources.static_shared_bytes = kernel.resources.static_shared_bytes;
  result.resources.stack_frame_bytes = kernel.resources.stack_frame_bytes;
  return result;
}

db::CompileResult compile_record(db::RunId run, db::ConfigId config, const Instantiation& instantiation,
                                 const InstantiationResult& result) {
  db::CompileResult row;
  row.run = run;
  row.config = config;
  row.format = instantiation.format.to_string();
  row.arch = instantiation.arch;
  row.cache_key = result.cache_key;
  row.cache_hit = result.cache_hit;
  if (!result.ok) {
    row.status = db::CompileStatus::Failed;
    row.message = result.message;
    return row;
  }
  if (!result.cache_hit) row.compile_seconds = result.compile_seconds;
  row.registers = result.resources.registers;
  row.spill_store_bytes = result.spill_store_bytes;
  row.spill_load_bytes = result.spill_load_bytes;
  row.shared_bytes = result.resources.static_shared_bytes;
  row.stack_bytes = result.resources.stack_frame_bytes;
  row.status = db::CompileStatus::Ok;
  return row;
}

void record_measurement(db::Measurement& record, const measure::Measurement& m) {
  record.status = db::MeasurementStatus::Ok;
  record.stats = db::TimingStats{m.median_us, m.p10_us,    m.p90_us,    m.min_us,    m.max_us,
                                 m.mean_us,   m.stddev_us, m.ci_low_us, m.ci_high_us};
  record.samples_us = m.samples_us;
  record.sample_count = static_cast<std::int64_t>(m.samples_us.size());
  record.l2_mode = m.warm_l2 ? db::L2Mode::Warm : db::L2Mode::Cold;
  if (m.nvml_end.valid && m.nvml_end.sm_mhz > 0) record.sm_clock_mhz = m.nvml_end.sm_mhz;
  if (m.nvml_end.valid && m.nvml_end.mem_mhz > 0) record.mem_clock_mhz = m.nvml_end.mem_mhz;
  if (m.nvml_end.valid && m.nvml_end.temp_c >= 0) record.temperature_c = m.nvml_end.temp_c;
  if (m.nvml_end.valid && m.nvml_end.power_w >= 0) record.power_w = m.nvml_end.power_w;
  record.throttled = m.throttled;
}

CandidateRecords candidate_records(const providers::CandidateResult& result, db::RunId run, db::ProblemId problem,
                                   db::ConfigId config, const std::string& phase) {
  using providers::CandidateOutcome;
  CandidateRecords records;
  db::Verification& verification = records.verification;
  verification.run = run;
  verification.problem = problem;
  verification.config = config;
  db::Measurement measurement;
  measurement.run = run;
  measurement.problem = problem;
  measurement.config = config;
  measurement.phase = phase;
  const auto passed_check = [&] {
    verification.status = db::VerificationStatus::Passed;
    if (std::isfinite(result.max_rel_error)) verification.max_rel_error = result.max_rel_error;
    verification.tolerance = result.tolerance;
    verification.message = result.verification_summary;
  };
  switch (result.outcome) {
    case CandidateOutcome::Measured:
      passed_check();
      record_measurement(measurement, result.measurement);
      measurement.message = result.measurement.stop_reason;
      break;
    case CandidateOutcome::VerificationFailed:
      verification.status = db::VerificationStatus::Failed;
      if (std::isfinite(result.max_rel_error)) verification.max_rel_error = result.max_rel_error;
      verification.tolerance = result.tolerance;
      verification.message = result.message;
      return records;  // nothing to time: the candidate is invalid
    case CandidateOutcome::Error:
      if (result.verified) {
        passed_check();
      } else {
        verification.status = db::VerificationStatus::Invalid;
        verification.message = result.message;
      }
      measurement.status = db::MeasurementStatus::Failed;
      measurement.message = result.message;
      break;
    case CandidateOutcome::Crashed:
    case CandidateOutcome::Timeout: {
      const bool timeout = result.outcome == CandidateOutcome::Timeout;
      verification.status = db::VerificationStatus::Crashed;
      verification.message = (timeout ? "timeout: " : "") + result.message;
      measurement.status = timeout ? db::MeasurementStatus::Timeout : db::MeasurementStatus::Crashed;
      measurement.message = result.message;
      break;
    }
  }
  records.measurement = std::move(measurement);
  return records;
}

}  // namespace qtune::tune
