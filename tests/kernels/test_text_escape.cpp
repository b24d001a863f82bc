// Escaping for every language qtune writes (issue 18, defect 1), JSON that survives invalid UTF-8 (defect 6) and
// bounded quoting of user input in messages (defect 16).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>

#include "kernels/error.hpp"
#include "kernels/format.hpp"
#include "kernels/text_escape.hpp"

namespace qtune {
namespace {

TEST(Utf8, AcceptsWellFormedTextOnly) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("plain ascii"));
  EXPECT_TRUE(is_valid_utf8("\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80"));  // é 日 😀
  EXPECT_FALSE(is_valid_utf8("\xff"));
  EXPECT_FALSE(is_valid_utf8("\xc3"));              // cut short
  EXPECT_FALSE(is_valid_utf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(is_valid_utf8("\xed\xa0\x80"));      // a surrogate
  EXPECT_FALSE(is_valid_utf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_EQ(valid_utf8("a\xff" "b"), "a\xef\xbf\xbd" "b");
}

TEST(CppEscaping, LiteralsAndCommentsHoldAnyBytes) {
  EXPECT_EQ(cpp_string_literal("H200"), "\"H200\"");
  EXPECT_EQ(cpp_string_literal("a\"b\\c\n#error x"), "\"a\\\"b\\\\c\\012#error x\"");
  EXPECT_EQ(cpp_string_literal("\x01" "7"), "\"\\0017\"");  // three octal digits: the '7' stays a character
  EXPECT_EQ(cpp_string_literal("?" "?/"), "\"\\?\\?/\"");  // no trigraph in the output
  const std::string comment = cpp_comment_text("abc\n#error injected\r\\");
  EXPECT_EQ(comment, "abc\\x0a#error injected\\x0d\\x5c");
  EXPECT_EQ(comment.find('\n'), std::string::npos);
  EXPECT_NE(comment.back(), '\\');  // no line splice
}

TEST(MarkupEscaping, HtmlMarkdownAndCsv) {
  EXPECT_EQ(xml_escape("<a href='x'>&\"</a>"), "&lt;a href=&#39;x&#39;&gt;&amp;&quot;&lt;/a&gt;");
  EXPECT_EQ(xml_escape("bell\x07 bad\xff"), "bell\xef\xbf\xbd bad\xef\xbf\xbd");  // XML forbids the control character
  EXPECT_EQ(markdown_escape("<script>\n| a | *b* _c_ `d` [e](f) #g"), "\\<script\\> \\| a \\| \\*b\\* \\_c\\_ \\`d\\` \\[e\\](f) \\#g");
  EXPECT_EQ(markdown_escape("w4a16-int4-ch 1.5x"), "w4a16-int4-ch 1.5x");
  EXPECT_EQ(csv_field("plain"), "plain");
  EXPECT_EQ(csv_field("a,b"), "\"a,b\"");
  EXPECT_EQ(csv_field("say \"hi\"\nthere"), "\"say \"\"hi\"\"\nthere\"");
}

TEST(JsonText, InvalidUtf8IsReplacedNotThrown) {
  const nlohmann::json json = {{"label", "bad\xff\xfe"}};
  EXPECT_THROW((void)json.dump(), nlohmann::json::type_error);
  EXPECT_EQ(json_text(json), "{\"label\":\"bad\xef\xbf\xbd\xef\xbf\xbd\"}");
  const nlohmann::ordered_json ordered = {{"label", "\xc3"}};
  EXPECT_NO_THROW((void)json_text(ordered, 2));
}

TEST(QuoteInput, IsShortAndPrintable) {
  EXPECT_EQ(quote_input("w4a16"), "'w4a16'");
  EXPECT_EQ(quote_input("a\nb\x1b[31m\xff"), "'a\\x0ab\\x1b[31m\\xff'");
  EXPECT_EQ(quote_input("\xe6\x97\xa5"), "'\xe6\x97\xa5'");  // printable UTF-8 stays
  EXPECT_EQ(printable_text("red \x1b[31m\r\xff \xe6\x97\xa5"), "red \\x1b[31m\\x0d\\xff \xe6\x97\xa5");
  const std::string quoted = quote_input(std::string(100000, 'x'));
  EXPECT_EQ(quoted, "'" + std::string(80, 'x') + "'\xe2\x80\xa6(100000 bytes)");
}

// The format parser echoes the spec bounded: a 100k-character spec gave a 200 KB message.
TEST(QuoteInput, FormatErrorsStayShort) {
  for (const std::string& spec : {std::string(100000, 'w'), "w4a16-int4-" + std::string(100000, 'g'), std::string("w4a16-\xff\x01-ch")}) {
    try {
      (void)FormatSpec::parse(spec);
      FAIL() << "accepted";
    } catch (const InputError& error) {
      const std::string message = error.what();
      EXPECT_LT(message.size(), 400u) << message.substr(0, 400);
      for (const char c : message) EXPECT_GE(static_cast<unsigned char>(c), 0x20) << message;
      EXPECT_EQ(message.find('\xff'), std::string::npos) << message;
    }
  }
}

TEST(Fixed, WritesNumbersAsPrintfsFixedNotation) {
  EXPECT_EQ(fixed(3.14159, 2), "3.14");
  EXPECT_EQ(fixed(2.5, 0), "2") << "an exact half rounds to even, as printf does";
  EXPECT_EQ(fixed(-0.04, 1), "-0.0");
  EXPECT_EQ(fixed(1234.5, 3), "1234.500");
  EXPECT_EQ(fixed(1e20, 1), "100000000000000000000.0");
  EXPECT_EQ(fixed(1e300, 2).size(), 304u) << "no fixed-size buffer cuts a large number short";
}

}  // namespace
}  // namespace qtune
