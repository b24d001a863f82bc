#pragma once
// A table of strings printed for people (aligned text) or for tools (JSON array of objects, or CSV).
#include <iosfwd>
#include <string>
#include <string_view>
#include <utility>
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

// One table of several: a first column `label_column` holding each part's label, then every part's columns in the
// order they first appear; a row leaves the columns of other parts empty. So tables of different rows (the dense and
// the MoE problems of one tune) print as one JSON array or one CSV table.
Table stack_tables(const std::string& label_column, const std::vector<std::pair<std::string, const Table*>>& parts);

}  // namespace qtune::reports
