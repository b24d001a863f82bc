#pragma once
// One escaping function per language qtune writes strings into (C++, JSON, HTML/SVG, Markdown, CSV), one for
// quoting user input in error messages, and the one way numbers are written for people. Strings from a database, an
// imported file or the command line are arbitrary bytes: every writer passes them through the function of its target
// language, never raw.
#include <nlohmann/json_fwd.hpp>

#include <cstddef>
#include <string>
#include <string_view>

namespace qtune {

// True when `text` is well-formed UTF-8 (no overlong forms, surrogates or code points above U+10FFFF).
bool is_valid_utf8(std::string_view text);
// `text` with every byte that is not part of well-formed UTF-8 replaced by U+FFFD.
std::string valid_utf8(std::string_view text);

// A C++ string literal, quotes included: `"`, `\`, `?` and every byte outside printable ASCII as escapes.
std::string cpp_string_literal(std::string_view text);
// Text that stays inside one `//` comment line: line breaks, backslashes (line splices) and every byte outside
// printable ASCII written as \xNN.
std::string cpp_comment_text(std::string_view text);

// HTML and SVG (XML) text and attribute values: & < > " ' escaped; invalid UTF-8 and the control characters that
// XML forbids become U+FFFD.
std::string xml_escape(std::string_view text);

// Markdown inline text and table cells: one line (line breaks and control characters become spaces), Markdown's
// punctuation and raw HTML escaped with backslashes.
std::string markdown_escape(std::string_view text);

// One RFC 4180 CSV field: quoted when it holds a comma, quote or line break.
std::string csv_field(std::string_view text);

// json.dump(indent) that never throws on invalid UTF-8 in a string (those bytes become U+FFFD).
std::string json_text(const nlohmann::json& json, int indent = -1);
std::string json_text(const nlohmann::ordered_json& json, int indent = -1);

// Text for a terminal: control characters and invalid UTF-8 as \xNN (no escape sequence reaches the terminal).
std::string printable_text(std::string_view text);

// User input quoted for a message: '...' with non-printable and invalid bytes as \xNN, cut after `limit` bytes
// with "…(N bytes)" so that a message stays one short line whatever the input.
std::string quote_input(std::string_view text, std::size_t limit = 80);

// A number in fixed notation with `decimals` digits after the point, as printf's "%.*f": fixed(3.14159, 2) == "3.14".
// Every table, report and progress line writes its numbers with it.
std::string fixed(double value, int decimals);

}  // namespace qtune
