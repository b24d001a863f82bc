#include "reports/external_import.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "kernels/error.hpp"
#include "kernels/format.hpp"
#include "kernels/input_file.hpp"
#include "kernels/text_escape.hpp"
#include "reports/tuning_data.hpp"

namespace qtune::reports {

namespace fs = std::filesystem;

std::string_view to_string(ExternalFileKind kind) {
  switch (kind) {
    case ExternalFileKind::Humming: return "humming";
    case ExternalFileKind::JsonList: return "json";
    case ExternalFileKind::Csv: return "csv";
  }
  return "?";
}

namespace {

[[noreturn]] void field_error(const fs::path& file, const std::string& field, const std::string& what) {
  QTUNE_INPUT_ERROR(file.string() + ": field " + quote_input(field) + ": " + what);  // a field name may come from the file
}

std::string notes_text(nlohmann::json notes) { return notes.dump(); }  // keys sorted: the same row gives the same text

// A GEMM time that could be real: positive, finite and at most an hour (larger is a unit mistake or garbage, and
// overflows to infinity once converted).
constexpr double kLongestTimeUs = 3600e6;

std::optional<std::string> time_problem(double time_us) {
  if (std::isnan(time_us) || time_us <= 0) return "not a positive number";
  if (time_us > kLongestTimeUs) return "longer than an hour (the most a GEMM time may be)";  // infinity too
  return std::nullopt;
}

// The shape check every import path shares: a quantized format's groups and blocks must divide N and K.
std::optional<std::string> shape_problem(const std::string& format, std::int64_t n, std::int64_t k) {
  if (is_dense_format(format)) return std::nullopt;
  try {
    FormatSpec::parse(format).validate_shape(n, k);
  } catch (const InputError& error) {
    return "N=" + std::to_string(n) + ", K=" + std::to_string(k) + ": " + error.what();
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------------- Humming

// Humming's dtype names -> qtune element type names.
std::optional<std::string> humming_element(const std::string& dtype) {
  static const std::map<std::string, std::string> names = {
      {"float16", "f16"},     {"bfloat16", "bf16"},    {"float8e4m3", "e4m3"}, {"float8e5m2", "e5m2"},
      {"float4e2m1", "e2m1"}, {"float6e3m2", "e3m2"},  {"float6e2m3", "e2m3"}, {"float32", "f32"}};
  if (const auto found = names.find(dtype); found != names.end()) return found->second;
  for (const std::string prefix : {"int", "uint"}) {
    if (dtype.rfind(prefix, 0) == 0 && dtype.size() == prefix.size() + 1 && dtype.back() >= '1' && dtype.back() <= '8') return dtype;
  }
  return std::nullopt;
}

int element_bits(const std::string& element) {
  if (element == "f16" || element == "bf16") return 16;
  if (element.rfind("int", 0) == 0 || element.rfind("uint", 0) == 0) return element.back() - '0';
  if (element.size() == 4 && element[0] == 'e' && element[2] == 'm') return 1 + (element[1] - '0') + (element[3] - '0');
  return 0;
}

// "h200_dense_n8192_k8192_g0_marlin_w4a16_int4_float16.json" -> "marlin": the token after the group-size token.
std::string humming_kernel_name(const fs::path& file) {
  std::vector<std::string> tokens;
  std::stringstream stem(file.stem().string());
  for (std::string token; std::getline(stem, token, '_');) tokens.push_back(token);
  for (std::size_t i = 1; i + 1 < tokens.size(); ++i) {
    const std::string& token = tokens[i];
    const bool group_token = token.size() > 1 && token[0] == 'g' &&
                             token.find_first_not_of("0123456789x", 1) == std::string::npos;
    if (group_token && tokens[i - 1].size() > 1 && tokens[i - 1][0] == 'k') return tokens[i + 1];
  }
  return "humming-bench";
}

class HummingProblem {
 public:
  HummingProblem(const nlohmann::json& problem, fs::path file) : problem_(problem), file_(std::move(file)) {
    if (!problem_.is_object()) field_error(file_, "problem", "expected an object");
  }
  bool has(const std::string& key) const { return problem_.contains(key) && !problem_[key].is_null(); }
  std::int64_t positive_int(const std::string& key) const {
    if (!has(key) || !problem_[key].is_number_integer() || problem_[key].get<std::int64_t>() < 1) {
      field_error(file_, "problem." + key, "expected a positive integer");
    }
    return problem_[key].get<std::int64_t>();
  }
  std::int64_t non_negative_int(const std::string& key) const {
    if (!has(key)) return 0;
    if (!problem_[key].is_number_integer() || problem_[key].get<std::int64_t>() < 0) {
      field_error(file_, "problem." + key, "expected a non-negative integer");
    }
    return problem_[key].get<std::int64_t>();
  }
  bool flag(const std::string& key) const {
    if (!has(key)) return false;
    if (!problem_[key].is_boolean()) field_error(file_, "problem." + key, "expected true or false");
    return problem_[key].get<bool>();
  }
  std::string element(const std::string& key) const {
    if (!has(key) || !problem_[key].is_string()) field_error(file_, "problem." + key, "missing or not a string");
    const std::string dtype = problem_[key].get<std::string>();
    const auto element = humming_element(dtype);
    if (!element) field_error(file_, "problem." + key, "unknown dtype " + quote_input(dtype));
    return *element;
  }

 private:
  const nlohmann::json& problem_;
  fs::path file_;
};

// The qtune format a Humming problem describes, as canonical text.
std::string humming_format(const HummingProblem& problem, const fs::path& file) {
  if (problem.has("num_experts") && problem.non_negative_int("num_experts") > 1) {
    field_error(file, "problem.num_experts",
                "a MoE benchmark (" + std::to_string(problem.non_negative_int("num_experts")) +
                    " experts) is not a dense GEMM; qtune imports dense GEMM results only");
  }
  if (problem.has("dtype")) {  // torch's dense GEMM: no quantization
    const std::string element = problem.element("dtype");
    if (element != "f16" && element != "bf16") field_error(file, "problem.dtype", "expected float16 or bfloat16 for a dense GEMM");
    return element;
  }
  std::string weight = problem.element("b_dtype");
  const std::string activation = problem.element("a_dtype");
  const int weight_bits = element_bits(weight);
  const int activation_bits = element_bits(activation);
  if (weight_bits == 16) field_error(file, "problem.b_dtype", "16-bit weights are not a quantized format");
  const bool integer_zero_point = problem.flag("zero_point") && !problem.flag("use_fp_zero_point");
  const bool float_zero_point = problem.flag("zero_point") && problem.flag("use_fp_zero_point");
  if (weight.rfind("uint", 0) == 0 && !problem.flag("zero_point")) {
    weight = weight.substr(1);  // Humming stores symmetric weights as uintB with an implicit offset: qtune's intB
  }
  const std::int64_t group = problem.non_negative_int("weight_scale_group_size");
  const std::int64_t input_group = problem.non_negative_int("input_scale_group_size");
  std::string spec = "w" + std::to_string(weight_bits) + "a" + std::to_string(activation_bits) + "-" + weight + "-" +
                     (group == 0 ? std::string("ch") : "g" + std::to_string(group));
  if (integer_zero_point) spec += "-zp";
  if (float_zero_point) spec += "-fzp";
  spec += "-" + activation;
  std::vector<std::string> options;
  if (problem.has("bs_dtype")) options.push_back("scale=" + problem.element("bs_dtype"));
  if (activation_bits < 16) options.push_back("act-scale=" + (input_group == 0 ? std::string("token") : "g" + std::to_string(input_group)));
  if (problem.has("c_dtype")) options.push_back("out=" + problem.element("c_dtype"));
  for (std::size_t i = 0; i < options.size(); ++i) spec += (i == 0 ? ":" : ",") + options[i];
  try {
    return FormatSpec::parse(spec).to_string();
  } catch (const InputError& error) {
    field_error(file, "problem", "no qtune format matches (" + spec + ": " + error.what() + "); pass --format SPEC");
  }
}

ExternalFile read_humming(const nlohmann::json& json, const fs::path& file, const ImportOptions& options) {
  ExternalFile result{file, ExternalFileKind::Humming, {}};
  const HummingProblem problem(json["problem"], file);
  const std::int64_t n = problem.positive_int("shape_n");
  const std::int64_t k = problem.positive_int("shape_k");
  const std::string derived_format = humming_format(problem, file);
  const std::string format = options.format ? canonical_format_text(*options.format, "--format") : derived_format;
  if (const auto problem_text = shape_problem(format, n, k)) field_error(file, "problem", *problem_text);

  std::string gpu;
  if (options.gpu) {
    gpu = gpu_key_for(*options.gpu);
  } else {
    const auto device = json.find("device");
    if (device == json.end() || !device->is_object() || !device->contains("device_name") || !(*device)["device_name"].is_string()) {
      field_error(file, "device.device_name", "missing (or pass --gpu NAME)");
    }
    gpu = gpu_key_for((*device)["device_name"].get<std::string>());
  }
  const std::string label = options.label ? *options.label : humming_kernel_name(file);

  nlohmann::json notes = {{"file", file.filename().string()},
                          {"timing", std::string(kTimingCudaEventMean)},
                          {"timing_detail", "Humming benchmark: triton do_bench mean of CUDA-event times (warmup 100 ms, rep 1000 ms), "
                                            "L2 flushed before each call, launch overhead included; not CUPTI kernel time"},
                          {"problem", json["problem"]}};
  if (format != derived_format) notes["format_in_file"] = derived_format;
  if (json.contains("device")) notes["device"] = json["device"];
  if (json.contains("packages")) notes["packages"] = json["packages"];
  const std::string notes_string = notes_text(notes);

  const nlohmann::json& results = json["result"];
  if (!results.is_object() || results.empty()) field_error(file, "result", "expected an object {\"<M>\": {\"time\": ms}}");
  for (const auto& [m_text, entry] : results.items()) {
    std::int64_t m = 0;
    const auto [end, error] = std::from_chars(m_text.data(), m_text.data() + m_text.size(), m);
    if (error != std::errc() || end != m_text.data() + m_text.size() || m < 1) field_error(file, "result." + m_text, "the key must be a positive M");
    if (!entry.is_object() || !entry.contains("time")) field_error(file, "result." + m_text + ".time", "missing");
    const nlohmann::json& time = entry["time"];
    if (!time.is_number()) field_error(file, "result." + m_text + ".time", "expected a number of milliseconds");
    const double time_us = time.get<double>() * 1000.0;
    if (const auto problem_text = time_problem(time_us)) {
      field_error(file, "result." + m_text + ".time", time.dump() + " ms is " + *problem_text);
    }
    result.rows.push_back({db::Problem{format, m, n, k}, "humming", label, gpu, time_us, notes_string});
  }
  return result;
}

// ---------------------------------------------------------------------------------------------------- generic rows

const std::set<std::string>& known_columns() {
  static const std::set<std::string> columns = {"format", "m", "n", "k", "time_us", "label", "gpu", "source", "timing", "notes"};
  return columns;
}

// One generic row from text cells (CSV) or JSON values turned into text; `where` prefixes errors ("line 3: ").
ExternalRow generic_row(const std::map<std::string, std::string>& cells, const fs::path& file, const std::string& where,
                        const ImportOptions& options) {
  auto fail = [&](const std::string& field, const std::string& what) {
    QTUNE_INPUT_ERROR(file.string() + ": " + where + "field " + quote_input(field) + ": " + what);
  };
  auto cell = [&](const std::string& name) -> std::optional<std::string> {
    const auto found = cells.find(name);
    if (found == cells.end() || found->second.empty()) return std::nullopt;
    return found->second;
  };
  auto positive_int = [&](const std::string& name) {
    const auto text = cell(name);
    if (!text) fail(name, "missing");
    std::int64_t value = 0;
    const auto [end, error] = std::from_chars(text->data(), text->data() + text->size(), value);
    if (error != std::errc() || end != text->data() + text->size() || value < 1) fail(name, quote_input(*text) + " is not a positive integer");
    return value;
  };
  for (const auto& [name, value] : cells) {
    if (!is_valid_utf8(value)) fail(name, "not valid UTF-8: " + quote_input(value));
  }
  ExternalRow row;
  const auto format = cell("format");
  if (!format) fail("format", "missing");
  try {
    row.problem.format = canonical_format_text(*format, "format");
  } catch (const InputError& error) {
    fail("format", error.what());
  }
  row.problem.m = positive_int("m");
  row.problem.n = positive_int("n");
  row.problem.k = positive_int("k");
  if (const auto problem_text = shape_problem(row.problem.format, row.problem.n, row.problem.k)) fail("format", *problem_text);
  const auto time = cell("time_us");
  if (!time) fail("time_us", "missing");
  double time_us = 0;
  const auto [end, error] = std::from_chars(time->data(), time->data() + time->size(), time_us);
  if (error != std::errc() || end != time->data() + time->size()) {
    fail("time_us", quote_input(*time) + " is not a number of microseconds");
  }
  if (const auto problem_text = time_problem(time_us)) fail("time_us", quote_input(*time) + " microseconds is " + *problem_text);
  row.time_us = time_us;
  row.source = cell("source").value_or(file.stem().string());
  if (options.label) {
    row.label = *options.label;
  } else if (const auto label = cell("label")) {
    row.label = *label;
  } else {
    fail("label", "missing (or pass --label NAME)");
  }
  if (options.gpu) {
    row.gpu = gpu_key_for(*options.gpu);
  } else if (const auto gpu = cell("gpu")) {
    row.gpu = gpu_key_for(*gpu);
  } else {
    fail("gpu", "missing (or pass --gpu NAME)");
  }
  nlohmann::json notes = {{"file", file.filename().string()}};
  if (const auto timing = cell("timing")) {
    notes["timing"] = *timing;
  } else if (options.timing) {
    notes["timing"] = *options.timing;
  }
  if (const auto text = cell("notes")) notes["notes"] = *text;
  row.notes = notes_text(notes);
  return row;
}

ExternalFile read_json_list(const nlohmann::json& json, const fs::path& file, const ImportOptions& options) {
  ExternalFile result{file, ExternalFileKind::JsonList, {}};
  const nlohmann::json* list = &json;
  std::string prefix;
  if (json.is_object()) {
    if (!json.contains("results")) {
      QTUNE_INPUT_ERROR(file.string() + ": expected a Humming result ({\"problem\", \"result\"}), a JSON list of results or {\"results\": [...]}");
    }
    list = &json["results"];
    prefix = "results";
  }
  if (!list->is_array() || list->empty()) field_error(file, prefix.empty() ? "(root)" : prefix, "expected a non-empty array of results");
  for (std::size_t i = 0; i < list->size(); ++i) {
    const std::string where = prefix + "[" + std::to_string(i) + "]";
    const nlohmann::json& entry = (*list)[i];
    if (!entry.is_object()) field_error(file, where, "expected an object");
    std::map<std::string, std::string> cells;
    for (const auto& [key, value] : entry.items()) {
      if (known_columns().count(key) == 0) field_error(file, where + "." + key, "unknown field");
      if (value.is_string()) {
        cells[key] = value.get<std::string>();
      } else if (value.is_number_integer()) {
        cells[key] = std::to_string(value.get<std::int64_t>());
      } else if (value.is_number()) {
        std::ostringstream text;
        text.precision(17);
        text << value.get<double>();
        cells[key] = text.str();
      } else if (!value.is_null()) {
        field_error(file, where + "." + key, "expected a string or a number");
      }
    }
    result.rows.push_back(generic_row(cells, file, where + ": ", options));
  }
  return result;
}

// RFC 4180 fields of one record; `text` and `position` advance over one record (quoted fields may hold newlines).
std::vector<std::string> csv_record(const std::string& text, std::size_t& position, const fs::path& file, int line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  while (position < text.size()) {
    const char c = text[position++];
    if (quoted) {
      if (c == '"') {
        if (position < text.size() && text[position] == '"') {
          fields.back() += '"';
          ++position;
        } else {
          quoted = false;
        }
      } else {
        fields.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else if (c == '\n') {
      break;
    } else if (c != '\r') {
      fields.back() += c;
    }
  }
  if (quoted) QTUNE_INPUT_ERROR(file.string() + ": line " + std::to_string(line) + ": unterminated quoted field");
  for (std::string& field : fields) {
    const auto first = field.find_first_not_of(" \t");
    const auto last = field.find_last_not_of(" \t");
    field = first == std::string::npos ? std::string() : field.substr(first, last - first + 1);
  }
  return fields;
}

ExternalFile read_csv(const std::string& text, const fs::path& file, const ImportOptions& options) {
  ExternalFile result{file, ExternalFileKind::Csv, {}};
  std::size_t position = 0;
  int next_line = 1;
  std::vector<std::string> header;
  while (position < text.size()) {
    const int line = next_line;  // where the record starts (a quoted field may span lines)
    const std::size_t start = position;
    std::vector<std::string> fields = csv_record(text, position, file, line);
    next_line += static_cast<int>(std::count(text.begin() + static_cast<std::ptrdiff_t>(start),
                                             text.begin() + static_cast<std::ptrdiff_t>(position), '\n'));
    if (fields.size() == 1 && fields[0].empty()) continue;  // blank line
    if (header.empty()) {
      header = fields;
      std::set<std::string> seen;
      for (const std::string& column : header) {
        if (known_columns().count(column) == 0) field_error(file, column, "unknown column (known: format, m, n, k, time_us, label, gpu, source, timing, notes)");
        if (!seen.insert(column).second) field_error(file, column, "column given twice");
      }
      continue;
    }
    if (fields.size() != header.size()) {
      QTUNE_INPUT_ERROR(file.string() + ": line " + std::to_string(line) + ": " + std::to_string(fields.size()) + " fields for " +
                        std::to_string(header.size()) + " columns");
    }
    std::map<std::string, std::string> cells;
    for (std::size_t i = 0; i < header.size(); ++i) cells[header[i]] = fields[i];
    result.rows.push_back(generic_row(cells, file, "line " + std::to_string(line) + ": ", options));
  }
  if (header.empty()) QTUNE_INPUT_ERROR(file.string() + ": empty CSV file (expected a header row and results)");
  if (result.rows.empty()) QTUNE_INPUT_ERROR(file.string() + ": the CSV file has a header but no results");
  return result;
}

}  // namespace

namespace {

// Two rows of one file for the same result would silently replace each other: refused, whatever the file's kind.
void require_distinct_rows(const ExternalFile& file) {
  std::set<std::tuple<std::string, std::string, std::string, std::int64_t, std::int64_t, std::int64_t, std::string>> keys;
  for (const ExternalRow& row : file.rows) {
    if (!keys.emplace(row.source, row.label, row.problem.format, row.problem.m, row.problem.n, row.problem.k, row.gpu).second) {
      QTUNE_INPUT_ERROR(file.path.string() + ": two results for " + quote_input(row.source + "/" + row.label) + " " +
                        row.problem.format + " m=" + std::to_string(row.problem.m) + " n=" + std::to_string(row.problem.n) +
                        " k=" + std::to_string(row.problem.k) + " on " + quote_input(row.gpu));
    }
  }
}

ExternalFile read_any_kind(const std::string& text, const fs::path& path, const ImportOptions& options) {
  // Names and labels go into JSON notes, reports and tables: they must be text, checked before anything is stored.
  const std::string name = path.string();
  if (!is_valid_utf8(name) || std::any_of(name.begin(), name.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20; })) {
    QTUNE_INPUT_ERROR("file name: " + quote_input(name, 4096) + " is not valid UTF-8 text; rename the file");
  }
  for (const auto& [flag, value] : {std::pair{"--label", &options.label}, {"--gpu", &options.gpu}, {"--format", &options.format}, {"--timing", &options.timing}}) {
    if (*value && !is_valid_utf8(**value)) QTUNE_INPUT_ERROR(std::string(flag) + ": not valid UTF-8: " + quote_input(**value));
  }
  const auto first = text.find_first_not_of(" \t\r\n");
  const bool looks_like_json = first != std::string::npos && (text[first] == '{' || text[first] == '[');
  if (!looks_like_json) {
    if (path.extension() == ".json") QTUNE_INPUT_ERROR(path.string() + ": invalid JSON: expected an object or an array");
    return read_csv(text, path, options);
  }
  const nlohmann::json json = parse_json(text, path.string() + ": invalid JSON");
  if (json.is_object() && json.contains("problem") && json.contains("result")) return read_humming(json, path, options);
  return read_json_list(json, path, options);
}

}  // namespace

ExternalFile read_external_file(const fs::path& path, const ImportOptions& options) {
  return read_external_text(read_file_text(path), path, options);
}

ExternalFile read_external_text(const std::string& text, const fs::path& path, const ImportOptions& options) {
  ExternalFile result = read_any_kind(text, path, options);
  require_distinct_rows(result);
  return result;
}

std::size_t store_external_file(db::Store& store, const ExternalFile& file) {
  auto transaction = store.transaction();
  for (const ExternalRow& row : file.rows) {
    db::ExternalResult result;
    result.source = row.source;
    result.label = row.label;
    result.problem = store.upsert_problem(row.problem);
    result.gpu = row.gpu;
    result.time_us = row.time_us;
    result.notes = row.notes;
    store.upsert_external_result(result);
  }
  transaction.commit();
  return file.rows.size();
}

std::string timing_of(const db::ExternalResultRecord& result) {
  const nlohmann::json notes = nlohmann::json::parse(result.notes, nullptr, false);
  if (notes.is_object() && notes.contains("timing") && notes["timing"].is_string()) return notes["timing"].get<std::string>();
  return "";
}

std::string timing_legend(std::string_view timing) {
  if (timing.empty()) return "external, timing not stated";
  if (timing == kTimingCudaEventMean) return "external, CUDA-event mean";
  if (timing == "cupti-median") return "external, CUPTI median";
  if (timing == "cuda-event-median") return "external, CUDA-event median";
  return "external, " + std::string(timing);
}

}  // namespace qtune::reports
