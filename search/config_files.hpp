#pragma once
// Finding qtune's configs/ directory and reading its JSON files with one-line errors that name the file and the field.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/input_file.hpp"

namespace qtune::search {

// Where configs/ is looked for, in order: $QTUNE_CONFIG_DIR (must exist when set), the source tree's configs/
// (compiled in), then next to the executable: <exe>/../configs, <exe>/../share/qtune/configs.
std::vector<std::filesystem::path> config_dir_candidates();

// The first candidate that is a directory. Throws InputError listing every place tried when none is.
std::filesystem::path config_dir();

// Config files are read with qtune::read_json_file and qtune::parse_json_text (kernels/input_file.hpp).
using ::qtune::parse_json_text;
using ::qtune::read_json_file;

// The *.json files of a directory, sorted by name. Throws InputError if the directory cannot be listed.
std::vector<std::filesystem::path> json_files_in(const std::filesystem::path& directory);

// Typed, checked access to one JSON object of a config file. Every failure throws InputError
// "<file>: field '<path>': <what was expected>", where <path> is the dotted path from the file's root ("gemms[2].n").
class ConfigObject {
 public:
  // Throws unless `value` is a JSON object. `path` is this object's own dotted path ("" for the root).
  ConfigObject(const nlohmann::json& value, std::string file, std::string path = "");

  bool has(std::string_view key) const;  // present and not null
  std::string required_string(std::string_view key) const;  // non-empty
  std::optional<std::string> optional_string(std::string_view key) const;
  std::int64_t required_positive_int(std::string_view key) const;
  std::optional<std::int64_t> optional_positive_int(std::string_view key) const;
  double required_positive_number(std::string_view key) const;
  std::optional<double> optional_positive_number(std::string_view key) const;  // absent or null: nullopt
  std::vector<std::string> required_string_array(std::string_view key) const;  // may be empty; elements non-empty
  std::vector<std::int64_t> required_positive_int_array(std::string_view key) const;  // non-empty
  ConfigObject required_object(std::string_view key) const;
  std::vector<ConfigObject> required_object_array(std::string_view key) const;  // non-empty

  // Every key of this object that no accessor above asked for is an error ("unknown field"), which catches typos.
  void reject_unknown_fields() const;
  std::vector<std::string> keys() const;

  // Throws InputError "<file>: field '<path.key>': <message>".
  [[noreturn]] void fail(std::string_view key, std::string_view message) const;
  std::string field_path(std::string_view key) const;
  const std::string& file() const { return file_; }
  const nlohmann::json& json() const { return *value_; }

 private:
  const nlohmann::json& get(std::string_view key) const;  // marks the key as known; throws if missing or null
  const nlohmann::json* find(std::string_view key) const;  // marks the key as known; nullptr if missing or null

  const nlohmann::json* value_;
  std::string file_;
  std::string path_;
  mutable std::set<std::string, std::less<>> known_keys_;
};

}  // namespace qtune::search
