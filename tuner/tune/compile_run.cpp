#include "tuner/tune/compile_run.hpp"

#include <algorithm>
#include <utility>

#include <nlohmann/json.hpp>

#include "kernels/error.hpp"
#include "tuner/jit/thread_pool.hpp"
#include "tuner/tune/backend.hpp"
#include "tuner/tune/records.hpp"

namespace qtune::tune {

namespace {

db::RunId insert_compile_run(db::Store& store, const CompileRunRequest& request) {
  db::RunInfo info = run_info_of_this_build("compile");
  info.sm = request.sm;
  info.command_line = request.command_line;
  const auto [nvrtc_major, nvrtc_minor] = jit::Compiler::nvrtc_version();
  info.cuda_version = std::to_string(nvrtc_major) + "." + std::to_string(nvrtc_minor);
  info.notes = nlohmann::json{{"compile", {{"arch", request.arch},
                                           {"format", request.problem.format.to_string()},
                                           {"family", request.family->name()},
                                           {"configs", request.configs.size()},
                                           {"m", request.problem.m},
                                           {"n", request.problem.n},
                                           {"k", request.problem.k}}}}
                   .dump();
  return store.insert_run(info);
}

void store_rows(const CompileRunRequest& request, const std::vector<CompileRow>& rows, db::Store& store,
                db::RunId run) {
  const std::string source_hash = kernel_source_hash(*request.family);
  auto transaction = store.transaction();
  for (const CompileRow& row : rows) {
    InstantiationResult result;
    if (row.ok) {
      result = instantiation_result(*row.kernel);
    } else {
      result.message = row.error;
    }
    const db::ConfigId config = store.upsert_config(config_record(row.config, source_hash));
    store.insert_compile(
        compile_record(run, config, Instantiation{row.config, request.problem.format, request.arch}, result));
  }
  transaction.commit();
}

void compile_rows(const CompileRunRequest& request, std::vector<CompileRow>& rows, TuneObserver& progress) {
  const KernelFamily& family = *request.family;
  // Requests go through the tuner's compile_request, so the cache entries are the ones `qtune tune` uses.
  std::vector<jit::CompileRequest> requests;
  std::vector<std::size_t> request_row;
  for (std::size_t i = 0; i < request.configs.size(); ++i) {
    CompileRow& row = rows[i];
    row.config = request.configs[i];
    row.dynamic_shared_bytes = family.launch_geometry(row.config, request.problem).dynamic_shared_bytes;
    try {
      requests.push_back(compile_request(family, Instantiation{row.config, request.problem.format, request.arch}));
      request_row.push_back(i);
    } catch (const Error& error) {
      row.error = error.what();
    }
  }
  const jit::Compiler compiler(request.compiler);
  const std::size_t threads = jit::compiler_thread_count(request.compiler.threads);
  const std::size_t chunk = std::max<std::size_t>(32, 8 * threads);
  for (std::size_t begin = 0; begin < requests.size(); begin += chunk) {
    const std::size_t end = std::min(requests.size(), begin + chunk);
    const std::vector<jit::CompileRequest> part(requests.begin() + static_cast<std::ptrdiff_t>(begin),
                                                requests.begin() + static_cast<std::ptrdiff_t>(end));
    std::vector<jit::CompileOutcome> outcomes = compiler.compile_all(part, [&](std::size_t done, std::size_t) {
      progress.compile_progress(begin + done, requests.size());
    });
    for (std::size_t j = 0; j < outcomes.size(); ++j) {
      CompileRow& row = rows[request_row[begin + j]];
      jit::CompileOutcome& outcome = outcomes[j];
      if (outcome.ok()) {
        row.ok = true;
        row.kernel = std::move(outcome.kernel);
        row.kernel->cubin.clear();
        row.kernel->cubin.shrink_to_fit();
      } else {
        row.error = outcome.error_message;
      }
    }
  }
}

}  // namespace

CompileOutcome run_compile(const CompileRunRequest& request, db::Store* store, TuneObserver& progress) {
  if (request.family == nullptr) QTUNE_THROW(Error, "run_compile: no kernel family given");
  CompileOutcome outcome;
  if (store) outcome.run = insert_compile_run(*store, request);
  outcome.rows.resize(request.configs.size());
  try {
    compile_rows(request, outcome.rows, progress);
    if (store) {
      store_rows(request, outcome.rows, *store, *outcome.run);
      store->finish_run(*outcome.run, db::RunStatus::Completed);
    }
  } catch (...) {
    if (store) {
      try {
        store->finish_run(*outcome.run, db::RunStatus::Failed);
      } catch (...) {
        // The original error matters more than the bookkeeping.
      }
    }
    throw;
  }
  return outcome;
}

}  // namespace qtune::tune
