#pragma once
// A table of strings printed for people (aligned text) or for tools (JSON array of objects, or CSV).
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

namespace qtune::reports {

enum class OutputStyle { Text, Json, Csv };
OutputStyle parse_output_style(std::string_view text);  // "table"|"text", "json", "csv"; throws InputError

class Table {
 public:
  explicit Table(std::vector<std::string> columns);
  void add_row(std::vector<std::string> cells);  // must have one cell per column
  const std::vector<std::string>& columns() const { return columns_; }
  const std::vector<std::vector<std::string>>& rows() const { return rows_; }

  void print(std::ostream& out, OutputStyle style) const;
  void print_text(std::ostream& out) const;
  void print_json(std::ostream& out) const;  // cells that parse fully as numbers are written as numbers
  void print_csv(std::ostream& out) const;   // RFC 4180 quoting

 private:
  std::vector<std::string> columns_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace qtune::reports
