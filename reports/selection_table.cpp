#include "reports/selection_table.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <system_error>
#include <tuple>

#include "kernels/error.hpp"
#include "kernels/text_escape.hpp"

namespace qtune::reports {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------------- ranges

std::vector<MRange> compact_ranges(std::vector<BucketWinner> winners) {
  std::sort(winners.begin(), winners.end(), [](const BucketWinner& a, const BucketWinner& b) { return a.m < b.m; });
  std::vector<MRange> ranges;
  for (std::size_t i = 0; i < winners.size(); ++i) {
    const BucketWinner& winner = winners[i];
    if (winner.m < 1) QTUNE_THROW(Error, "winner at M=" + std::to_string(winner.m) + ": M must be positive");
    if (i > 0 && winners[i - 1].m == winner.m) QTUNE_THROW(Error, "two winners for M=" + std::to_string(winner.m));
    if (ranges.empty() || ranges.back().config != winner.config) {
      MRange range;
      range.m_min = ranges.empty() ? 1 : *ranges.back().m_max + 1;
      range.config = winner.config;
      ranges.push_back(std::move(range));
    }
    ranges.back().m_max = winner.m;
    ranges.back().buckets.push_back({winner.m, winner.median_us});
  }
  if (!ranges.empty()) ranges.back().m_max.reset();
  return ranges;
}

const MRange& ShapeRules::range_for(std::int64_t m) const {
  for (const MRange& range : ranges) {
    if (!range.m_max || m <= *range.m_max) return range;
  }
  return ranges.back();
}

// ---------------------------------------------------------------------------------------------------- select

const ShapeRules* SelectionTable::nearest_shape(std::string_view format, std::int64_t n, std::int64_t k,
                                                const ShapeRules* excluded) const {
  const auto found = formats.find(std::string(format));
  if (found == formats.end()) return nullptr;
  const ShapeRules* best = nullptr;
  double best_distance = 0;
  for (const ShapeRules& shape : found->second) {
    if (&shape == excluded) continue;
    const double distance = shape_distance(n, k, shape.n, shape.k);
    if (best == nullptr || distance < best_distance) {
      best = &shape;
      best_distance = distance;
    }
  }
  return best;
}

SelectionTable::Selection SelectionTable::select(std::string_view format, std::int64_t m, std::int64_t n, std::int64_t k) const {
  Selection selection;
  const auto found = formats.find(std::string(format));
  if (found == formats.end()) return selection;
  for (const ShapeRules& shape : found->second) {
    if (shape.n == n && shape.k == k) {
      selection.shape = &shape;
      selection.tuned_shape = true;
      break;
    }
  }
  if (selection.shape == nullptr) {
    const auto method = fallback_methods.find(std::string(format));
    if (method != fallback_methods.end() && method->second == FallbackMethod::Heuristic) return selection;
    selection.shape = nearest_shape(format, n, k);
  }
  if (selection.shape == nullptr) return selection;
  selection.config = &selection.shape->range_for(m).config;
  return selection;
}

const KernelConfig* SelectionTable::select_moe(std::string_view format, int experts, int top_k, std::int64_t n, std::int64_t k,
                                               std::string_view projection, std::string_view layout, std::int64_t tokens) const {
  for (const MoeRules& rules : moe) {
    if (rules.format == format && rules.experts == experts && rules.top_k == top_k && rules.n == n && rules.k == k &&
        rules.projection == projection && rules.layout == layout) {
      for (const MRange& range : rules.ranges) {
        if (range.contains(std::max<std::int64_t>(tokens, 1))) return &range.config;
      }
      return &rules.ranges.back().config;
    }
  }
  return nullptr;
}

std::size_t SelectionTable::shape_count() const {
  std::size_t count = 0;
  for (const auto& [format, shapes] : formats) count += shapes.size();
  return count;
}

std::size_t SelectionTable::range_count() const {
  std::size_t count = 0;
  for (const auto& [format, shapes] : formats)
    for (const ShapeRules& shape : shapes) count += shape.ranges.size();
  return count;
}

// ---------------------------------------------------------------------------------------------------- fallback regret

nlohmann::json FallbackRegret::to_json() const {
  auto optional_number = [](const std::optional<double>& value) { return value ? nlohmann::json(*value) : nlohmann::json(nullptr); };
  nlohmann::json shapes_json = nlohmann::json::array();
  for (const ShapeRegret& shape : per_shape) {
    shapes_json.push_back({{"format", shape.format},
                           {"n", shape.n},
                           {"k", shape.k},
                           {"neighbour_n", shape.neighbour_n},
                           {"neighbour_k", shape.neighbour_k},
                           {"cells", shape.cells},
                           {"geomean_regret", shape.geomean_regret},
                           {"max_regret", shape.max_regret}});
  }
  auto method_json = [&](const MethodRegret& regret) {
    return nlohmann::json{{"cells", regret.cells},
                          {"geomean_regret", optional_number(regret.geomean_regret)},
                          {"max_regret", optional_number(regret.max_regret)}};
  };
  nlohmann::json by_format = nlohmann::json::object();
  for (const auto& [format, regret] : nearest_by_format) by_format[format]["nearest-shape"] = method_json(regret);
  for (const auto& [format, regret] : heuristic_by_format) by_format[format]["heuristic"] = method_json(regret);
  return {{"method", "leave-one-shape-out: each tuned shape answered by the nearest other shape's M ranges; "
                     "regret = time of the chosen config there / best kernel time there - 1"},
          {"shapes", shapes},
          {"cells", cells},
          {"heuristic_cells", heuristic_cells},
          {"skipped_cells", skipped_cells},
          {"geomean_regret", optional_number(geomean_regret)},
          {"max_regret", optional_number(max_regret)},
          {"worst_cell", worst_cell},
          {"per_shape", shapes_json},
          {"by_format", by_format}};
}

std::string_view to_string(FallbackMethod method) {
  return method == FallbackMethod::Heuristic ? "heuristic" : "nearest-shape";
}

// ---------------------------------------------------------------------------------------------------- JSON

nlohmann::json SelectionTable::to_json() const {
  nlohmann::json formats_json = nlohmann::json::object();
  for (const auto& [format, shapes] : formats) {
    nlohmann::json shapes_json = nlohmann::json::array();
    for (const ShapeRules& shape : shapes) {
      nlohmann::json ranges_json = nlohmann::json::array();
      for (const MRange& range : shape.ranges) {
        nlohmann::json buckets = nlohmann::json::array();
        for (const TunedBucket& bucket : range.buckets) buckets.push_back({{"m", bucket.m}, {"median_us", bucket.median_us}});
        ranges_json.push_back({{"m_min", range.m_min},
                               {"m_max", range.m_max ? nlohmann::json(*range.m_max) : nlohmann::json(nullptr)},
                               {"config", range.config.to_string()},
                               {"family", range.config.family},
                               {"params", range.config.to_json()["params"]},
                               {"median_us", range.buckets.empty() ? nlohmann::json(nullptr) : nlohmann::json(range.buckets.front().median_us)},
                               {"buckets", buckets}});
      }
      shapes_json.push_back({{"n", shape.n}, {"k", shape.k}, {"ranges", ranges_json}});
    }
    formats_json[format] = {{"shapes", shapes_json}};
  }
  nlohmann::json methods = nlohmann::json::object();
  for (const auto& [format, shapes] : formats) {
    const auto method = fallback_methods.find(format);
    methods[format] = to_string(method == fallback_methods.end() ? FallbackMethod::NearestShape : method->second);
  }
  nlohmann::json fallback = {
      {"methods", methods},
      {"heuristic", "for a format whose method is \"heuristic\", an untuned (N, K) takes the kernel family's heuristic"},
      {"method", "nearest tuned shape of the same format in (ln N, ln K), then its M ranges"},
      {"distance", "(ln N - ln N')^2 + (ln K - ln K')^2; ties go to the first shape in (N, K) order"},
      {"m_rule", "the smallest tuned M bucket >= M; the largest bucket beyond the last"},
      {"note", "check the chosen config against the family's rules for the new shape; if it fails, use the heuristic"}};
  if (fallback_regret) fallback["held_out_regret"] = fallback_regret->to_json();
  nlohmann::json table = {{"schema", "qtune-selection-table/1"}, {"gpu", gpu}, {"formats", formats_json}, {"fallback", fallback},
                          {"provenance", provenance}};
  if (!moe.empty()) {
    nlohmann::json moe_json = nlohmann::json::array();
    for (const MoeRules& rules : moe) {
      nlohmann::json ranges_json = nlohmann::json::array();
      for (const MRange& range : rules.ranges) {
        nlohmann::json buckets = nlohmann::json::array();
        for (const TunedBucket& bucket : range.buckets) buckets.push_back({{"t", bucket.m}, {"median_us", bucket.median_us}});
        ranges_json.push_back({{"t_min", range.m_min},
                               {"t_max", range.m_max ? nlohmann::json(*range.m_max) : nlohmann::json(nullptr)},
                               {"config", range.config.to_string()},
                               {"family", range.config.family},
                               {"params", range.config.to_json()["params"]},
                               {"median_us", range.buckets.empty() ? nlohmann::json(nullptr) : nlohmann::json(range.buckets.front().median_us)},
                               {"buckets", buckets}});
      }
      moe_json.push_back({{"format", rules.format}, {"experts", rules.experts}, {"top_k", rules.top_k}, {"n", rules.n},
                          {"k", rules.k}, {"projection", rules.projection}, {"layout", rules.layout},
                          {"routing", rules.routing}, {"ranges", ranges_json}});
    }
    table["moe"] = moe_json;
  }
  return table;
}

namespace {

// Field access with errors naming the file and the dotted path of the field.
class JsonReader {
 public:
  explicit JsonReader(std::string_view source) : source_(source) {}
  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    QTUNE_INPUT_ERROR(source_ + ": field '" + path + "': " + what);
  }
  const nlohmann::json& member(const nlohmann::json& object, const std::string& path, const std::string& key) const {
    if (!object.is_object()) fail(path, "expected an object");
    const auto found = object.find(key);
    if (found == object.end()) fail(join(path, key), "missing");
    return *found;
  }
  std::int64_t positive_int(const nlohmann::json& value, const std::string& path) const {
    if (!value.is_number_integer() || value.get<std::int64_t>() < 1) fail(path, "expected a positive integer");
    return value.get<std::int64_t>();
  }
  static std::string join(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

 private:
  std::string source_;
};

// One entry of a "ranges" list: <x>_min and <x>_max (null: unbounded, only the last), following on from `previous` so
// that the list covers every <X> from 1, the family and config, and the tuned buckets keyed by <x>; `x` is "m" for a
// dense shape's M ranges and "t" for a MoE entry's token ranges.
MRange read_range(const JsonReader& reader, const nlohmann::json& range_json, const std::string& range_path,
                  const std::string& x, bool last, const MRange* previous) {
  const std::string upper = x == "m" ? "M" : "T";
  MRange range;
  range.m_min = reader.positive_int(reader.member(range_json, range_path, x + "_min"), range_path + "." + x + "_min");
  const nlohmann::json& max = reader.member(range_json, range_path, x + "_max");
  if (!max.is_null()) range.m_max = reader.positive_int(max, range_path + "." + x + "_max");
  if (last != !range.m_max) {
    reader.fail(range_path + "." + x + "_max", last ? "the last range must be unbounded (null)" : "only the last range may be unbounded");
  }
  const std::int64_t expected_min = previous == nullptr ? 1 : *previous->m_max + 1;
  if (range.m_min != expected_min || (range.m_max && *range.m_max < range.m_min)) {
    reader.fail(range_path, "ranges must be ascending and cover every " + upper + " from 1 (expected " + x + "_min " +
                                std::to_string(expected_min) + ")");
  }
  const nlohmann::json& family = reader.member(range_json, range_path, "family");
  if (!family.is_string()) reader.fail(range_path + ".family", "expected a string");
  const nlohmann::json& config = reader.member(range_json, range_path, "config");
  if (!config.is_string()) reader.fail(range_path + ".config", "expected a string");
  try {
    range.config = KernelConfig::parse(config.get<std::string>(), family.get<std::string>());
  } catch (const InputError& error) {
    reader.fail(range_path + ".config", error.what());
  }
  if (const auto buckets = range_json.find("buckets"); buckets != range_json.end()) {
    if (!buckets->is_array()) reader.fail(range_path + ".buckets", "expected an array");
    for (std::size_t b = 0; b < buckets->size(); ++b) {
      const std::string bucket_path = range_path + ".buckets[" + std::to_string(b) + "]";
      const nlohmann::json& median = reader.member((*buckets)[b], bucket_path, "median_us");
      if (!median.is_number() || !(median.get<double>() > 0)) reader.fail(bucket_path + ".median_us", "expected a positive number");
      range.buckets.push_back({reader.positive_int(reader.member((*buckets)[b], bucket_path, x), bucket_path + "." + x), median.get<double>()});
    }
  }
  return range;
}


}  // namespace

SelectionTable SelectionTable::from_json(const nlohmann::json& json, std::string_view source) {
  const JsonReader reader(source);
  SelectionTable table;
  const nlohmann::json& schema = reader.member(json, "", "schema");
  if (schema != "qtune-selection-table/1") reader.fail("schema", "expected \"qtune-selection-table/1\"");
  const nlohmann::json& gpu = reader.member(json, "", "gpu");
  if (!gpu.is_string()) reader.fail("gpu", "expected a string");
  table.gpu = gpu.get<std::string>();
  const nlohmann::json& formats_json = reader.member(json, "", "formats");
  if (!formats_json.is_object()) reader.fail("formats", "expected an object");
  for (const auto& [format, format_json] : formats_json.items()) {
    const std::string format_path = "formats." + format;
    const nlohmann::json& shapes_json = reader.member(format_json, format_path, "shapes");
    if (!shapes_json.is_array() || shapes_json.empty()) reader.fail(format_path + ".shapes", "expected a non-empty array");
    std::vector<ShapeRules> shapes;
    for (std::size_t s = 0; s < shapes_json.size(); ++s) {
      const std::string shape_path = format_path + ".shapes[" + std::to_string(s) + "]";
      ShapeRules shape;
      shape.n = reader.positive_int(reader.member(shapes_json[s], shape_path, "n"), shape_path + ".n");
      shape.k = reader.positive_int(reader.member(shapes_json[s], shape_path, "k"), shape_path + ".k");
      const nlohmann::json& ranges_json = reader.member(shapes_json[s], shape_path, "ranges");
      if (!ranges_json.is_array() || ranges_json.empty()) reader.fail(shape_path + ".ranges", "expected a non-empty array");
      for (std::size_t r = 0; r < ranges_json.size(); ++r) {
        const std::string range_path = shape_path + ".ranges[" + std::to_string(r) + "]";
        const nlohmann::json& range_json = ranges_json[r];
        MRange range = read_range(reader, range_json, range_path, "m", r + 1 == ranges_json.size(),
                                  shape.ranges.empty() ? nullptr : &shape.ranges.back());
        shape.ranges.push_back(std::move(range));
      }
      if (!shapes.empty() && std::tie(shapes.back().n, shapes.back().k) >= std::tie(shape.n, shape.k)) {
        reader.fail(shape_path, "shapes must be sorted by (n, k) without repeats");
      }
      shapes.push_back(std::move(shape));
    }
    table.formats.emplace(format, std::move(shapes));
  }
  if (const auto moe = json.find("moe"); moe != json.end()) {
    if (!moe->is_array()) reader.fail("moe", "expected an array");
    for (std::size_t i = 0; i < moe->size(); ++i) {
      const std::string path = "moe[" + std::to_string(i) + "]";
      const nlohmann::json& entry = (*moe)[i];
      const auto text = [&](const char* key) {
        const nlohmann::json& value = reader.member(entry, path, key);
        if (!value.is_string() || value.get<std::string>().empty()) reader.fail(path + "." + key, "expected a non-empty string");
        return value.get<std::string>();
      };
      const auto count = [&](const char* key) { return reader.positive_int(reader.member(entry, path, key), path + "." + key); };
      MoeRules rules;
      rules.format = text("format");
      rules.experts = static_cast<int>(count("experts"));
      rules.top_k = static_cast<int>(count("top_k"));
      if (rules.top_k > rules.experts) reader.fail(path + ".top_k", "more than experts (" + std::to_string(rules.experts) + ")");
      rules.n = count("n");
      rules.k = count("k");
      rules.projection = text("projection");
      rules.layout = text("layout");
      rules.routing = text("routing");
      const nlohmann::json& ranges_json = reader.member(entry, path, "ranges");
      if (!ranges_json.is_array() || ranges_json.empty()) reader.fail(path + ".ranges", "expected a non-empty array");
      for (std::size_t r = 0; r < ranges_json.size(); ++r) {
        const std::string range_path = path + ".ranges[" + std::to_string(r) + "]";
        const nlohmann::json& range_json = ranges_json[r];
        MRange range = read_range(reader, range_json, range_path, "t", r + 1 == ranges_json.size(),
                                  rules.ranges.empty() ? nullptr : &rules.ranges.back());
        rules.ranges.push_back(std::move(range));
      }
      if (!table.moe.empty() && table.moe.back().key() >= rules.key()) reader.fail(path, "MoE entries must be sorted by key without repeats");
      table.moe.push_back(std::move(rules));
    }
  }
  if (const auto provenance = json.find("provenance"); provenance != json.end()) table.provenance = *provenance;
  // Tables written before per-format methods existed have none: every format falls back to the nearest shape.
  if (const auto fallback = json.find("fallback"); fallback != json.end() && fallback->contains("methods")) {
    const nlohmann::json& methods = fallback->at("methods");
    if (!methods.is_object()) reader.fail("fallback.methods", "expected an object");
    for (const auto& [format, method] : methods.items()) {
      const std::string path = "fallback.methods." + format;
      if (table.formats.count(format) == 0) reader.fail(path, "names a format the table does not have");
      if (method == "heuristic") {
        table.fallback_methods[format] = FallbackMethod::Heuristic;
      } else if (method == "nearest-shape") {
        table.fallback_methods[format] = FallbackMethod::NearestShape;
      } else {
        reader.fail(path, "expected \"nearest-shape\" or \"heuristic\"");
      }
    }
  }
  return table;
}

// ---------------------------------------------------------------------------------------------------- C++ header

// The text of reports/selection_table_distance.hpp (generated by scripts/embed_text.cmake).
std::string_view shape_distance_header_text();

namespace {

// natural_log and shape_distance as selection_table_distance.hpp defines them: its text between the marker lines.
std::string_view shared_header_math() {
  constexpr std::string_view kBegin = "// ---- begin of the text generated headers share\n";
  constexpr std::string_view kEnd = "// ---- end of the text generated headers share\n";
  const std::string_view text = shape_distance_header_text();
  const size_t begin = text.find(kBegin);
  const size_t end = text.find(kEnd);
  if (begin == std::string_view::npos || end == std::string_view::npos || end < begin) {
    QTUNE_THROW(Error, "reports/selection_table_distance.hpp: the marker lines around the shared math are missing");
  }
  return text.substr(begin + kBegin.size(), end - begin - kBegin.size());
}

bool identifier_syntax(std::string_view name) {
  if (name.empty() || !(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

// A kernel parameter name usable as a member of the header's Config.
bool is_identifier(const std::string& name) {
  static const std::set<std::string> reserved = {"family", "text", "int", "class", "struct", "auto", "const", "default",
                                                 "delete", "new", "this", "case", "do", "for", "if", "else", "while",
                                                 "return", "switch", "template", "namespace", "register", "union", "long",
                                                 "short", "signed", "unsigned", "char", "double", "float", "bool", "void"};
  return identifier_syntax(name) && reserved.count(name) == 0;
}

// A provenance field as one comment-safe text (a table read from JSON may hold anything there).
std::string provenance_comment(const nlohmann::json& run, const char* key) {
  const auto found = run.find(key);
  if (found == run.end()) return "";
  return cpp_comment_text(found->is_string() ? found->get<std::string>() : json_text(*found));
}

// Parameter names of every config in the table: each family's declared order, families by name.
std::vector<std::string> parameter_columns(const std::set<KernelConfig>& configs) {
  std::map<std::string, std::vector<std::string>> by_family;
  for (const KernelConfig& config : configs) {
    std::vector<std::string>& names = by_family[config.family];
    if (!names.empty()) continue;
    if (const KernelFamily* family = family_named(config.family)) {
      for (const ParameterDomain& domain : family->parameter_space()) names.push_back(domain.name);
    }
  }
  for (const KernelConfig& config : configs) {
    std::vector<std::string>& names = by_family[config.family];
    for (const auto& [name, value] : config.params) {
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
  }
  std::vector<std::string> columns;
  for (const auto& [family, names] : by_family) {
    for (const std::string& name : names) {
      if (std::find(columns.begin(), columns.end(), name) != columns.end()) continue;
      if (!is_identifier(name)) QTUNE_THROW(Error, "kernel parameter '" + name + "' cannot be a C++ member name");
      columns.push_back(name);
    }
  }
  return columns;
}

}  // namespace

void check_cpp_namespace(std::string_view name) {
  // Keywords and alternative tokens of C++23, and the macros of the standard headers a lower-case name could hit.
  static const std::set<std::string, std::less<>> refused = {
      "alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor", "bool", "break", "case", "catch", "char",
      "char8_t", "char16_t", "char32_t", "class", "compl", "concept", "const", "consteval", "constexpr", "constinit",
      "const_cast", "continue", "co_await", "co_return", "co_yield", "decltype", "default", "delete", "do", "double",
      "dynamic_cast", "else", "enum", "explicit", "export", "extern", "false", "float", "for", "friend", "goto", "if",
      "inline", "int", "long", "mutable", "namespace", "new", "noexcept", "not", "not_eq", "nullptr", "operator", "or",
      "or_eq", "private", "protected", "public", "register", "reinterpret_cast", "requires", "return", "short", "signed",
      "sizeof", "static", "static_assert", "static_cast", "struct", "switch", "template", "this", "thread_local",
      "throw", "true", "try", "typedef", "typeid", "typename", "union", "unsigned", "using", "virtual", "void",
      "volatile", "wchar_t", "while", "xor", "xor_eq", "final", "override", "import", "module",
      "assert", "errno", "offsetof", "setjmp", "va_arg", "va_copy", "va_end", "va_start", "stdin", "stdout", "stderr",
      "linux", "unix", "major", "minor", "makedev", "std"};
  const std::string shown = quote_input(name);
  if (!identifier_syntax(name)) QTUNE_INPUT_ERROR("--namespace: " + shown + " is not a C++ identifier");
  if (refused.count(name) > 0) QTUNE_INPUT_ERROR("--namespace: " + shown + " is a C++ keyword or a standard name");
  if ((name[0] == '_' && (name.size() == 1 || std::isupper(static_cast<unsigned char>(name[1])))) || name.find("__") != std::string_view::npos) {
    QTUNE_INPUT_ERROR("--namespace: " + shown + " is reserved for the implementation ('_' + capital, or '__')");
  }
  if (std::none_of(name.begin(), name.end(), [](char c) { return std::islower(static_cast<unsigned char>(c)); })) {
    QTUNE_INPUT_ERROR("--namespace: " + shown + " is spelled like a macro (no lower-case letter); a macro of that name would replace it");
  }
}

std::string SelectionTable::to_cpp_header(std::string_view namespace_name) const {
  check_cpp_namespace(namespace_name);
  std::set<KernelConfig> config_set;
  for (const auto& [format, shapes] : formats)
    for (const ShapeRules& shape : shapes)
      for (const MRange& range : shape.ranges) config_set.insert(range.config);
  for (const MoeRules& rules : moe)
    for (const MRange& range : rules.ranges) config_set.insert(range.config);
  const std::vector<KernelConfig> configs(config_set.begin(), config_set.end());
  const std::vector<std::string> columns = parameter_columns(config_set);
  auto config_index = [&](const KernelConfig& config) {
    return std::lower_bound(configs.begin(), configs.end(), config) - configs.begin();
  };

  std::ostringstream out;
  out << "// Generated by `qtune export` for GPU \"" << cpp_comment_text(gpu) << "\". Do not edit: re-export from the database instead.\n"
      << "// Self-contained: needs only <array>, <cstdint> and <string_view> (C++17 or later).\n"
      << "//\n"
      << "// select(format, m, n, k) returns the tuned kernel configuration for a GEMM C[M,N] = A[M,K] * W[N,K]^T, or\n"
      << "// nullptr when the table has no shape of `format` (the canonical spec text `qtune formats` prints).\n"
      << "// M rule: the winner of the smallest tuned M bucket >= M (the largest bucket's beyond the last).\n"
      << "// A shape (N, K) that was not tuned takes, per format (kNearestShapeFallback), the rules of the tuned shape\n"
      << "// of the same format nearest in (ln N, ln K), or nothing (nullptr: run the family's heuristic); check a\n"
      << "// nearest-shape config against the kernel family's rules and fall back to the heuristic when it fails.\n";
  if (provenance.contains("runs")) {
    out << "//\n// Winners from " << provenance["runs"].size() << " run(s):\n";
    for (const auto& run : provenance["runs"]) {
      out << "//   " << provenance_comment(run, "uuid") << " started " << provenance_comment(run, "started_at") << ", qtune "
          << provenance_comment(run, "tool_version") << " (" << provenance_comment(run, "git_sha") << "), "
          << provenance_comment(run, "gpu_name") << "\n";
    }
  }
  out << "#pragma once\n\n#include <array>\n#include <cstdint>\n#include <string_view>\n\n"
      << "namespace " << namespace_name << " {\n\n"
      << "// One kernel configuration: its family, each tuning parameter (0 where the family has no such parameter)\n"
      << "// and the canonical text form \"name=value,...\".\n"
      << "struct Config {\n  std::string_view family;\n";
  for (const std::string& column : columns) out << "  int " << column << ";\n";
  out << "  std::string_view text;\n};\n\n"
      << "// The configs of M in [m_min, m_max] for one shape.\n"
      << "struct Range {\n  std::int64_t m_min;\n  std::int64_t m_max;  // kNoUpperEnd: every larger M\n  int config;  // index into kConfigs\n};\n\n"
      << "struct Shape {\n  int format;  // index into kFormats\n  std::int64_t n;\n  std::int64_t k;\n  int first_range;  // index into kRanges\n  int range_count;\n};\n\n"
      << "inline constexpr std::int64_t kNoUpperEnd = INT64_MAX;\n"
      << "inline constexpr std::string_view kGpu = " << cpp_string_literal(gpu) << ";\n\n";

  out << "inline constexpr std::array<std::string_view, " << formats.size() << "> kFormats{{\n";
  for (const auto& [format, shapes] : formats) out << "    " << cpp_string_literal(format) << ",\n";
  out << "}};\n\n";
  out << "// Per format: an untuned (N, K) takes the nearest tuned shape's rules (true) or the family heuristic (false:\n"
      << "// select() returns nullptr and the caller runs its heuristic).\n"
      << "inline constexpr std::array<bool, " << formats.size() << "> kNearestShapeFallback{{\n";
  for (const auto& [format, shapes] : formats) {
    const auto method = fallback_methods.find(format);
    const bool nearest = method == fallback_methods.end() || method->second == FallbackMethod::NearestShape;
    out << "    " << (nearest ? "true" : "false") << ",  // " << cpp_comment_text(format) << "\n";
  }
  out << "}};\n\n";

  out << "inline constexpr std::array<Config, " << configs.size() << "> kConfigs{{\n";
  for (const KernelConfig& config : configs) {
    out << "    {" << cpp_string_literal(config.family);
    for (const std::string& column : columns) {
      const auto found = config.params.find(column);
      out << ", " << (found == config.params.end() ? 0 : found->second);
    }
    out << ", " << cpp_string_literal(config.to_string()) << "},\n";
  }
  out << "}};\n\n";

  std::ostringstream ranges_out;
  std::ostringstream shapes_out;
  int range_index = 0;
  int format_index = 0;
  for (const auto& [format, shapes] : formats) {
    for (const ShapeRules& shape : shapes) {
      shapes_out << "    {" << format_index << ", " << shape.n << ", " << shape.k << ", " << range_index << ", " << shape.ranges.size() << "},\n";
      for (const MRange& range : shape.ranges) {
        ranges_out << "    {" << range.m_min << ", " << (range.m_max ? std::to_string(*range.m_max) : "kNoUpperEnd") << ", "
                   << config_index(range.config) << "},  // " << cpp_comment_text(format) << " n=" << shape.n << " k=" << shape.k << "\n";
        ++range_index;
      }
    }
    ++format_index;
  }
  out << "inline constexpr std::array<Range, " << range_index << "> kRanges{{\n" << ranges_out.str() << "}};\n\n";
  out << "inline constexpr std::array<Shape, " << shape_count() << "> kShapes{{\n" << shapes_out.str() << "}};\n\n";

  // MoE entries only when the table has some, so a table without them writes exactly what it wrote before.
  if (!moe.empty()) {
    out << "// MoE GEMMs (docs/moe.md): per (format, experts, top_k, n, k, projection, layout) the token ranges of its tuned\n"
        << "// T buckets (Range's m_min and m_max are token counts), and the routing the winners were tuned with.\n"
        << "struct MoeEntry {\n  std::string_view format;\n  int experts;\n  int top_k;\n  std::int64_t n;\n  std::int64_t k;\n"
        << "  std::string_view projection;  // \"gate-up\" or \"down\"\n"
        << "  std::string_view layout;      // \"token-indexed\", \"grouped-contiguous\" or \"grouped-masked\"\n"
        << "  std::string_view routing;\n  int first_range;  // index into kMoeRanges\n  int range_count;\n};\n\n";
    std::ostringstream moe_ranges_out;
    std::ostringstream entries_out;
    int moe_range_index = 0;
    for (const MoeRules& rules : moe) {
      entries_out << "    {" << cpp_string_literal(rules.format) << ", " << rules.experts << ", " << rules.top_k << ", " << rules.n << ", "
                  << rules.k << ", " << cpp_string_literal(rules.projection) << ", " << cpp_string_literal(rules.layout) << ", "
                  << cpp_string_literal(rules.routing) << ", " << moe_range_index << ", " << rules.ranges.size() << "},\n";
      for (const MRange& range : rules.ranges) {
        moe_ranges_out << "    {" << range.m_min << ", " << (range.m_max ? std::to_string(*range.m_max) : "kNoUpperEnd") << ", "
                       << config_index(range.config) << "},  // " << cpp_comment_text(rules.format) << " E=" << rules.experts
                       << " top_k=" << rules.top_k << " n=" << rules.n << " k=" << rules.k << " " << cpp_comment_text(rules.projection)
                       << "\n";
        ++moe_range_index;
      }
    }
    out << "inline constexpr std::array<Range, " << moe_range_index << "> kMoeRanges{{\n" << moe_ranges_out.str() << "}};\n\n";
    out << "inline constexpr std::array<MoeEntry, " << moe.size() << "> kMoeEntries{{\n" << entries_out.str() << "}};\n\n";
  }

  out << "namespace detail {\n\n" << shared_header_math() << "\n";
  out << R"(constexpr int format_index(std::string_view format) {
  for (std::size_t i = 0; i < kFormats.size(); ++i) {
    if (kFormats[i] == format) return static_cast<int>(i);
  }
  return -1;
}

// The tuned shape whose rules answer (n, k): the shape itself, else the nearest one when the format falls back to
// it; nullptr for an unknown format or a heuristic fallback.
constexpr const Shape* rules_for(std::string_view format, std::int64_t n, std::int64_t k) {
  const int wanted = format_index(format);
  if (wanted < 0) return nullptr;
  for (const Shape& shape : kShapes) {
    if (shape.format == wanted && shape.n == n && shape.k == k) return &shape;
  }
  if (!kNearestShapeFallback[static_cast<std::size_t>(wanted)]) return nullptr;
  const Shape* best = nullptr;
  double best_distance = 0.0;
  for (const Shape& shape : kShapes) {
    if (shape.format != wanted) continue;
    const double distance = shape_distance(n, k, shape.n, shape.k);
    if (best == nullptr || distance < best_distance) {
      best = &shape;
      best_distance = distance;
    }
  }
  return best;
}

}  // namespace detail

// Whether (format, n, k) itself was tuned (otherwise select() answers with the nearest tuned shape's rules).
constexpr bool is_tuned_shape(std::string_view format, std::int64_t n, std::int64_t k) {
  const Shape* shape = detail::rules_for(format, n, k);
  return shape != nullptr && shape->n == n && shape->k == k;
}

// The configuration for the GEMM (format, m, n, k); nullptr when the table has no shape of `format`, or when (n, k)
// was not tuned and the format falls back to the heuristic: run the kernel family's heuristic then.
constexpr const Config* select(std::string_view format, std::int64_t m, std::int64_t n, std::int64_t k) {
  const Shape* shape = detail::rules_for(format, n, k);
  if (shape == nullptr) return nullptr;
  const int last = shape->first_range + shape->range_count - 1;
  for (int i = shape->first_range; i < last; ++i) {
    if (m <= kRanges[static_cast<std::size_t>(i)].m_max) return &kConfigs[static_cast<std::size_t>(kRanges[static_cast<std::size_t>(i)].config)];
  }
  return &kConfigs[static_cast<std::size_t>(kRanges[static_cast<std::size_t>(last)].config)];
}

)";
  if (!moe.empty()) {
    out << R"(// The configuration of a MoE GEMM with `tokens` tokens: the token range holding it (the smallest tuned T bucket >= T,
// the largest beyond) of the entry with exactly this key; nullptr when the table has none (no fallback: run the
// kernel family's heuristic). Like SelectionTable::select_moe and libqtune_runtime's tuned choice. The config's family
// names the MoE kernel that won (mma, wgmma or tma); libqtune_runtime runs mma's, and wgmma's on sm_90.
constexpr const Config* select_moe(std::string_view format, int experts, int top_k, std::int64_t n, std::int64_t k,
                                   std::string_view projection, std::string_view layout, std::int64_t tokens) {
  for (const MoeEntry& entry : kMoeEntries) {
    if (entry.format != format || entry.experts != experts || entry.top_k != top_k || entry.n != n || entry.k != k ||
        entry.projection != projection || entry.layout != layout) {
      continue;
    }
    const int last = entry.first_range + entry.range_count - 1;
    for (int i = entry.first_range; i < last; ++i) {
      if (tokens <= kMoeRanges[static_cast<std::size_t>(i)].m_max) return &kConfigs[static_cast<std::size_t>(kMoeRanges[static_cast<std::size_t>(i)].config)];
    }
    return &kConfigs[static_cast<std::size_t>(kMoeRanges[static_cast<std::size_t>(last)].config)];
  }
  return nullptr;
}

)";
  }
  out << "}  // namespace " << namespace_name << "\n";
  return out.str();
}

// ---------------------------------------------------------------------------------------------------- files

namespace {

fs::path temporary_beside(const fs::path& path) {
  fs::path temporary = path;
  temporary += ".tmp-" + std::to_string(::getpid());
  return temporary;
}

void write_temporary(const fs::path& temporary, const std::string& text) {
  std::ofstream stream(temporary, std::ios::binary | std::ios::trunc);
  if (stream) {
    stream << text;
    stream.flush();
  }
  if (!stream) QTUNE_LIBRARY_ERROR("system", "cannot write " + temporary.string());
}

}  // namespace

void write_file_atomically(const fs::path& path, const std::string& text) { write_files_atomically({{path, text}}); }

void write_files_atomically(const std::vector<FileText>& files) {
  for (const FileText& file : files) {  // a rename onto a folder would fail after earlier files were renamed
    std::error_code error;
    if (fs::is_directory(file.path, error)) QTUNE_LIBRARY_ERROR("system", "cannot write " + file.path.string() + ": it is a directory");
  }
  std::vector<fs::path> temporaries;
  auto remove_temporaries = [&] {
    std::error_code ignored;
    for (const fs::path& temporary : temporaries) fs::remove(temporary, ignored);
  };
  try {
    for (const FileText& file : files) {
      temporaries.push_back(temporary_beside(file.path));
      write_temporary(temporaries.back(), file.text);
    }
  } catch (...) {
    remove_temporaries();
    throw;
  }
  for (std::size_t i = 0; i < files.size(); ++i) {
    std::error_code error;
    fs::rename(temporaries[i], files[i].path, error);
    if (error) {
      remove_temporaries();
      QTUNE_LIBRARY_ERROR("system", "cannot rename " + temporaries[i].string() + " to " + files[i].path.string() + ": " + error.message());
    }
  }
}

}  // namespace qtune::reports
