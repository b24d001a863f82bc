// Tables for people and tools hold stored or imported text: the terminal never sees control characters (issue 18,
// defect 16) and JSON and CSV output survive any bytes (defect 6).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <sstream>

#include "reports/table.hpp"

namespace qtune::reports {
namespace {

Table hostile_table() {
  Table table({"label", "n"});
  table.add_row({"clear\x1b[2J screen\n", "1"});
  table.add_row({"bad\xff utf-8, \"quoted\"", "2"});
  return table;
}

TEST(TableOutput, TextEscapesControlCharactersAndInvalidBytes) {
  std::ostringstream out;
  hostile_table().print_text(out);
  const std::string text = out.str();
  EXPECT_NE(text.find("clear\\x1b[2J screen\\x0a"), std::string::npos) << text;
  EXPECT_NE(text.find("bad\\xff utf-8"), std::string::npos) << text;
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
  EXPECT_EQ(text.find('\xff'), std::string::npos);
}

TEST(TableOutput, JsonAndCsvSurviveAnyBytes) {
  std::ostringstream json;
  EXPECT_NO_THROW(hostile_table().print_json(json));
  const nlohmann::json parsed = nlohmann::json::parse(json.str());
  EXPECT_EQ(parsed[1]["label"], "bad\xef\xbf\xbd utf-8, \"quoted\"");
  EXPECT_EQ(parsed[1]["n"], 2);
  std::ostringstream csv;
  hostile_table().print_csv(csv);
  EXPECT_EQ(csv.str(), "label,n\n\"clear\x1b[2J screen\n\",1\n\"bad\xff utf-8, \"\"quoted\"\"\",2\n");
}

}  // namespace
}  // namespace qtune::reports
