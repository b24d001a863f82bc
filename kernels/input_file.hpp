#pragma once
// Reading the files qtune is given (configs, exported tables, cubin manifests, results to import): a whole file as
// text, and JSON parsed with one-line errors. Every library that reads such a file uses these, naming its own field.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace qtune {

// The whole of a file, byte for byte; nullopt when it cannot be opened or read.
std::optional<std::string> try_read_file_text(const std::filesystem::path& path);
// The whole of a file; InputError "<path>: cannot read the file" when it cannot be opened or read.
std::string read_file_text(const std::filesystem::path& path);

// `text` parsed as JSON. Malformed text, or a number no double holds (1e400), is an InputError
// "<context>: '<the parser's message>'": one line, nlohmann's "[json.exception...]" tag left out, and the bytes of the
// input it echoes quoted as quote_input does.
nlohmann::json parse_json(std::string_view text, std::string_view context);

// A JSON file qtune is given, read whole and parsed. Without a field the file leads the message: InputError
// "<path>: cannot read the file" or "<path>: invalid JSON: ..."; with the field (the option or setting that named
// the file) and a hint (how to make one): "<field>: cannot read <path> (<hint>)" or "<field>: <path> is not JSON: ...".
nlohmann::json read_json_file(const std::filesystem::path& path, std::string_view field = {}, std::string_view hint = {});
// The text of such a file, with the same messages (`label` names the file).
nlohmann::json parse_json_text(std::string_view text, const std::string& label, std::string_view field = {});

}  // namespace qtune
