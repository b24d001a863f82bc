// `qtune kernel-sweep`: times a kernel family's configurations on the local GPU for one format and shape over a list
// of M (CUPTI kernel time, cold L2), after checking each against the CPU reference, in the measuring worker
// (tuner/tune/sweep.hpp). A plain sweep for developing kernels and for docs/perf.md; tuning proper is `qtune tune`.
#include <algorithm>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/error.hpp"
#include "kernels/family.hpp"
#include "kernels/text_escape.hpp"
#include "reports/table.hpp"
#include "search/shape_limits.hpp"
#include "tuner/cli/commands.hpp"
#include "tuner/tune/sweep.hpp"

namespace qtune::cli {

namespace {

struct KernelSweepOptions {
  std::string family = "mma";
  std::string format;
  std::string shape;
  std::string m_list = "1";
  std::vector<std::string> configs;
  std::map<std::string, std::string> ranges;  // parameter -> "v1,v2"
  int max_configs = 200;
  int top = 8;
  bool no_verify = false;
  bool no_default = false;
  bool bias = false;
  bool warm_l2 = false;
  std::string l2_flush = "read";
  double time_budget_s = 0.3;
  double clock_dip = measure::MeasureOptions{}.clock_dip_fraction;
  int device = 0;
  uint64_t seed = 1;
  std::string output = "table";
};

void run(const KernelSweepOptions& options) {
  tune::SweepOptions sweep;
  sweep.family = options.family;
  sweep.format = FormatSpec::parse(options.format);
  const std::vector<int64_t> shape = parse_positive_int_list(options.shape, "--shape");
  if (shape.size() != 2) QTUNE_INPUT_ERROR("--shape: expected N,K, got '" + options.shape + "'");
  sweep.n = shape[0];
  sweep.k = shape[1];
  sweep.m_values = parse_positive_int_list(options.m_list, "--m");
  for (const int64_t m : sweep.m_values) search::check_problem_shape(m, sweep.n, sweep.k, "--m", "--shape");
  sweep.bias = options.bias;
  const KernelFamily& family = find_family(options.family);
  for (const std::string& text : options.configs) sweep.configs.push_back(KernelConfig::parse(text, family.name()));
  for (const auto& [name, text] : options.ranges) {
    if (text.empty()) continue;
    if (!has_parameter(family, name)) {
      QTUNE_INPUT_ERROR("--" + name + ": the " + family.name() + " family has no parameter '" + name + "'");
    }
    std::vector<int> values;
    // Parameter values may be 0 (raster=0); the family's check() rejects values outside its domain.
    for (int64_t value : parse_int_list(text, "--" + name, 0)) values.push_back(static_cast<int>(value));
    sweep.ranges[name] = values;
  }
  sweep.include_default = !options.no_default;
  sweep.max_configs = options.max_configs;
  sweep.verify = !options.no_verify;
  sweep.seed = options.seed;
  sweep.device = options.device;
  sweep.measure.device = options.device;
  sweep.measure.warm_l2 = options.warm_l2;
  sweep.measure.l2_flush = measure::l2_flush_from_text(options.l2_flush, "--l2-flush");
  sweep.measure.time_budget_s = options.time_budget_s;
  sweep.measure.max_warmup_s = std::min(0.5, options.time_budget_s);
  sweep.measure.clock_dip_fraction = options.clock_dip;

  const reports::OutputStyle style = reports::parse_output_style(options.output);
  size_t done = 0;
  const std::vector<tune::SweepRow> rows = tune::run_sweep_on_device(sweep, [&](const tune::SweepRow& row) {
    ++done;
    if (style != reports::OutputStyle::Text) return;
    std::cerr << "[" << done << "] m=" << row.m << " " << row.config.to_string() << ": ";
    if (row.measured) {
      std::cerr << fixed(row.measurement.median_us, 2) << " us, " << fixed(row.gbps, 0) << " GB/s";
    } else {
      std::cerr << row.error;
    }
    std::cerr << "\n";
  });

  // Per M: the fastest `top` verified configurations, the default, and every failure.
  reports::Table table({"m", "config", "median_us", "p10_us", "p90_us", "GB/s", "TFLOP/s", "regs", "smem_KiB", "note"});
  std::map<int64_t, std::vector<const tune::SweepRow*>> by_m;
  for (const tune::SweepRow& row : rows) by_m[row.m].push_back(&row);
  int failures = 0;
  for (auto& [m, list] : by_m) {
    std::vector<const tune::SweepRow*> measured;
    for (const tune::SweepRow* row : list) {
      if (row->measured) measured.push_back(row);
    }
    std::sort(measured.begin(), measured.end(), [](const tune::SweepRow* a, const tune::SweepRow* b) {
      return a->measurement.median_us < b->measurement.median_us;
    });
    for (size_t i = 0; i < measured.size(); ++i) {
      const tune::SweepRow& row = *measured[i];
      if (static_cast<int>(i) >= options.top && !row.is_default && style == reports::OutputStyle::Text) continue;
      std::string note = i == 0 ? "best" : "";
      if (row.is_default) note += std::string(note.empty() ? "" : ", ") + "default";
      if (!row.verified && sweep.verify) note += " unverified";
      if (row.measurement.throttled) note += " throttled";
      table.add_row({std::to_string(m), row.config.to_string(), fixed(row.measurement.median_us, 2),
                     fixed(row.measurement.p10_us, 2), fixed(row.measurement.p90_us, 2), fixed(row.gbps, 0),
                     fixed(row.tflops, 1), std::to_string(row.registers), fixed(row.shared_bytes / 1024.0, 1), note});
    }
    for (const tune::SweepRow* row : list) {
      if (row->measured) continue;
      ++failures;
      table.add_row({std::to_string(m), row->config.to_string(), "", "", "", "", "", std::to_string(row->registers),
                     fixed(row->shared_bytes / 1024.0, 1), row->error.substr(0, 300)});
    }
  }
  table.print(std::cout, style);
  if (style == reports::OutputStyle::Text) {
    std::cout << rows.size() << " configurations, " << failures << " failed; CUPTI kernel time, "
              << (options.warm_l2 ? "warm L2" : "cold L2 (" + options.l2_flush + " flush)") << ", format " << sweep.format.to_string() << ", N=" << sweep.n
              << " K=" << sweep.k << "\n";
  }
}

}  // namespace

void add_kernel_sweep_command(CLI::App& app) {
  auto options = std::make_shared<KernelSweepOptions>();
  CLI::App* command = app.add_subcommand("kernel-sweep", "time a kernel family's configurations on the local GPU");
  command->add_option("--family", options->family, "kernel family")->capture_default_str();
  command->add_option("--format", options->format, "format spec or preset, e.g. w4a16-int4-ch")->required();
  command->add_option("--shape", options->shape, "N,K")->required();
  command->add_option("--m", options->m_list, "comma-separated M values")->capture_default_str();
  command->add_option("--config", options->configs, "explicit configuration(s), e.g. bm=16,bn=128,...; repeatable");
  // One flag per parameter of any family; the meaning shown is the first family's that has it.
  std::map<std::string, std::vector<std::string>> families_of;
  for (const KernelFamily* family : kernel_families()) {
    for (const ParameterDomain& domain : family->parameter_space()) {
      std::vector<std::string>& names = families_of[domain.name];
      names.push_back(family->name());
      if (names.size() > 1) continue;
      command->add_option("--" + domain.name, options->ranges[domain.name],
                          "values of " + domain.name + " to sweep (comma-separated): " + domain.meaning);
    }
  }
  for (const auto& [name, families] : families_of) {
    if (families.size() == kernel_families().size()) continue;
    std::string list;
    for (const std::string& family : families) list += (list.empty() ? "" : ", ") + family;
    command->get_option("--" + name)->description(command->get_option("--" + name)->get_description() + " (" + list + ")");
  }
  command->add_option("--max-configs", options->max_configs, "at most this many valid configurations per M")
      ->check(integer_in(1, 1000000))
      ->capture_default_str();
  CLI::Option* top_k = command->add_option("--top-k", options->top, "rows per M in the table: the fastest configurations")
                           ->check(integer_in(1, 1000000))
                           ->capture_default_str();
  add_hidden_alias(*command, "--top", options->top, top_k)->check(integer_in(1, 1000000));
  command->add_flag("--no-verify", options->no_verify, "skip the CPU reference check");
  command->add_flag("--no-default", options->no_default, "do not add the family's default configuration");
  command->add_flag("--bias", options->bias, "add a bias vector");
  command->add_flag("--warm-l2", options->warm_l2, "do not flush L2 between repetitions");
  command->add_option("--l2-flush", options->l2_flush,
                      "how cold L2 is made between repetitions: read (a 2x L2 buffer is read, leaving clean lines) or "
                      "write (the buffer is written, leaving dirty lines the kernel pays to write back)")
      ->capture_default_str();
  command->add_option("--time-budget", options->time_budget_s, "seconds of measurement per configuration")
      ->check(real_in(0, 3600, true))
      ->capture_default_str();
  add_clock_dip_option(*command, options->clock_dip);
  command->add_option("--device", options->device, "CUDA device ordinal")->check(integer_in(0, 1023))->capture_default_str();
  command->add_option("--seed", options->seed, "random data seed")->check(integer_in(0, kMaxSeed))->capture_default_str();
  command->add_option("--output", options->output, "table, json or csv")->capture_default_str();
  command->callback([options] { run(*options); });
}

}  // namespace qtune::cli
