// `qtune report`: every chart, series and table is there (HTML, Markdown, CSV), an empty store gives a clear page, and
// the page renders in headless Chromium with every chart drawn.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <ctime>
#include <cstdlib>
#include <set>
#include <sstream>

#include "kernels/text_escape.hpp"
#include "reports/external_import.hpp"
#include "reports/report.hpp"
#include "reports/table.hpp"
#include "reports/tuning_data.hpp"
#include "tests/reports/report_test_support.hpp"

namespace qtune::reports {
namespace {

namespace fs = std::filesystem;
using testing::FixtureSpec;
using testing::TempDir;

int count(const std::string& text, const std::string& fragment) {
  int found = 0;
  for (std::size_t at = text.find(fragment); at != std::string::npos; at = text.find(fragment, at + fragment.size())) ++found;
  return found;
}

// The <svg ...> ... </svg> element with the given id, or "" if there is none.
std::string svg_element(const std::string& page, const std::string& id) {
  const std::size_t at = page.find("id=\"" + id + "\"");
  if (at == std::string::npos) return "";
  const std::size_t start = page.rfind("<svg", at);
  const std::size_t end = page.find("</svg>", at);
  if (start == std::string::npos || end == std::string::npos) return "";
  return page.substr(start, end + 6 - start);
}

class ReportFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::write_fixture_db(dir_ / "qtune.db", spec_);
    db::Store store = db::Store::open(dir_ / "qtune.db");
    store_external_file(store, read_external_file(testing::test_data("h200_dense_n8192_k8192_g0_humming_w4a16_int4_float16.json")));
    // A dense f16 GEMM measured elsewhere: shown beside both formats' N=K=8192 shape.
    testing::write_text(dir_ / "torch.csv", "format,m,n,k,time_us,label,gpu,source,timing\nf16,1,8192,8192,50.1,torch f16,H200,torch,cuda-event-mean\n"
                                            "f16,64,8192,8192,45.3,torch f16,H200,torch,cuda-event-mean\n");
    store_external_file(store, read_external_file(dir_ / "torch.csv"));
  }

  ReportResult write(const fs::path& out) {
    db::Store store = db::Store::open_read_only(dir_ / "qtune.db");
    ReportOptions options;
    options.database_label = "qtune.db";
    return write_report(store, out, options);
  }

  std::size_t expected_charts() const { return spec_.formats.size() * (1 + 3 * spec_.shapes.size()); }

  FixtureSpec spec_;
  TempDir dir_;
};

TEST_F(ReportFixture, WritesEveryChartSeriesAndTable) {
  const fs::path out = dir_ / "report";
  const ReportResult result = write(out);
  EXPECT_FALSE(result.empty);
  ASSERT_EQ(result.chart_ids.size(), expected_charts());

  const std::string html = testing::file_text(out / "index.html");
  EXPECT_EQ(count(html, "<svg "), static_cast<int>(expected_charts()));
  // Self-contained: no script, no external resource.
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(count(html, "http://"), count(html, "http://www.w3.org/2000/svg"));  // only the SVG namespace name
  EXPECT_EQ(html.find("https://"), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
  EXPECT_EQ(html.find("<img"), std::string::npos);

  for (const std::string& id : result.chart_ids) {
    const std::string svg = svg_element(html, id);
    ASSERT_FALSE(svg.empty()) << id;
    EXPECT_NE(svg.find("class=\"series\""), std::string::npos) << id;
    EXPECT_NE(svg.find("class=\"x-label\""), std::string::npos) << id;
    EXPECT_NE(svg.find("class=\"y-label\""), std::string::npos) << id;
    EXPECT_NE(svg.find("class=\"legend-entry\""), std::string::npos) << id;
    EXPECT_NE(svg.find("<title>"), std::string::npos) << id;
  }
  // The shape with the imports has every kind of series: tuned, heuristic, baseline, external (labelled with their timing).
  const std::string time_chart = svg_element(html, "time-h200-w4a16-int4-ch-n8192-k8192");
  for (const std::string series : {"tuned table", "heuristic", "cublaslt-f16", "humming (external, CUDA-event mean)",
                                   "torch f16 [f16 dense] (external, CUDA-event mean)"}) {
    EXPECT_NE(time_chart.find("data-series=\"" + series + "\""), std::string::npos) << series;
  }
  const std::string roofline = svg_element(html, "roofline-h200-w8a8-fp8-ch");
  EXPECT_NE(roofline.find("memory roof: datasheet 4800 GB/s"), std::string::npos);
  EXPECT_NE(roofline.find("compute roof: 1979 TFLOP/s"), std::string::npos);
  EXPECT_NE(html.find("Tuned table against the heuristic"), std::string::npos);
  EXPECT_NE(html.find("The tuned table is nowhere slower than the heuristic."), std::string::npos);
  EXPECT_NE(html.find("Imported external results"), std::string::npos);

  // Markdown: the same sections, charts as SVG files beside it.
  const std::string markdown = testing::file_text(out / "report.md");
  for (const std::string& id : result.chart_ids) {
    EXPECT_NE(markdown.find("(charts/" + id + ".svg)"), std::string::npos) << id;
    const std::string svg = testing::file_text(out / "charts" / (id + ".svg"));
    EXPECT_EQ(svg.rfind("<?xml", 0), 0u) << id;
    EXPECT_NE(svg.find("class=\"series\""), std::string::npos) << id;
  }
  EXPECT_NE(markdown.find("## GPU h200"), std::string::npos);
  EXPECT_NE(markdown.find("| M |"), std::string::npos);
}

TEST_F(ReportFixture, CsvAndVerdictsMatchTheStore) {
  const fs::path out = dir_ / "report";
  write(out);
  const std::size_t cells = spec_.formats.size() * spec_.shapes.size() * spec_.m_buckets.size();
  auto lines = [](const std::string& text) { return static_cast<std::size_t>(count(text, "\n")); };
  // tuned, heuristic and the baseline everywhere; 15 + 2 external rows under w4a16 8192x8192, 2 more under w8a8's.
  EXPECT_EQ(lines(testing::file_text(out / "cells.csv")), 1 + 3 * cells + 15 + 2 + 2);
  const std::string verdicts = testing::file_text(out / "tuned_vs_heuristic.csv");
  EXPECT_EQ(lines(verdicts), 1 + cells);
  // Recompute the wins from the fixture's own time model: the winner is the fastest config, the heuristic is measured.
  int wins = 0;
  for (const std::string& format : spec_.formats) {
    for (const testing::Shape& shape : spec_.shapes) {
      for (const std::int64_t m : spec_.m_buckets) {
        double best = 1e300;
        for (const KernelConfig& config : testing::fixture_configs()) best = std::min(best, testing::synthetic_time_us(format, config, m, shape.n, shape.k));
        wins += testing::synthetic_time_us(format, testing::synthetic_heuristic(m), m, shape.n, shape.k) / best >= 1.01;
      }
    }
  }
  EXPECT_GT(wins, 0);
  EXPECT_EQ(count(verdicts, ",win\n"), wins);
  EXPECT_EQ(count(verdicts, ",loss"), 0);
  const std::string summary = testing::file_text(out / "summary.csv");
  EXPECT_NE(summary.find("h200,w4a16-int4-ch,heuristic,52,"), std::string::npos) << summary;
  EXPECT_NE(summary.find("h200,w4a16-int4-ch,cublaslt-f16,52,"), std::string::npos) << summary;
}

TEST(ReportEmpty, AnEmptyStoreGivesAClearPage) {
  TempDir dir;
  { db::Store::open(dir / "empty.db"); }
  db::Store store = db::Store::open_read_only(dir / "empty.db");
  ReportOptions options;
  options.database_label = "empty.db";
  const ReportResult result = write_report(store, dir / "report", options);
  EXPECT_TRUE(result.empty);
  EXPECT_TRUE(result.chart_ids.empty());
  EXPECT_NE(result.message.find("No measurements"), std::string::npos) << result.message;
  EXPECT_NE(result.message.find("qtune tune"), std::string::npos) << result.message;
  const std::string html = testing::file_text(dir / "report" / "index.html");
  EXPECT_NE(html.find("<p class=\"empty\">No measurements, winners or external results in empty.db"), std::string::npos) << html;
  EXPECT_TRUE(fs::exists(dir / "report" / "cells.csv"));
  EXPECT_EQ(testing::run_qtune({"report", "--db", (dir / "empty.db").string(), "-o", (dir / "cli").string()}), 0);
  EXPECT_TRUE(fs::exists(dir / "cli" / "index.html"));
}

TEST(ReportEmpty, OnlyImportedResultsStillMakeCharts) {
  TempDir dir;
  db::Store store = db::Store::open(dir / "imports.db");
  store_external_file(store, read_external_file(testing::test_data("h200_dense_n8192_k8192_g0_humming_w4a16_int4_float16.json")));
  const ReportResult result = write_report(store, dir / "report");
  EXPECT_FALSE(result.empty);
  EXPECT_EQ(result.chart_ids.size(), 4u);  // roofline + time, bandwidth, TFLOP/s
  const std::string html = testing::file_text(dir / "report" / "index.html");
  EXPECT_NE(html.find("No qtune runs measured on this GPU"), std::string::npos);
}

// The report opens with the headline: per shape, the tuned table against the heuristic and cuBLASLt, and the winners' family.
TEST_F(ReportFixture, OpensWithTheHeadlineAgainstTheHeuristicAndCublaslt) {
  const fs::path out = dir_ / "report";
  write(out);
  const std::string markdown = testing::file_text(out / "report.md");
  const std::size_t headline = markdown.find("## Headline: the tuned table against the heuristic and cuBLASLt");
  ASSERT_NE(headline, std::string::npos);
  EXPECT_LT(headline, markdown.find("## GPU h200"));
  EXPECT_LT(headline, markdown.find("qtune's own times"));
  // One row per tuned shape; the w4a16 N=K=8192 row's speedup over the heuristic is the fixture's own.
  std::vector<double> ratios;
  for (const std::int64_t m : spec_.m_buckets) {
    double best = 1e300;
    for (const KernelConfig& config : testing::fixture_configs()) best = std::min(best, testing::synthetic_time_us("w4a16-int4-ch", config, m, 8192, 8192));
    ratios.push_back(testing::synthetic_time_us("w4a16-int4-ch", testing::synthetic_heuristic(m), m, 8192, 8192) / best);
  }
  const std::string row_start = "| h200 | w4a16-int4-ch | 8192 x 8192 | 1-4096 | mma | " + fixed(*geometric_mean(ratios), 3) + "x | ";
  const std::size_t row = markdown.find(row_start, headline);
  ASSERT_NE(row, std::string::npos) << markdown.substr(headline, 2000);
  const std::string line = markdown.substr(row, markdown.find('\n', row) - row);
  EXPECT_NE(line.find(" of 13 |"), std::string::npos) << line;
  EXPECT_EQ(line.find("| - |"), std::string::npos) << "cuBLASLt was measured on every cell: " << line;
  EXPECT_EQ(count(markdown.substr(headline, markdown.find("## GPU h200") - headline), "| h200 |"),
            static_cast<int>(spec_.formats.size() * spec_.shapes.size()));
  // Each shape's table names the winner's family per M.
  EXPECT_NE(markdown.find("| M | tuned family | tuned table (us) |"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------------- Chromium

const char* const kChromium = "/usr/bin/chromium";

std::string run_command(const std::string& command, int* status) {
  std::string output;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return "";
  std::array<char, 65536> buffer{};
  std::size_t read = 0;
  while ((read = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), read);
  *status = ::pclose(pipe);
  return output;
}

std::string chromium_command(const fs::path& profile, const std::string& action, const fs::path& page) {
  return std::string("timeout 180 ") + kChromium +
         " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking"
         " --disable-component-update --disable-sync --disable-dev-shm-usage --hide-scrollbars --user-data-dir=" + profile.string() +
         " " + action + " --window-size=1366,3000 file://" + fs::absolute(page).string();
}

struct PngHeader {
  std::uint32_t width = 0;
  std::uint32_t height = 0;
};

// Checks the PNG signature and reads the IHDR size.
std::optional<PngHeader> png_header(const std::string& bytes) {
  static const std::string signature = "\x89PNG\r\n\x1a\n";
  if (bytes.size() < 33 || bytes.compare(0, 8, signature) != 0 || bytes.compare(12, 4, "IHDR") != 0) return std::nullopt;
  auto big_endian = [&](std::size_t at) {
    std::uint32_t value = 0;
    for (std::size_t i = 0; i < 4; ++i) value = (value << 8) | static_cast<unsigned char>(bytes[at + i]);
    return value;
  };
  return PngHeader{big_endian(16), big_endian(20)};
}

TEST_F(ReportFixture, RendersInHeadlessChromiumWithEveryChart) {
  if (!fs::exists(kChromium)) {
    FAIL() << kChromium << " is missing: the report screenshot test needs Debian's chromium package; run scripts/install-deps.sh";
  }
  const fs::path out = dir_ / "report";
  const ReportResult result = write(out);
  ASSERT_EQ(result.chart_ids.size(), expected_charts());

  // The DOM as Chromium built it: every chart is an <svg class="chart"> with its data paths.
  int status = 0;
  const std::string dom = run_command(chromium_command(dir_ / "profile-dom", "--dump-dom", out / "index.html") + " 2>/dev/null", &status);
  ASSERT_EQ(status, 0) << "chromium --dump-dom failed";
  EXPECT_EQ(count(dom, "class=\"chart\""), static_cast<int>(expected_charts()));
  for (const std::string& id : result.chart_ids) {
    const std::string svg = svg_element(dom, id);
    ASSERT_FALSE(svg.empty()) << "chart " << id << " is not in Chromium's DOM";
    EXPECT_NE(svg.find("class=\"series\""), std::string::npos) << id;
    EXPECT_NE(svg.find(" d=\"M"), std::string::npos) << id;
  }
  EXPECT_NE(dom.find("external, CUDA-event mean"), std::string::npos);

  // The screenshot: a real PNG of the requested size, far richer than a blank page's.
  const fs::path screenshot = dir_ / "report.png";
  const std::string log = run_command(chromium_command(dir_ / "profile-shot", "--screenshot=" + screenshot.string(), out / "index.html") + " 2>&1", &status);
  ASSERT_EQ(status, 0) << log;
  ASSERT_TRUE(fs::exists(screenshot)) << log;
  const std::string png = testing::file_text(screenshot);
  const auto header = png_header(png);
  ASSERT_TRUE(header) << "not a PNG: " << screenshot;
  EXPECT_EQ(header->width, 1366u);  // a laptop screen: the times and speedups must stay visible
  EXPECT_EQ(header->height, 3000u);

  testing::write_text(dir_ / "blank.html", "<!DOCTYPE html><html><body></body></html>");
  const fs::path blank = dir_ / "blank.png";
  run_command(chromium_command(dir_ / "profile-blank", "--screenshot=" + blank.string(), dir_ / "blank.html") + " 2>&1", &status);
  ASSERT_EQ(status, 0);
  const std::size_t blank_size = fs::file_size(blank);
  // A single-colour page compresses to almost nothing; charts, text and tables do not.
  EXPECT_GT(png.size(), 10 * blank_size) << "report " << png.size() << " bytes, blank page " << blank_size << " bytes";
  EXPECT_GT(png.size(), 50u * 1024u);
}

// ---------------------------------------------------------------------------------------------------- hostile text

// A CSV of external results for one shape: one row per (label, gpu).
std::string external_csv(const std::vector<std::pair<std::string, std::string>>& label_and_gpu) {
  std::string csv = "format,m,n,k,time_us,label,gpu,source\n";
  for (const auto& [label, gpu] : label_and_gpu) csv += "f16,64,4096,4096,10," + csv_field(label) + "," + csv_field(gpu) + ",elsewhere\n";
  return csv;
}

// Defect 1 of issue 18: labels reach HTML, SVG and Markdown escaped for each, and a newline never breaks a table row.
TEST(ReportEscaping, ImportedTextIsEscapedForEveryLanguage) {
  TempDir dir;
  db::Store store = db::Store::open(dir / "x.db");
  const std::string label = "<script>alert(1)</script>\n| broken | row & `code` *bold*";
  testing::write_text(dir / "x.csv", external_csv({{label, "H200"}}));
  store_external_file(store, read_external_file(dir / "x.csv"));
  write_report(store, dir / "report");

  const std::string html = testing::file_text(dir / "report" / "index.html");
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  const std::string markdown = testing::file_text(dir / "report" / "report.md");
  for (std::size_t at = markdown.find('<'); at != std::string::npos; at = markdown.find('<', at + 1)) {
    EXPECT_TRUE(at > 0 && markdown[at - 1] == '\\') << "raw HTML in the Markdown: " << markdown.substr(at, 40);
  }
  EXPECT_NE(markdown.find("\\<script\\>alert(1)\\</script\\> \\| broken \\| row \\& \\`code\\` \\*bold\\*"), std::string::npos) << markdown;
  // Every line of a Markdown table is a whole row: it starts and ends with '|'.
  std::istringstream lines(markdown);
  bool in_table = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("|", 0) == 0) in_table = true;
    if (line.empty()) in_table = false;
    if (in_table) {
      EXPECT_TRUE(line.front() == '|' && line.back() == '|') << line;
    }
  }
  for (const auto& entry : fs::directory_iterator(dir / "report" / "charts")) {
    EXPECT_EQ(testing::file_text(entry.path()).find("<script"), std::string::npos) << entry.path();
  }
}

// Defect 5 of issue 18: free-text GPU names give unique, short ids and file names.
TEST(ReportNames, FreeTextGpuNamesGiveUniqueIdsAndFiles) {
  TempDir dir;
  db::Store store = db::Store::open(dir / "x.db");
  const std::string long_name(300, 'g');
  testing::write_text(dir / "x.csv", external_csv({{"a", "Foo GPU"}, {"a", "foo-gpu"}, {"a", long_name}, {"a", "\xe6\x97\xa5\xe6\x9c\xac GPU"}}));
  store_external_file(store, read_external_file(dir / "x.csv"));
  const ReportResult result = write_report(store, dir / "report");
  ASSERT_EQ(result.chart_ids.size(), 4u * 4u);  // per GPU: roofline + time, bandwidth, TFLOP/s
  EXPECT_EQ(std::set<std::string>(result.chart_ids.begin(), result.chart_ids.end()).size(), result.chart_ids.size());
  std::size_t svg_files = 0;
  for (const auto& entry : fs::directory_iterator(dir / "report" / "charts")) {
    ++svg_files;
    EXPECT_LE(entry.path().filename().string().size(), 120u) << entry.path();
  }
  EXPECT_EQ(svg_files, result.chart_ids.size());
  // No id appears twice in the page (headings and charts share one id space).
  const std::string html = testing::file_text(dir / "report" / "index.html");
  std::set<std::string> ids;
  for (std::size_t at = html.find(" id=\""); at != std::string::npos; at = html.find(" id=\"", at + 1)) {
    const std::size_t start = at + 5;
    const std::string id = html.substr(start, html.find('"', start) - start);
    EXPECT_TRUE(ids.insert(id).second) << "duplicate id " << id;
    EXPECT_EQ(id.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-"), std::string::npos) << id;
  }
}

// Defect 5 of issue 18: a report is written whole or not at all.
TEST(ReportFiles, AFailedReportLeavesNothingHalfWritten) {
  TempDir dir;
  db::Store store = db::Store::open(dir / "x.db");
  testing::write_text(dir / "x.csv", external_csv({{"a", "H200"}}));
  store_external_file(store, read_external_file(dir / "x.csv"));
  const ReportResult first = write_report(store, dir / "first");
  ASSERT_FALSE(first.chart_ids.empty());
  // A folder where the last chart's file belongs makes that file unwritable.
  const fs::path out = dir / "second";
  fs::create_directories(out / "charts" / (first.chart_ids.back() + ".svg") / "in-the-way");
  EXPECT_ANY_THROW(write_report(store, out));
  std::vector<std::string> left;
  for (const auto& entry : fs::recursive_directory_iterator(out)) left.push_back(fs::relative(entry.path(), out).string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"charts", "charts/" + first.chart_ids.back() + ".svg",
                                            "charts/" + first.chart_ids.back() + ".svg/in-the-way"}));
  // A report into a folder that did not exist leaves no folder behind.
  const fs::path missing = dir / "missing" / "report";
  fs::create_directories(dir / "missing");
  testing::write_text(dir / "missing" / "report", "a file where the folder should be");
  EXPECT_ANY_THROW(write_report(store, missing / "inner"));
  EXPECT_FALSE(fs::exists(missing / "inner"));
}

// Defect 15 of issue 18: the report's time grows linearly with its series (one per imported label), not with their
// square (every series was found by a linear search: 20000 labels took 15 s, 40000 took 63 s).
TEST(ReportScale, TimeGrowsLinearlyWithTheSeries) {
  TempDir dir;
  // The best of two reports of a store with `labels` imported labels, in seconds of this process's CPU time (wall time
  // would also count the other processes of a loaded machine and the kernel's writeback).
  auto report_seconds = [&](int labels) {
    const std::string name = "l" + std::to_string(labels);
    db::Store store = db::Store::open(dir / (name + ".db"));
    std::vector<std::pair<std::string, std::string>> rows;
    // Labels of one length that differ only at the end: every comparison of two names reads all of them.
    for (int i = 0; i < labels; ++i) rows.emplace_back(std::string(400, 'k') + std::to_string(100000 + i), "H200");
    testing::write_text(dir / (name + ".csv"), external_csv(rows));
    store_external_file(store, read_external_file(dir / (name + ".csv")));
    double best = 1e300;
    for (int run = 0; run < 2; ++run) {
      const std::clock_t start = std::clock();
      EXPECT_EQ(write_report(store, dir / name).chart_ids.size(), 4u);
      best = std::min(best, static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC);
    }
    return best;
  };
  const double small = report_seconds(2500);
  const double large = report_seconds(20000);
  // Eight times the series: 10-14 times the time with the index (n log n over long names, and a working set that
  // leaves the caches: 4x the labels measured 5.0-7.2x, too close to the linear search's 7-8x to tell them apart),
  // 64 times when quadratic.
  EXPECT_LT(large / small, 24.0) << small << " s for 2500 labels, " << large << " s for 20000";
}

}  // namespace
}  // namespace qtune::reports
