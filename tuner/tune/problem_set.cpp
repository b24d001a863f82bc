#include "tuner/tune/problem_set.hpp"

#include <algorithm>
#include <cstdlib>
#include <tuple>

#include "kernels/error.hpp"
#include "search/shape_limits.hpp"

namespace qtune::tune {

namespace {

std::string trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return "";
  const auto last = text.find_last_not_of(" \t");
  return std::string(text.substr(first, last - first + 1));
}

std::vector<std::string> split(std::string_view text, char separator) {
  std::vector<std::string> pieces;
  size_t start = 0;
  while (true) {
    const size_t end = text.find(separator, start);
    pieces.push_back(trim(text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start)));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return pieces;
}

// A non-negative integer that is the whole of `text`, else nullopt.
std::optional<std::int64_t> parse_integer(std::string_view text) {
  if (text.empty() || text.size() > 18) return std::nullopt;
  std::int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value;
}

}  // namespace

std::string problem_key(const Problem& problem) {
  return problem.format.to_string() + " m=" + std::to_string(problem.m) + " n=" + std::to_string(problem.n) +
         " k=" + std::to_string(problem.k);
}

std::vector<Problem> build_problem_set(const std::vector<FormatSpec>& formats, const std::vector<search::GemmShape>& shapes,
                                       const std::vector<std::int64_t>& m_values) {
  std::vector<Problem> problems;
  for (const FormatSpec& format : formats) {
    for (const search::GemmShape& shape : shapes) {
      try {
        format.validate_shape(shape.n, shape.k);
      } catch (const InputError& error) {
        QTUNE_INPUT_ERROR("--format: " + format.to_string() + " cannot describe N=" + std::to_string(shape.n) +
                          " K=" + std::to_string(shape.k) + ": " + error.what());
      }
      for (std::int64_t m : m_values) {
        search::check_problem_shape(m, shape.n, shape.k, "--m", "--shape");
        problems.push_back(Problem{format, m, shape.n, shape.k, false});
      }
    }
  }
  auto order = [](const Problem& p) { return std::make_tuple(p.format.to_string(), p.n, p.k, p.m); };
  std::sort(problems.begin(), problems.end(), [&](const Problem& a, const Problem& b) { return order(a) < order(b); });
  problems.erase(std::unique(problems.begin(), problems.end(),
                             [&](const Problem& a, const Problem& b) { return order(a) == order(b); }),
                 problems.end());
  return problems;
}

std::vector<search::GemmShape> parse_shape_list(std::string_view text, std::string_view field) {
  std::vector<search::GemmShape> shapes;
  for (const std::string& item : split(text, ';')) {
    const std::vector<std::string> parts = split(item, ',');
    const auto n = parts.size() == 2 ? parse_integer(parts[0]) : std::nullopt;
    const auto k = parts.size() == 2 ? parse_integer(parts[1]) : std::nullopt;
    if (!n || !k || *n <= 0 || *k <= 0) {
      QTUNE_INPUT_ERROR(std::string(field) + ": expected N,K with positive integers (several separated by ';'), got '" +
                        item + "'");
    }
    search::check_weight_shape(*n, *k, field);
    search::GemmShape shape{*n, *k};
    if (std::find(shapes.begin(), shapes.end(), shape) == shapes.end()) shapes.push_back(shape);
  }
  return shapes;
}

std::string Shard::to_string() const {
  if (!sharded()) return "";
  return std::to_string(index) + "/" + std::to_string(count);
}

Shard parse_shard(std::string_view text, std::string_view field) {
  const std::vector<std::string> parts = split(text, '/');
  const auto index = parts.size() == 2 ? parse_integer(parts[0]) : std::nullopt;
  const auto count = parts.size() == 2 ? parse_integer(parts[1]) : std::nullopt;
  if (!index || !count || *count < 1 || *index >= *count || *count > 1000000) {
    QTUNE_INPUT_ERROR(std::string(field) + ": expected i/n with 0 <= i < n, got '" + std::string(text) + "'");
  }
  return Shard{static_cast<int>(*index), static_cast<int>(*count)};
}

EnvironmentLookup process_environment() {
  return [](const char* name) -> std::optional<std::string> {
    const char* value = std::getenv(name);
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

Shard resolve_shard(const std::optional<std::string>& flag, std::optional<int> count_flag, const EnvironmentLookup& environment) {
  if (flag) return parse_shard(*flag, "--shard");
  auto integer_of = [&](const char* name) -> std::optional<std::int64_t> {
    const auto value = environment(name);
    if (!value || trim(*value).empty()) return std::nullopt;
    const auto parsed = parse_integer(trim(*value));
    if (!parsed) QTUNE_INPUT_ERROR(std::string(name) + ": '" + *value + "' is not a non-negative integer");
    return parsed;
  };
  auto make = [](std::int64_t index, std::int64_t count, const std::string& source) {
    if (count < 1 || index < 0 || index >= count) {
      QTUNE_INPUT_ERROR(source + ": shard index " + std::to_string(index) + " is outside 0.." + std::to_string(count - 1));
    }
    return Shard{static_cast<int>(index), static_cast<int>(count)};
  };
  if (const auto task = integer_of("SLURM_ARRAY_TASK_ID")) {
    const auto count = integer_of("SLURM_ARRAY_TASK_COUNT");
    if (!count) QTUNE_INPUT_ERROR("SLURM_ARRAY_TASK_COUNT: not set while SLURM_ARRAY_TASK_ID is");
    // Arrays may start at 1 (--array=1-8): the index counts from the array's first task.
    const std::int64_t first = integer_of("SLURM_ARRAY_TASK_MIN").value_or(0);
    return make(*task - first, *count, "SLURM_ARRAY_TASK_ID");
  }
  if (const auto index = integer_of("JOB_COMPLETION_INDEX")) {
    std::optional<std::int64_t> count;
    if (count_flag) count = *count_flag;
    if (!count) count = integer_of("QTUNE_SHARD_COUNT");
    if (!count) {
      QTUNE_INPUT_ERROR("--shard-count: JOB_COMPLETION_INDEX is set; give the number of completions with --shard-count "
                        "or QTUNE_SHARD_COUNT");
    }
    return make(*index, *count, "JOB_COMPLETION_INDEX");
  }
  if (count_flag && *count_flag != 1) {
    QTUNE_INPUT_ERROR("--shard-count: given without a shard index (--shard, SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX)");
  }
  return Shard{};
}

std::vector<Problem> select_shard(const std::vector<Problem>& problems, const Shard& shard) {
  if (shard.count < 1 || shard.index < 0 || shard.index >= shard.count) {
    QTUNE_INPUT_ERROR("--shard: index " + std::to_string(shard.index) + " is outside 0.." + std::to_string(shard.count - 1));
  }
  // Deal the problems in a pseudo-random but fixed order, so every shard gets a mix of small and large M (which
  // differ in work by orders of magnitude) and shard sizes differ by at most one; each shard keeps the sorted order.
  std::vector<size_t> order(problems.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::vector<std::uint64_t> hashes;
  for (const Problem& problem : problems) {
    std::uint64_t hash = 1469598103934665603ULL;  // FNV-1a: the same on every platform, unlike std::hash
    for (char c : problem_key(problem)) {
      hash ^= static_cast<unsigned char>(c);
      hash *= 1099511628211ULL;
    }
    hashes.push_back(hash);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return hashes[a] < hashes[b]; });
  std::vector<size_t> mine;
  for (size_t position = static_cast<size_t>(shard.index); position < order.size(); position += static_cast<size_t>(shard.count)) {
    mine.push_back(order[position]);
  }
  std::sort(mine.begin(), mine.end());
  std::vector<Problem> selected;
  for (size_t index : mine) selected.push_back(problems[index]);
  return selected;
}

std::vector<Problem> problems_for_family(const KernelFamily& family, const std::vector<const KernelFamily*>& families,
                                         const std::vector<Problem>& problems, int sm, bool split_by_m) {
  std::vector<Problem> selected;
  for (const Problem& problem : problems) {
    if (!split_by_m || auto_tune_covers(family, families, problem, sm)) selected.push_back(problem);
  }
  return selected;
}

std::uint64_t fnv1a(std::string_view text) {
  std::uint64_t hash = 1469598103934665603ULL;
  for (char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ULL;
  }
  return hash;
}

}  // namespace qtune::tune
