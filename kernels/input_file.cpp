#include "kernels/input_file.hpp"

#include <fstream>
#include <sstream>

#include "kernels/error.hpp"
#include "kernels/text_escape.hpp"

namespace qtune {

std::optional<std::string> try_read_file_text(const std::filesystem::path& path) {
  std::ifstream stream(path, std::ios::binary);
  if (!stream) return std::nullopt;
  std::ostringstream text;
  text << stream.rdbuf();
  if (stream.bad()) return std::nullopt;
  return std::move(text).str();
}

std::string read_file_text(const std::filesystem::path& path) {
  std::optional<std::string> text = try_read_file_text(path);
  if (!text) QTUNE_INPUT_ERROR(path.string() + ": cannot read the file");
  return std::move(*text);
}

nlohmann::json parse_json(std::string_view text, std::string_view context) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& error) {  // parse_error, or out_of_range for a number such as 1e400
    // nlohmann's message is one line: "[json.exception.parse_error.101] parse error at line 3, column 5: ..."
    std::string message = error.what();
    if (const auto bracket = message.find("] "); message.starts_with("[json.exception") && bracket != std::string::npos) {
      message = message.substr(bracket + 2);
    }
    QTUNE_INPUT_ERROR(std::string(context) + ": " + quote_input(message, 200));
  }
}

nlohmann::json read_json_file(const std::filesystem::path& path, std::string_view field, std::string_view hint) {
  if (field.empty()) return parse_json_text(read_file_text(path), path.string());
  const std::optional<std::string> text = try_read_file_text(path);
  if (!text) QTUNE_INPUT_ERROR(std::string(field) + ": cannot read " + path.string() + " (" + std::string(hint) + ")");
  return parse_json_text(*text, path.string(), field);
}

nlohmann::json parse_json_text(std::string_view text, const std::string& label, std::string_view field) {
  if (field.empty()) return parse_json(text, label + ": invalid JSON");
  return parse_json(text, std::string(field) + ": " + label + " is not JSON");
}

}  // namespace qtune
