#include "kernels/text_escape.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>

namespace qtune {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// The length of the well-formed UTF-8 sequence at text[at], or 0 when the bytes there are not one.
std::size_t utf8_sequence_length(std::string_view text, std::size_t at) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(at);
  if (lead < 0x80) return 1;
  std::size_t length = 0;
  unsigned char low = 0x80, high = 0xBF;  // the allowed range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;   // no overlong forms
    if (lead == 0xED) high = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;  // nothing above U+10FFFF
  } else {
    return 0;
  }
  if (at + length > text.size()) return 0;
  if (byte(at + 1) < low || byte(at + 1) > high) return 0;
  for (std::size_t i = 2; i < length; ++i)
    if (byte(at + i) < 0x80 || byte(at + i) > 0xBF) return 0;
  return length;
}

std::string hex_byte(unsigned char c) {
  char text[8];
  std::snprintf(text, sizeof(text), "\\x%02x", c);
  return text;
}

bool printable_ascii(unsigned char c) { return c >= 0x20 && c < 0x7F; }

template <typename Json>
std::string dump_replacing(const Json& json, int indent) {
  return json.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

bool is_valid_utf8(std::string_view text) {
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t length = utf8_sequence_length(text, at);
    if (length == 0) return false;
    at += length;
  }
  return true;
}

std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t length = utf8_sequence_length(text, at);
    if (length == 0) {
      out += kReplacement;
      ++at;
    } else {
      out.append(text.substr(at, length));
      at += length;
    }
  }
  return out;
}

std::string cpp_string_literal(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\' || c == '?') {  // '?': no trigraph for pre-C++17 readers
      out += '\\';
      out += c;
    } else if (printable_ascii(byte)) {
      out += c;
    } else {
      char octal[8];  // three octal digits always end the escape, whatever follows
      std::snprintf(octal, sizeof(octal), "\\%03o", byte);
      out += octal;
    }
  }
  return out + "\"";
}

std::string cpp_comment_text(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    out += printable_ascii(byte) && c != '\\' ? std::string(1, c) : hex_byte(byte);
  }
  return out;
}

std::string xml_escape(std::string_view text) {
  const std::string valid = valid_utf8(text);
  std::string out;
  out.reserve(valid.size());
  for (const char c : valid) {
    const auto byte = static_cast<unsigned char>(c);
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default:
        if ((byte < 0x20 && c != '\t' && c != '\n' && c != '\r') || byte == 0x7F) {
          out += kReplacement;
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string markdown_escape(std::string_view text) {
  static constexpr std::string_view kPunctuation = "\\`*_[]<>|&#~";
  const std::string valid = valid_utf8(text);
  std::string out;
  out.reserve(valid.size());
  for (const char c : valid) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7F) {
      out += ' ';
    } else {
      if (kPunctuation.find(c) != std::string_view::npos) out += '\\';
      out += c;
    }
  }
  return out;
}

std::string csv_field(std::string_view text) {
  if (text.find_first_of(",\"\n\r") == std::string_view::npos) return std::string(text);
  std::string quoted = "\"";
  for (const char c : text) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

std::string json_text(const nlohmann::json& json, int indent) { return dump_replacing(json, indent); }
std::string json_text(const nlohmann::ordered_json& json, int indent) { return dump_replacing(json, indent); }

namespace {

// printable_text of text[0, limit) (not cutting a UTF-8 sequence); `used` is where it stopped.
std::string printable_prefix(std::string_view text, std::size_t limit, std::size_t& used) {
  std::string out;
  used = 0;
  while (used < text.size() && used < limit) {
    const std::size_t length = utf8_sequence_length(text, used);
    const auto byte = static_cast<unsigned char>(text[used]);
    if (length > 1) {
      out.append(text.substr(used, length));
      used += length;
    } else {
      out += length == 1 && printable_ascii(byte) ? std::string(1, text[used]) : hex_byte(byte);
      ++used;
    }
  }
  return out;
}

}  // namespace

std::string printable_text(std::string_view text) {
  std::size_t used = 0;
  return printable_prefix(text, text.size(), used);
}

std::string quote_input(std::string_view text, std::size_t limit) {
  std::size_t used = 0;
  std::string out = "'" + printable_prefix(text, limit, used) + "'";
  if (used < text.size()) out += "\xE2\x80\xA6(" + std::to_string(text.size()) + " bytes)";  // "…"
  return out;
}

std::string fixed(double value, int decimals) {
  const int length = std::snprintf(nullptr, 0, "%.*f", decimals, value);
  std::string text(static_cast<std::size_t>(std::max(length, 0)), '\0');
  std::snprintf(text.data(), text.size() + 1, "%.*f", decimals, value);
  return text;
}

}  // namespace qtune
