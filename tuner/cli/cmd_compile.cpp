// `qtune compile`: checks the options, compiles a format's kernel configurations for one architecture with NVRTC (no
// GPU needed; tuner/tune/compile_run.hpp), then prints each one's ptxas resources (registers, spills, shared memory,
// stack) and compile time; the library stores them in the database's compiles table. The configurations are those
// `qtune tune` would enumerate for the problem (the same space, rules and --param narrowing), or those named by --config.
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "db/store.hpp"
#include "kernels/error.hpp"
#include "kernels/family.hpp"
#include "kernels/family_support.hpp"
#include "kernels/text_escape.hpp"
#include "reports/table.hpp"
#include "search/shape_limits.hpp"
#include "search/space.hpp"
#include "tuner/cli/commands.hpp"
#include "tuner/jit/compiler.hpp"
#include "tuner/tune/compile_run.hpp"
#include "tuner/tune/problem_set.hpp"
#include "tuner/tune/progress.hpp"
#include "tuner/tune/restricted_family.hpp"
#include "tuner/tune/tuner.hpp"

namespace qtune::cli {

namespace {

struct CompileCommandOptions {
  std::string arch;
  std::string format;
  std::vector<std::string> configs;
  std::string family = "auto";
  std::string space = "curated";
  std::vector<std::string> params;
  std::int64_t m = 16;
  std::string shape = "8192,8192";
  std::string db_path = "qtune.db";
  bool no_db = false;
  std::size_t jobs = 0;
  std::string output = "table";
  bool verbose = false;
};

// The NVRTC targets of the architectures some kernel family compiles for (architectures_with_a_family): sm_90 also
// as sm_90a (wgmma needs it), later ones only as their "a" variant, as their tensor-core instructions need.
const std::vector<std::string>& accepted_archs() {
  static const std::vector<std::string> archs = [] {
    std::vector<std::string> names;
    for (int sm : architectures_with_a_family()) {
      const std::string name = "sm_" + std::to_string(sm);
      if (sm <= 90) names.push_back(name);
      if (sm >= 90) names.push_back(name + "a");
    }
    return names;
  }();
  return archs;
}

// `compile --help`'s last section: per architecture, how many preset formats each family runs there, and for the
// presets no family runs, every family's reason, from the families' own rules (KernelFamily::supports).
std::string architecture_summary() {
  const std::size_t presets = format_presets().size();
  std::string text = "Formats per architecture (from the kernel families' rules; `qtune formats show SPEC` for one format):\n";
  for (int sm : known_architectures()) {
    std::string runs;
    for (const KernelFamily* family : kernel_families()) {
      const auto count = std::count_if(format_presets().begin(), format_presets().end(), [&](const FormatPreset& preset) {
        return family->supports(FormatSpec::parse(preset.name), sm).supported;
      });
      if (count > 0) runs += (runs.empty() ? "" : ", ") + family->name() + " " + std::to_string(count);
    }
    text += "  sm_" + std::to_string(sm) + ": " + (runs.empty() ? "no family runs a preset" : runs + " of the " + std::to_string(presets) + " presets") + "\n";
    std::map<std::string, std::vector<std::string>> by_reason;  // why no family runs them -> presets
    for (const FormatPreset& preset : format_presets()) {
      const FormatSpec format = FormatSpec::parse(preset.name);
      const FamilySupport support = family_support(format, sm);
      if (support.family != nullptr) continue;
      // Each family's reason ('; '-separated) starts with the format ("<spec> is unsupported on sm_X[ by the F family]: "
      // or "<spec>: "); without it, what follows is shared by many formats.
      const std::string spec = format.to_string();
      const std::string unsupported = spec + " is unsupported on sm_" + std::to_string(sm);
      std::string reason;
      std::size_t begin = 0;
      while (begin <= support.reason.size()) {
        std::size_t end = support.reason.find("; ", begin);
        if (end == std::string::npos) end = support.reason.size();
        std::string part = support.reason.substr(begin, end - begin);
        if (part.rfind(unsupported + " by the ", 0) == 0) {
          part = part.substr(unsupported.size() + 8);  // "F family: ..."
        } else if (part.rfind(unsupported + ": ", 0) == 0) {
          part = part.substr(unsupported.size() + 2);
        }
        if (part.rfind(spec + ": ", 0) == 0) part = part.substr(spec.size() + 2);  // also after the prefix above
        reason += (reason.empty() ? "" : "; ") + part;
        begin = end + 2;
      }
      by_reason[reason].push_back(preset.name);
    }
    for (const auto& [reason, names] : by_reason) text += "    none runs " + joined(names) + ": " + reason + "\n";
  }
  return text;
}

// Refuses a format the family cannot run on `sm`, naming what to change: --arch when the family runs the format on
// other architectures, --family when another family runs it here, else --format.
[[noreturn]] void refuse_unsupported(const KernelFamily& family, const FormatSpec& format, int sm, const std::string& reason) {
  std::string elsewhere;
  for (int other : known_architectures()) {
    if (family.supports(format, other).supported) elsewhere += (elsewhere.empty() ? "" : ", ") + ("sm_" + std::to_string(other));
  }
  if (!elsewhere.empty()) QTUNE_INPUT_ERROR("--arch: " + reason + " (the " + family.name() + " family runs it on " + elsewhere + ")");
  if (const KernelFamily* other = family_support(format, sm).family) {
    QTUNE_INPUT_ERROR("--family: " + reason + " (the " + other->name() + " family runs it on sm_" + std::to_string(sm) + ")");
  }
  QTUNE_INPUT_ERROR("--format: " + reason);
}

// Checks --arch and returns its compute capability x10.
int validate_arch(const std::string& arch) {
  const std::vector<std::string>& accepted = accepted_archs();
  if (std::find(accepted.begin(), accepted.end(), arch) == accepted.end()) {
    QTUNE_INPUT_ERROR("--arch: '" + arch + "' is not one of " + joined(accepted));
  }
  const int sm = sm_of_arch(arch, "--arch");
  const std::vector<std::string> nvrtc = jit::Compiler::supported_archs();
  if (std::find(nvrtc.begin(), nvrtc.end(), "sm_" + std::to_string(sm)) == nvrtc.end()) {
    QTUNE_INPUT_ERROR("--arch: this NVRTC cannot compile for '" + arch + "' (it supports " + joined(nvrtc) + ")");
  }
  return sm;
}

// The first line of an NVRTC failure that says what went wrong: the first log line mentioning an error, else the
// first line of the log (the message is "compiling kernel ... failed (...):\n<log>").
std::string first_log_line(const std::string& message) {
  const std::size_t log_start = message.find("):\n");
  const std::string log = log_start == std::string::npos ? message : message.substr(log_start + 3);
  std::string first;
  std::size_t begin = 0;
  while (begin < log.size()) {
    std::size_t end = log.find('\n', begin);
    if (end == std::string::npos) end = log.size();
    const std::string line = log.substr(begin, end - begin);
    begin = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (first.empty()) first = line;
    if (line.find("error") != std::string::npos) return line;
  }
  return first.empty() ? message : first;
}

using tune::CompileRow;

// The configurations to compile: those named by --config, or the space `qtune tune` searches for the problem.
std::vector<KernelConfig> select_configs(const CompileCommandOptions& options, const KernelFamily& family,
                                         const Problem& problem, const ArchLimits& limits) {
  std::vector<KernelConfig> configs;
  if (!options.configs.empty()) {
    if (!options.params.empty()) QTUNE_INPUT_ERROR("--param: narrows the enumerated space; not with --config");
    for (const std::string& text : options.configs) {
      const KernelConfig config = naming_flag("--config", [&] { return KernelConfig::parse(text, family.name()); });
      const RuleVerdict verdict = naming_flag("--config", [&] { return family.check(config, problem, limits); });
      if (!verdict.valid) {
        QTUNE_INPUT_ERROR("--config: '" + text + "' is not valid for " + problem.to_string() + " on sm_" +
                          std::to_string(limits.sm) + ": " + verdict.rule + ": " + verdict.detail);
      }
      if (std::find(configs.begin(), configs.end(), config) == configs.end()) configs.push_back(config);
    }
    return configs;
  }
  if (options.space != "curated" && options.space != "full") {
    QTUNE_INPUT_ERROR("--space: expected curated or full, got '" + options.space + "'");
  }
  // The same ranges as `qtune tune`: the preset's, replaced by --param where given.
  std::map<std::string, std::vector<int>> ranges;
  if (options.space == "curated") ranges = family.curated_ranges(problem.m);
  for (const std::string& text : options.params) {
    auto [name, values] = tune::parse_parameter_values(text);
    ranges[name] = values;
  }
  const tune::RestrictedFamily restricted(family, ranges);  // InputError naming --param for a bad value
  const search::SpaceEnumeration space = search::enumerate_space(restricted, problem, limits);
  if (space.candidates.empty()) {
    std::string removed;
    for (const auto& [rule, count] : space.removed_by_rule) removed += (removed.empty() ? "" : ", ") + rule + "=" + std::to_string(count);
    QTUNE_INPUT_ERROR(std::string(options.params.empty() ? "--space" : "--param") + ": none of the " +
                      std::to_string(space.total) + " configurations is valid for " + problem.to_string() + " on sm_" +
                      std::to_string(limits.sm) + " (removed: " + removed + ")");
  }
  return space.candidates;
}

std::string command_text(const CompileCommandOptions& options) {
  std::string text = "qtune compile --arch " + options.arch + " --format " + options.format + " --family " +
                     options.family + " --m " + std::to_string(options.m) + " --shape " + options.shape;
  for (const std::string& config : options.configs) text += " --config " + config;
  if (options.configs.empty()) text += " --space " + options.space;
  for (const std::string& param : options.params) text += " --param " + param;
  return text;
}

void run(const CompileCommandOptions& options) {
  const reports::OutputStyle style = reports::parse_output_style(options.output);
  const int sm = validate_arch(options.arch);
  const ArchLimits limits = ArchLimits::for_sm(sm);
  const FormatSpec format = naming_flag("--format", [&] { return FormatSpec::parse(options.format); });
  // "auto": the family that runs the format on this architecture (the first of the registry, as production packs it).
  const KernelFamily& family = naming_flag("--family", [&]() -> const KernelFamily& {
    if (options.family != "auto") return find_family(options.family);
    if (const KernelFamily* here = family_support(format, sm).family) return *here;
    // No family runs it here: take one that runs it elsewhere, so that the refusal below names --arch.
    for (const KernelFamily* other : kernel_families()) {
      for (const int other_sm : known_architectures()) {
        if (other->supports(format, other_sm).supported) return *other;
      }
    }
    return *kernel_families().front();
  });
  const ArchSupport support = family.supports(format, sm);
  if (!support.supported) refuse_unsupported(family, format, sm, support.reason);
  const std::vector<search::GemmShape> shapes = tune::parse_shape_list(options.shape, "--shape");
  if (shapes.size() != 1) QTUNE_INPUT_ERROR("--shape: expected one N,K, got '" + options.shape + "'");
  naming_flag("--shape", [&] {
    format.validate_shape(shapes[0].n, shapes[0].k);
    return 0;
  });
  search::check_problem_shape(options.m, shapes[0].n, shapes[0].k, "--m", "--shape");
  const Problem problem{format, options.m, shapes[0].n, shapes[0].k, false};
  const std::vector<KernelConfig> configs = select_configs(options, family, problem, limits);

  tune::CompileRunRequest request;
  request.family = &family;
  request.problem = problem;
  request.arch = options.arch;
  request.sm = sm;
  request.configs = configs;
  request.command_line = command_text(options);
  std::optional<db::Store> store;
  if (!options.no_db) store.emplace(db::Store::open(options.db_path));
  request.compiler = compiler_settings(options.jobs);
  tune::ConsoleProgress progress(std::cerr, isatty(STDERR_FILENO) != 0);
  if (style == reports::OutputStyle::Text) {
    std::cerr << "qtune compile: " << configs.size() << " configurations of " << format.to_string() << " for "
              << options.arch << " (" << family.name() << ", "
              << (options.configs.empty() ? options.space + " space for " + problem.to_string() : std::string("--config"))
              << ")\n";
  }
  const tune::CompileOutcome outcome = tune::run_compile(request, store ? &*store : nullptr, progress);
  const std::vector<CompileRow>& rows = outcome.rows;

  reports::Table table({"config", "registers", "spill_store_bytes", "spill_load_bytes", "smem_static_bytes",
                        "smem_dynamic_bytes", "stack_bytes", "compile_ms", "cached", "error"});
  std::size_t failed = 0;
  std::size_t cached = 0;
  for (const CompileRow& row : rows) {
    const std::string dynamic = std::to_string(row.dynamic_shared_bytes);
    if (!row.ok) {
      ++failed;
      table.add_row({row.config.to_string(), "", "", "", "", dynamic, "", "", "", first_log_line(row.error)});
      continue;
    }
    const jit::CompiledKernel& kernel = *row.kernel;
    if (kernel.from_cache) ++cached;
    // A cached kernel shows what compiling it cost when the cache entry was made.
    table.add_row({row.config.to_string(), std::to_string(kernel.resources.registers),
                   std::to_string(kernel.resources.spill_store_bytes), std::to_string(kernel.resources.spill_load_bytes),
                   std::to_string(kernel.resources.static_shared_bytes), dynamic,
                   std::to_string(kernel.resources.stack_frame_bytes),
                   fixed(1000.0 * kernel.original_compile_seconds, 1), kernel.from_cache ? "yes" : "no",
                   ""});
  }
  table.print(std::cout, style);
  if (options.verbose) {
    for (const CompileRow& row : rows) {
      if (!row.ok) std::cerr << "\n" << row.config.to_string() << ":\n" << row.error << "\n";
    }
  }
  if (style == reports::OutputStyle::Text) {
    std::cout << configs.size() << " configurations of " << format.to_string() << " for " << options.arch << ": "
              << configs.size() - failed << " compiled (" << cached << " from the cache), " << failed << " failed";
    if (outcome.run) std::cout << "; run #" << db::id_value(*outcome.run) << " in " << options.db_path;
    std::cout << "\n";
  }
  if (failed > 0) {
    QTUNE_THROW(Error, std::to_string(failed) + " of " + std::to_string(configs.size()) + " compiles failed" +
                           (options.verbose ? "" : " (--verbose prints the NVRTC logs)"));
  }
}

}  // namespace

void add_compile_command(CLI::App& app) {
  auto options = std::make_shared<CompileCommandOptions>();
  CLI::App* command = app.add_subcommand(
      "compile", "compile a format's kernel configurations for an architecture (no GPU needed); print and store their "
                 "registers, spills, shared memory and compile times");
  command->add_option("--arch", options->arch, "target: " + joined(accepted_archs()))->required();
  command->add_option("--format", options->format, "format spec or preset, e.g. w4a16-int4-g128")->required();
  command->add_option("--config", options->configs,
                      "compile this configuration only, e.g. bm=16,bn=128,bk=256,wm=1,wn=4,wk=1,stages=4,split=1,raster=0 "
                      "(repeatable; default: every valid one of the space)");
  command->add_option("--family", options->family, "kernel family, or auto: the family that runs the format on --arch")->capture_default_str();
  command->add_option("--space", options->space,
                      "without --config: curated (the per-M ranges `qtune tune` searches) or full (the whole space)")
      ->capture_default_str();
  command->add_option("--param", options->params, "narrow a parameter's values, e.g. --param bm=16,32 (repeatable)");
  command->add_option("--m", options->m, "M the configurations must be valid for (the space depends on it)")
      ->capture_default_str();
  command->add_option("--shape", options->shape, "N,K the configurations must be valid for")->capture_default_str();
  command->add_option("--db", options->db_path, "database file (default: $QTUNE_DB, else ./qtune.db)")->envname("QTUNE_DB");
  command->add_flag("--no-db", options->no_db, "do not store the results");
  command->add_option("--jobs", options->jobs, "compiler threads (0: every core; at most the cores)")
      ->check(integer_in(0, kMaxJobs))
      ->capture_default_str();
  command->add_option("--output", options->output, "table, json or csv")->capture_default_str();
  command->add_flag("--verbose", options->verbose, "print the full NVRTC log of every failed compile (stderr)");
  command->footer([] { return architecture_summary(); });
  command->callback([options] { run(*options); });
}

}  // namespace qtune::cli
