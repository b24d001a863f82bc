#include "tuner/production/selector.hpp"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <optional>

#include <nlohmann/json.hpp>

#include "kernels/error.hpp"
#include "kernels/families/mma_family.hpp"
#include "kernels/families/mma_moe.hpp"
#include "kernels/families/tma_family.hpp"
#include "kernels/families/wgmma_family.hpp"
#include "kernels/input_file.hpp"

namespace qtune::production {

namespace {

std::string range_text(const reports::MRange& range) {
  return "M range [" + std::to_string(range.m_min) + ", " + (range.m_max ? std::to_string(*range.m_max) : "inf") + "]";
}

}  // namespace

reports::SelectionTable read_selection_table(const std::filesystem::path& path) {
  return reports::SelectionTable::from_json(read_json_file(path, "table", "write it with `qtune export -o table.json`"),
                                            path.string());
}

Problem make_problem(const FormatSpec& format, std::int64_t m, std::int64_t n, std::int64_t k, bool has_bias) {
  if (m < 1) QTUNE_INPUT_ERROR("m: must be positive, got " + std::to_string(m));
  if (n < 1) QTUNE_INPUT_ERROR("n: must be positive, got " + std::to_string(n));
  if (k < 1) QTUNE_INPUT_ERROR("k: must be positive, got " + std::to_string(k));
  format.validate_shape(n, k);
  return Problem{format, m, n, k, has_bias};
}

Problem rule_check_problem(const reports::MRange& range, const Problem& problem) {
  Problem checked = problem;
  if (!range.buckets.empty()) checked.m = std::max(problem.m, range.buckets.back().m);
  return checked;
}

runtime_api::Choice Selection::choice() const {
  runtime_api::Choice choice;
  choice.family = config.family;
  choice.params = config.params;
  choice.config = config.to_string();
  choice.source = source;
  choice.detail = detail;
  return choice;
}

Selection select_config(const reports::SelectionTable* table, const Problem& problem, const ArchLimits& limits) {
  const KernelFamily& family = packing_family(problem.format, limits.sm);
  Selection selection;
  std::string why_not_table = "no table";
  if (table != nullptr) {
    const std::string format = problem.format.to_string();
    const reports::SelectionTable::Selection found = table->select(format, problem.m, problem.n, problem.k);
    if (found.config == nullptr) {
      const auto method = table->fallback_methods.find(format);
      const bool heuristic_fallback = table->formats.count(format) > 0 && method != table->fallback_methods.end() &&
                                      method->second == reports::FallbackMethod::Heuristic;
      why_not_table = heuristic_fallback ? "n=" + std::to_string(problem.n) + " k=" + std::to_string(problem.k) +
                                               " is not tuned and the table's fallback for " + format + " is the heuristic"
                                         : "the table has no shape of " + format;
    } else {
      const reports::MRange& range = found.shape->range_for(problem.m);
      const std::string origin = (found.tuned_shape ? "tuned shape n=" : "nearest tuned shape n=") + std::to_string(found.shape->n) +
                                 " k=" + std::to_string(found.shape->k) + ", " + range_text(range);
      // Weights are packed for the format's family: a config runs only on a family that reads that layout.
      const KernelFamily* config_family = family_named(found.config->family);
      const RuleVerdict verdict =
          config_family == nullptr ? RuleVerdict::fail("family", "this build has no kernel family '" + found.config->family + "'")
          : config_family->weight_layout() != family.weight_layout()
              ? RuleVerdict::fail("family", "the config is of family '" + found.config->family + "', the weights are packed for '" +
                                                family.name() + "' (layout '" + family.weight_layout() + "')")
              : config_family->check(*found.config, rule_check_problem(range, problem), limits);
      if (verdict.valid) {
        selection.family = config_family;
        selection.config = *found.config;
        selection.source = found.tuned_shape ? runtime_api::ConfigSource::Tuned : runtime_api::ConfigSource::Fallback;
        selection.detail = origin;
        return selection;
      }
      why_not_table = "the table's config " + found.config->to_string() + " (" + origin + ") fails rule '" + verdict.rule +
                      "' here: " + verdict.detail;
    }
  }
  const KernelFamily& heuristic = heuristic_family(problem, limits.sm);
  selection.family = &heuristic;
  selection.config = heuristic.default_config(problem, limits);
  selection.source = runtime_api::ConfigSource::Heuristic;
  selection.detail = why_not_table;
  return selection;
}

MoeProblem make_moe_problem(const FormatSpec& format, int experts, int top_k, std::int64_t n, std::int64_t k,
                            std::int64_t tokens, std::string_view projection) {
  MoeProblem problem;
  problem.format = format;
  problem.projection = parse_moe_projection(projection, "projection");
  problem.layout = MoeLayout::TokenIndexed;
  problem.experts = experts;
  problem.top_k = top_k;
  problem.tokens = tokens;
  problem.n = n;
  problem.k = k;
  problem.validate();
  return problem;
}

std::int64_t expected_rows_per_expert(const MoeProblem& problem) {
  const double experts = problem.experts;
  const double untouched = std::pow(1.0 - static_cast<double>(problem.top_k) / experts, static_cast<double>(problem.tokens));
  const double touched = std::max(1.0, experts * (1.0 - untouched));
  const double pairs = static_cast<double>(problem.tokens * problem.top_k);
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(pairs / touched - 1e-9)));
}

namespace {

std::string moe_range_text(const reports::MRange& range) {
  return "token range [" + std::to_string(range.m_min) + ", " + (range.m_max ? std::to_string(*range.m_max) : "inf") + "]";
}

const reports::MRange& moe_range_for(const reports::MoeRules& rules, std::int64_t tokens) {
  for (const reports::MRange& range : rules.ranges) {
    if (range.contains(tokens)) return range;
  }
  return rules.ranges.back();
}

double log_distance(double a, double b) { return std::log(a / b) * std::log(a / b); }

}  // namespace

const KernelFamily* runtime_moe_family(const KernelConfig& config, const FormatSpec& format, int sm, std::string* why_not) {
  if (config.family == mma_family().name()) return &mma_family();
  // wgmma and tma: sm_90 only, and tma no 4-bit compute; the family's own reason otherwise.
  for (const MmaFamily* family : std::initializer_list<const MmaFamily*>{&wgmma_family(), &tma_family()}) {
    if (config.family != family->name()) continue;
    const ArchSupport support = family->supports(format, sm);
    if (support.supported) return family;
    if (why_not != nullptr) *why_not = "the config is of family '" + config.family + "': " + support.reason;
    return nullptr;
  }
  if (why_not != nullptr) {
    *why_not = "the config is of family '" + config.family + "': the runtime runs the mma MoE kernel, and the wgmma and tma "
               "ones on sm_90";
  }
  return nullptr;
}

KernelConfig moe_heuristic_config(const MoeProblem& problem, const ArchLimits& limits) {
  const MmaFamily& mma = mma_family();
  const ArchSupport support = mma.supports(problem.format, limits.sm);
  if (!support.supported) QTUNE_THROW(UnsupportedError, support.reason);
  const std::int64_t rows = expected_rows_per_expert(problem);
  const std::int64_t pairs = problem.tokens * problem.top_k;
  const std::int64_t touched = std::max<std::int64_t>(1, (pairs + rows - 1) / rows);
  std::vector<KernelConfig> candidates;
  // A dense family's hand-written config at the rows per expert, with its K split lowered for the MoE launch, then split 1.
  auto add_dense_config = [&](const MmaFamily& family, int max_split) {
    try {
      KernelConfig config = family.default_config(Problem{problem.format, rows, problem.n, problem.k}, limits);
      // The dense rule splits K to fill the GPU with one expert's tiles; a MoE launch has every touched expert's.
      const std::int64_t bm = config.get("bm"), bn = config.get("bn");
      const std::int64_t tiles = (problem.n / bn) * touched * ((rows + bm - 1) / bm);
      int split = std::min(config.get("split"), max_split);
      while (split > 1 && 2 * tiles * (split / 2) >= 3 * std::int64_t{limits.sm_count}) split /= 2;
      config.params["split"] = split;
      // wgmma decode tiles (16 rows): 256-deep K tiles first, half the pipeline steps per weight; they won every
      // DeepSeek-V3 decode bucket on the H200, gate-up T = 16 450.8 us against 529.9 at bk = 128 (docs/perf.md,
      // fifteenth session, call 2).
      // Widened fp8 activations keep bk = 128, the W4A8 winner at T = 16 of both projections and at T = 1 of down
      // (DeepSeek-V3 on the H200: gate-up T = 16 377.8 us against 388.6 at 256; down T = 1 23.2 against 26.5); 256
      // won only gate-up T = 1 (35.3 against 38.1). The persistent down lost too (28.9 against 26.2).
      if (&family == &wgmma_family() && bm == 16 && problem.k % 256 == 0 && config.get("bk") < 256 &&
          !WgmmaFamily::widens_activations(problem.format)) {
        KernelConfig deep = config;
        deep.params["bk"] = 256;
        // The down projection's short units (DeepSeek-V3: K = 2048, 8 tiles) run faster on the persistent schedule
        // (T = 1, 16, 256: 5%, 3%, 1.5% on the H200, two calls); the gate-up's long ones do not (9% slower).
        if (problem.projection == MoeProjection::Down && problem.layout == MoeLayout::TokenIndexed) {
          KernelConfig walked = deep;
          walked.params["split"] = 1;
          walked.params["persistent"] = 1;
          candidates.push_back(walked);
        }
        candidates.push_back(deep);
        deep.params["split"] = 1;
        candidates.push_back(deep);
      }
      candidates.push_back(config);
      config.params["split"] = 1;
      candidates.push_back(config);
    } catch (const UnsupportedError&) {
      // No dense shape fits N and K: the next family's, or the small tiles below, may.
    }
  };
  // Quantized activations on the tma MoE kernel where the H200 measured it ahead (DeepSeek-V3 W4A8, docs/perf.md,
  // seventeenth session): 128-token tiles beyond the widened wgmma tiles' 64 rows per expert (T = 4096: the tune's
  // winners of both projections, gate-up 2981.1 us, down 2699.5), and 64-token tiles for W4A8's gate-up from 32 rows
  // (T = 1024: 1527.4 us, every wgmma candidate slower than tma's second best, 1621.4; the down projection stays on
  // wgmma, 1342.2 against tma's 1448.5). A persistent grid walks the units (1.4% ahead of one CTA per unit at T = 4096).
  // W8A8 fp8 takes the tall tiles by the dense evidence (its tma kernels lead from M = 32; not measured as MoE yet).
  if (problem.format.activation_is_quantized() && tma_family().supports(problem.format, limits.sm).supported) {
    const bool tall = rows > WgmmaFamily::kWidenedMaxBm;
    const bool w4a8_gate_up = rows >= 32 && problem.projection == MoeProjection::GateUp && WgmmaFamily::widened_preferred(problem.format);
    if (tall || w4a8_gate_up) {
      // 8-bit weights fill shared memory twice as fast: their slots are 128 K deep (the dense default's at large M).
      const std::string bm = tall ? "128" : "64";
      for (const char* bk : {"256", "128"}) {
        for (const char* persistent : {"1", "0"}) {
          candidates.push_back(KernelConfig::parse("bm=" + bm + ",bn=128,bk=" + bk + ",stages=4,split=1,raster=0,cluster=1,multicast=0,persistent=" +
                                                       persistent + ",overlap=1,promote=0,pingpong=0,kgroups=1,ss=0",
                                                   tma_family().name()));
        }
      }
    }
  }
  // wgmma won every DeepSeek-V3 MoE problem measured on the H200 (docs/perf.md, eleventh session) and wins dense from M = 16.
  // fp8 activations: W4A8 only (WgmmaFamily::widened_preferred), which beat Humming's MoE kernel at every decode bucket.
  const bool widened = WgmmaFamily::widens_activations(problem.format);
  if (wgmma_family().supports(problem.format, limits.sm).supported && (!widened || WgmmaFamily::widened_preferred(problem.format))) {
    add_dense_config(wgmma_family(), mma_moe::swap_ab_splits(rows).back());
  }
  add_dense_config(mma, std::numeric_limits<int>::max());
  for (const char* text : {"bm=16,bn=128,bk=128,wm=1,wn=4,wk=1,stages=4,split=1,raster=0",
                           "bm=16,bn=64,bk=128,wm=1,wn=2,wk=1,stages=4,split=1,raster=0",
                           "bm=16,bn=32,bk=128,wm=1,wn=2,wk=1,stages=4,split=1,raster=0"}) {
    candidates.push_back(KernelConfig::parse(text, mma.name()));
  }
  std::string failures;
  for (const KernelConfig& config : candidates) {
    const RuleVerdict verdict = mma_moe::check(config, problem, limits);
    if (verdict.valid) return config;
    failures += (failures.empty() ? "" : "; ") + config.family + ":" + config.to_string() + ": " + verdict.rule;
  }
  QTUNE_THROW(UnsupportedError, "no MoE configuration runs " + problem.to_string() + " here (" + failures + ")");
}

Selection select_moe_config(const reports::SelectionTable* table, const MoeProblem& problem, const ArchLimits& limits) {
  // Every MoE kernel reads the mma family's layout: where that family cannot run the format, none can.
  const ArchSupport support = mma_family().supports(problem.format, limits.sm);
  if (!support.supported) QTUNE_THROW(UnsupportedError, support.reason);
  Selection selection;
  std::string why_not_table = "no table";
  if (table != nullptr) {
    const std::string format = problem.format.to_string();
    const std::string projection(moe_projection_name(problem.projection));
    const std::string layout(moe_layout_name(MoeLayout::TokenIndexed));
    const reports::MoeRules* found = nullptr;
    bool exact = false;
    double best = 0;
    for (const reports::MoeRules& rules : table->moe) {
      if (rules.format != format || rules.projection != projection || rules.layout != layout || rules.ranges.empty()) continue;
      if (rules.experts == problem.experts && rules.top_k == problem.top_k && rules.n == problem.n && rules.k == problem.k) {
        found = &rules;
        exact = true;
        break;
      }
      const double distance = log_distance(rules.n, problem.n) + log_distance(rules.k, problem.k) +
                              log_distance(rules.experts, problem.experts) + log_distance(rules.top_k, problem.top_k);
      if (found == nullptr || distance < best) {
        found = &rules;
        best = distance;
      }
    }
    if (found == nullptr) {
      why_not_table = "the table has no token-indexed " + projection + " MoE entry of " + format;
    } else {
      const reports::MRange& range = moe_range_for(*found, problem.tokens);
      const std::string origin = std::string(exact ? "tuned MoE shape" : "nearest tuned MoE shape") + " E=" +
                                 std::to_string(found->experts) + " top_k=" + std::to_string(found->top_k) + " n=" +
                                 std::to_string(found->n) + " k=" + std::to_string(found->k) + ", " + moe_range_text(range);
      // T only sizes the launch: check the config where it was tuned (its range's largest bucket), as for dense M.
      MoeProblem checked = problem;
      if (!range.buckets.empty()) checked.tokens = std::max(problem.tokens, range.buckets.back().m);
      std::string why_not_family;
      const KernelFamily* config_family = runtime_moe_family(range.config, problem.format, limits.sm, &why_not_family);
      const RuleVerdict verdict = config_family == nullptr ? RuleVerdict::fail("family", why_not_family)
                                                           : mma_moe::check(range.config, checked, limits);
      if (verdict.valid) {
        selection.family = config_family;
        selection.config = range.config;
        selection.source = exact ? runtime_api::ConfigSource::Tuned : runtime_api::ConfigSource::Fallback;
        selection.detail = origin;
        return selection;
      }
      why_not_table = "the table's config " + range.config.family + ":" + range.config.to_string() + " (" + origin +
                      ") fails rule '" + verdict.rule + "' here: " + verdict.detail;
    }
  }
  selection.config = moe_heuristic_config(problem, limits);
  selection.family = runtime_moe_family(selection.config, problem.format, limits.sm);
  selection.source = runtime_api::ConfigSource::Heuristic;
  selection.detail = why_not_table;
  return selection;
}

}  // namespace qtune::production
