// Reading the files qtune is given: whole files, and JSON whose errors are one line naming where it came from.
#include "kernels/input_file.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "kernels/error.hpp"
#include "tests/common/expect_error.hpp"
#include "tests/common/temp_dir.hpp"

namespace qtune {
namespace {

using test_support::input_error;

TEST(InputFile, ReadsEveryByteOrSaysItCannot) {
  const test_support::TempDir dir;
  const std::filesystem::path file = dir.path() / "bytes.bin";
  const std::string bytes("a\0b\r\n\xff", 6);
  std::ofstream(file, std::ios::binary) << bytes;
  EXPECT_EQ(try_read_file_text(file), bytes);
  EXPECT_EQ(read_file_text(file), bytes);
  EXPECT_EQ(try_read_file_text(dir.path() / "missing.json"), std::nullopt);
  EXPECT_EQ(input_error([&] { read_file_text(dir.path() / "missing.json"); }),
            (dir.path() / "missing.json").string() + ": cannot read the file");
}

TEST(InputFile, JsonErrorsAreOneQuotedLineNamingTheContext) {
  EXPECT_EQ(parse_json(R"({"a": [1, 2]})", "x.json")["a"][1], 2);
  const std::string broken = input_error([] { parse_json("{\"a\": \n\x1b[2J", "x.json: invalid JSON"); });
  EXPECT_EQ(broken.rfind("x.json: invalid JSON: 'parse error at line 2", 0), 0u) << broken;
  EXPECT_EQ(broken.find("json.exception"), std::string::npos) << "nlohmann's tag is left out: " << broken;
  EXPECT_EQ(broken.find('\x1b'), std::string::npos) << "the input the parser echoes is quoted: " << broken;
  EXPECT_EQ(broken.find('\n'), std::string::npos) << broken;
  const std::string overflow = input_error([] { parse_json(R"({"m": [1e400]})", "m.json"); });
  EXPECT_NE(overflow.find("number overflow"), std::string::npos) << overflow;
}

TEST(InputFile, JsonFilesNameThePathOrTheFieldThatNamedThem) {
  const test_support::TempDir dir;
  const std::filesystem::path good = dir.path() / "good.json";
  const std::filesystem::path bad = dir.path() / "bad.json";
  const std::filesystem::path missing = dir.path() / "missing.json";
  std::ofstream(good) << R"({"k": 7})";
  std::ofstream(bad) << "{";
  EXPECT_EQ(read_json_file(good)["k"], 7);
  EXPECT_EQ(read_json_file(good, "table", "export one")["k"], 7);
  EXPECT_EQ(input_error([&] { read_json_file(missing); }), missing.string() + ": cannot read the file");
  EXPECT_EQ(input_error([&] { read_json_file(missing, "table", "write it with `qtune export -o table.json`"); }),
            "table: cannot read " + missing.string() + " (write it with `qtune export -o table.json`)");
  EXPECT_EQ(input_error([&] { read_json_file(bad); }).rfind(bad.string() + ": invalid JSON: '", 0), 0u);
  EXPECT_EQ(input_error([&] { read_json_file(bad, "cubins", "x"); }).rfind("cubins: " + bad.string() + " is not JSON: '", 0), 0u);
  EXPECT_EQ(input_error([] { parse_json_text("[", "m.json"); }).rfind("m.json: invalid JSON: '", 0), 0u);
  EXPECT_EQ(input_error([] { parse_json_text("[", "m.json", "cubins"); }).rfind("cubins: m.json is not JSON: '", 0), 0u);
}

}  // namespace
}  // namespace qtune
