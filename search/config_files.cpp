#include "search/config_files.hpp"

#include <algorithm>
#include <cstdlib>
#include <system_error>

#include "kernels/error.hpp"
#include "kernels/input_file.hpp"
#include "kernels/text_escape.hpp"

namespace qtune::search {

namespace fs = std::filesystem;

namespace {

std::optional<fs::path> executable_dir() {
  std::error_code error;
  const fs::path exe = fs::read_symlink("/proc/self/exe", error);
  if (error || exe.empty()) return std::nullopt;
  return exe.parent_path();
}

std::string json_type_name(const nlohmann::json& value) { return value.type_name(); }

}  // namespace

std::vector<fs::path> config_dir_candidates() {
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("QTUNE_CONFIG_DIR"); env != nullptr && *env != '\0') {
    candidates.emplace_back(env);
    return candidates;  // an explicit choice is never silently replaced by another directory
  }
#ifdef QTUNE_SOURCE_CONFIG_DIR
  candidates.emplace_back(QTUNE_SOURCE_CONFIG_DIR);
#endif
  if (const auto dir = executable_dir()) {
    candidates.push_back(*dir / ".." / "configs");
    candidates.push_back(*dir / ".." / "share" / "qtune" / "configs");
  }
  return candidates;
}

fs::path config_dir() {
  const auto candidates = config_dir_candidates();
  std::string tried;
  for (const auto& candidate : candidates) {
    std::error_code error;
    if (fs::is_directory(candidate, error)) return candidate.lexically_normal();
    tried += (tried.empty() ? "" : ", ") + candidate.string();
  }
  if (const char* env = std::getenv("QTUNE_CONFIG_DIR"); env != nullptr && *env != '\0') {
    QTUNE_INPUT_ERROR("QTUNE_CONFIG_DIR: " + quote_input(env) + " is not a directory");
  }
  QTUNE_INPUT_ERROR("configs directory not found (tried " + tried + "); set QTUNE_CONFIG_DIR");
}

std::vector<fs::path> json_files_in(const fs::path& directory) {
  std::error_code error;
  fs::directory_iterator iterator(directory, error);
  if (error) QTUNE_INPUT_ERROR(directory.string() + ": cannot list the directory: " + error.message());
  std::vector<fs::path> files;
  for (const auto& entry : iterator) {
    if (entry.path().extension() == ".json" && entry.is_regular_file(error)) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

ConfigObject::ConfigObject(const nlohmann::json& value, std::string file, std::string path)
    : value_(&value), file_(std::move(file)), path_(std::move(path)) {
  if (!value.is_object()) {
    if (path_.empty()) QTUNE_INPUT_ERROR(file_ + ": expected a JSON object at the top level, found " + json_type_name(value));
    QTUNE_INPUT_ERROR(file_ + ": field " + quote_input(path_) + ": expected an object, found " + json_type_name(value));
  }
}

std::string ConfigObject::field_path(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

void ConfigObject::fail(std::string_view key, std::string_view message) const {
  QTUNE_INPUT_ERROR(file_ + ": field " + quote_input(field_path(key)) + ": " + std::string(message));
}

const nlohmann::json* ConfigObject::find(std::string_view key) const {
  known_keys_.emplace(key);
  const auto it = value_->find(std::string(key));
  if (it == value_->end() || it->is_null()) return nullptr;
  return &*it;
}

const nlohmann::json& ConfigObject::get(std::string_view key) const {
  const nlohmann::json* value = find(key);
  if (value == nullptr) fail(key, "missing");
  return *value;
}

bool ConfigObject::has(std::string_view key) const {
  const auto it = value_->find(std::string(key));
  return it != value_->end() && !it->is_null();
}

std::string ConfigObject::required_string(std::string_view key) const {
  const auto& value = get(key);
  if (!value.is_string() || value.get_ref<const std::string&>().empty()) fail(key, "expected a non-empty string");
  return value.get<std::string>();
}

std::optional<std::string> ConfigObject::optional_string(std::string_view key) const {
  if (find(key) == nullptr) return std::nullopt;
  return required_string(key);
}

std::int64_t ConfigObject::required_positive_int(std::string_view key) const {
  const auto& value = get(key);
  if (value.is_number_unsigned() && value.get<std::uint64_t>() <= static_cast<std::uint64_t>(INT64_MAX) &&
      value.get<std::uint64_t>() > 0) {
    return value.get<std::int64_t>();
  }
  if (value.is_number_integer() && !value.is_number_unsigned() && value.get<std::int64_t>() > 0) {
    return value.get<std::int64_t>();
  }
  fail(key, "expected a positive integer");
}

std::optional<std::int64_t> ConfigObject::optional_positive_int(std::string_view key) const {
  if (find(key) == nullptr) return std::nullopt;
  return required_positive_int(key);
}

double ConfigObject::required_positive_number(std::string_view key) const {
  const auto& value = get(key);
  if (!value.is_number() || !(value.get<double>() > 0.0)) fail(key, "expected a positive number");
  return value.get<double>();
}

std::optional<double> ConfigObject::optional_positive_number(std::string_view key) const {
  if (find(key) == nullptr) return std::nullopt;
  return required_positive_number(key);
}

std::vector<std::string> ConfigObject::required_string_array(std::string_view key) const {
  const auto& value = get(key);
  if (!value.is_array()) fail(key, "expected an array of strings");
  std::vector<std::string> result;
  for (std::size_t i = 0; i < value.size(); ++i) {
    if (!value[i].is_string() || value[i].get_ref<const std::string&>().empty()) {
      fail(std::string(key) + "[" + std::to_string(i) + "]", "expected a non-empty string");
    }
    result.push_back(value[i].get<std::string>());
  }
  return result;
}

std::vector<std::int64_t> ConfigObject::required_positive_int_array(std::string_view key) const {
  const auto& value = get(key);
  if (!value.is_array() || value.empty()) fail(key, "expected a non-empty array of positive integers");
  std::vector<std::int64_t> result;
  for (std::size_t i = 0; i < value.size(); ++i) {
    const auto& element = value[i];
    const bool positive_int = (element.is_number_unsigned() && element.get<std::uint64_t>() > 0 &&
                               element.get<std::uint64_t>() <= static_cast<std::uint64_t>(INT64_MAX)) ||
                              (element.is_number_integer() && !element.is_number_unsigned() && element.get<std::int64_t>() > 0);
    if (!positive_int) fail(std::string(key) + "[" + std::to_string(i) + "]", "expected a positive integer");
    result.push_back(element.get<std::int64_t>());
  }
  return result;
}

ConfigObject ConfigObject::required_object(std::string_view key) const {
  const auto& value = get(key);
  if (!value.is_object()) fail(key, "expected an object");
  return ConfigObject(value, file_, field_path(key));
}

std::vector<ConfigObject> ConfigObject::required_object_array(std::string_view key) const {
  const auto& value = get(key);
  if (!value.is_array() || value.empty()) fail(key, "expected a non-empty array of objects");
  std::vector<ConfigObject> result;
  for (std::size_t i = 0; i < value.size(); ++i) {
    const std::string element_key = std::string(key) + "[" + std::to_string(i) + "]";
    if (!value[i].is_object()) fail(element_key, "expected an object");
    result.emplace_back(value[i], file_, field_path(element_key));
  }
  return result;
}

std::vector<std::string> ConfigObject::keys() const {
  std::vector<std::string> result;
  for (const auto& item : value_->items()) result.push_back(item.key());
  return result;
}

void ConfigObject::reject_unknown_fields() const {
  for (const auto& item : value_->items()) {
    if (!known_keys_.contains(item.key())) fail(item.key(), "unknown field");
  }
}

}  // namespace qtune::search
