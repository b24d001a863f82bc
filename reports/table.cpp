#include "reports/table.hpp"

#include <algorithm>
#include <charconv>
#include <ostream>

#include <nlohmann/json.hpp>

#include "kernels/error.hpp"
#include "kernels/text_escape.hpp"

namespace qtune::reports {

OutputStyle parse_output_style(std::string_view text) {
  if (text == "table" || text == "text") return OutputStyle::Text;
  if (text == "json") return OutputStyle::Json;
  if (text == "csv") return OutputStyle::Csv;
  QTUNE_INPUT_ERROR("--output: unknown style " + quote_input(text) + " (expected table, json or csv)");
}

Table::Table(std::vector<std::string> columns) : columns_(std::move(columns)) {}

void Table::add_row(std::vector<std::string> cells) {
  if (cells.size() != columns_.size()) {
    QTUNE_THROW(Error, "table row has " + std::to_string(cells.size()) + " cells for " +
                           std::to_string(columns_.size()) + " columns");
  }
  rows_.push_back(std::move(cells));
}

void Table::print(std::ostream& out, OutputStyle style) const {
  switch (style) {
    case OutputStyle::Text: return print_text(out);
    case OutputStyle::Json: return print_json(out);
    case OutputStyle::Csv: return print_csv(out);
  }
}

void Table::print_text(std::ostream& out) const {
  // Cells may hold stored or imported text: nothing in them may drive the terminal.
  std::vector<std::vector<std::string>> shown;
  for (const auto& row : rows_) {
    shown.emplace_back();
    for (const std::string& cell : row) shown.back().push_back(printable_text(cell));
  }
  std::vector<size_t> widths(columns_.size());
  for (size_t c = 0; c < columns_.size(); ++c) widths[c] = columns_[c].size();
  for (const auto& row : shown)
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  auto print_line = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t c = 0; c < cells.size(); ++c) {
      line += cells[c];
      if (c + 1 < cells.size()) line += std::string(widths[c] - cells[c].size() + 2, ' ');
    }
    out << line << "\n";
  };
  print_line(columns_);
  std::vector<std::string> rule;
  for (size_t width : widths) rule.emplace_back(width, '-');
  print_line(rule);
  for (const auto& row : shown) print_line(row);
}

namespace {
bool parse_number(const std::string& text, double& value) {
  if (text.empty()) return false;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  return ec == std::errc() && ptr == end;
}
}  // namespace

void Table::print_json(std::ostream& out) const {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const auto& row : rows_) {
    nlohmann::ordered_json object = nlohmann::ordered_json::object();
    for (size_t c = 0; c < row.size(); ++c) {
      double number = 0;
      if (parse_number(row[c], number)) {
        object[columns_[c]] = number;
      } else {
        object[columns_[c]] = row[c];
      }
    }
    rows.push_back(std::move(object));
  }
  out << json_text(rows, 2) << "\n";
}

void Table::print_csv(std::ostream& out) const {
  auto print_line = [&](const std::vector<std::string>& cells) {
    for (size_t c = 0; c < cells.size(); ++c) out << (c ? "," : "") << csv_field(cells[c]);
    out << "\n";
  };
  print_line(columns_);
  for (const auto& row : rows_) print_line(row);
}

Table stack_tables(const std::string& label_column, const std::vector<std::pair<std::string, const Table*>>& parts) {
  std::vector<std::string> columns{label_column};
  for (const auto& part : parts) {
    for (const std::string& column : part.second->columns()) {
      if (std::find(columns.begin(), columns.end(), column) == columns.end()) columns.push_back(column);
    }
  }
  Table stacked(columns);
  for (const auto& [label, table] : parts) {
    std::vector<std::size_t> position;  // where each of the part's columns goes
    for (const std::string& column : table->columns()) {
      position.push_back(static_cast<std::size_t>(std::find(columns.begin(), columns.end(), column) - columns.begin()));
    }
    for (const std::vector<std::string>& row : table->rows()) {
      std::vector<std::string> cells(columns.size());
      cells[0] = label;
      for (std::size_t c = 0; c < row.size(); ++c) cells[position[c]] = row[c];
      stacked.add_row(std::move(cells));
    }
  }
  return stacked;
}

}  // namespace qtune::reports
