// `qtune import`: Humming result files, generic JSON and CSV, errors that name the file and field, and all-or-nothing
// storage per file.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "kernels/error.hpp"
#include "reports/external_import.hpp"
#include "tests/common/expect_error.hpp"
#include "tests/reports/report_test_support.hpp"
#include "tuner/cli/cli.hpp"

namespace qtune::reports {

namespace testing {
int run_qtune(std::vector<std::string> args) {
  args.insert(args.begin(), "qtune");
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  return cli::run_cli(static_cast<int>(args.size()), argv.data());
}
}  // namespace testing

namespace {

namespace fs = std::filesystem;
using testing::TempDir;

const char* const kHummingSample = "h200_dense_n8192_k8192_g0_humming_w4a16_int4_float16.json";

// A Humming-style file with the given problem object and two M results.
nlohmann::json humming_file(nlohmann::json problem) {
  return {{"problem", std::move(problem)},
          {"device", {{"device_name", "NVIDIA H200"}, {"memory_gbps", 4916.7}}},
          {"result", {{"1", {{"time", 0.0301}}}, {"64", {{"time", 0.0322}}}}}};
}

using test_support::expect_input_error;

TEST(ImportHumming, ReadsThePublishedSampleAsCudaEventMeans) {
  const ExternalFile file = read_external_file(testing::test_data(kHummingSample));
  EXPECT_EQ(file.kind, ExternalFileKind::Humming);
  ASSERT_EQ(file.rows.size(), 15u);  // M = 1 .. 16384
  const nlohmann::json sample = nlohmann::json::parse(testing::file_text(testing::test_data(kHummingSample)));
  for (const ExternalRow& row : file.rows) {
    EXPECT_EQ(row.problem.format, "w4a16-int4-ch");
    EXPECT_EQ(row.problem.n, 8192);
    EXPECT_EQ(row.problem.k, 8192);
    EXPECT_EQ(row.gpu, "h200");  // "NVIDIA H200" matched to the profile
    EXPECT_EQ(row.source, "humming");
    EXPECT_EQ(row.label, "humming");  // the kernel named in the file name
    // Milliseconds in the file, microseconds in the store.
    EXPECT_DOUBLE_EQ(row.time_us, sample["result"][std::to_string(row.problem.m)]["time"].get<double>() * 1000.0);
    const nlohmann::json notes = nlohmann::json::parse(row.notes);
    EXPECT_EQ(notes["timing"], "cuda-event-mean");
    EXPECT_EQ(notes["file"], kHummingSample);
    EXPECT_NE(notes["timing_detail"].get<std::string>().find("not CUPTI"), std::string::npos);
  }
}

TEST(ImportHumming, StoresOnceAndReplacesOnReimport) {
  TempDir dir;
  const std::string db = (dir / "qtune.db").string();
  ASSERT_EQ(testing::run_qtune({"import", testing::test_data(kHummingSample).string(), "--db", db}), 0);
  ASSERT_EQ(testing::run_qtune({"import", testing::test_data(kHummingSample).string(), "--db", db}), 0);
  db::Store store = db::Store::open_read_only(db);
  const auto results = store.list_external_results();
  ASSERT_EQ(results.size(), 15u);
  const auto problem = store.find_problem({"w4a16-int4-ch", 1, 8192, 8192});
  ASSERT_TRUE(problem);
  const auto at_one = store.list_external_results(*problem);
  ASSERT_EQ(at_one.size(), 1u);
  EXPECT_NEAR(at_one[0].time_us, 22.42220613912436, 1e-9);
  EXPECT_EQ(timing_of(at_one[0]), "cuda-event-mean");
  EXPECT_EQ(timing_legend(timing_of(at_one[0])), "external, CUDA-event mean");

  // --label and --gpu replace the file's own.
  ASSERT_EQ(testing::run_qtune({"import", testing::test_data(kHummingSample).string(), "--db", db, "--label", "humming 2025-11", "--gpu", "H100"}), 0);
  db::Store after = db::Store::open_read_only(db);
  int relabelled = 0;
  for (const auto& result : after.list_external_results()) relabelled += result.label == "humming 2025-11" && result.gpu == "h100";
  EXPECT_EQ(relabelled, 15);
}

TEST(ImportHumming, MapsProblemFieldsToFormats) {
  TempDir dir;
  auto format_of = [&](const nlohmann::json& problem, const std::string& name) {
    testing::write_text(dir / name, humming_file(problem).dump());
    return read_external_file(dir / name).rows.at(0).problem.format;
  };
  const nlohmann::json base = {{"shape_n", 8192}, {"shape_k", 8192}, {"a_dtype", "float16"}, {"b_dtype", "int4"}, {"bs_dtype", "float16"},
                               {"c_dtype", "float16"}, {"input_scale_group_size", 0}, {"weight_scale_group_size", 0},
                               {"zero_point", false}, {"use_fp_zero_point", false}};
  EXPECT_EQ(format_of(base, "a.json"), "w4a16-int4-ch");
  nlohmann::json grouped = base;
  grouped["weight_scale_group_size"] = 128;
  EXPECT_EQ(format_of(grouped, "b.json"), "w4a16-int4-g128");
  nlohmann::json zero_point = grouped;
  zero_point["b_dtype"] = "uint4";
  zero_point["zero_point"] = true;
  EXPECT_EQ(format_of(zero_point, "c.json"), "w4a16-int4-g128-zp");
  nlohmann::json fp8 = base;
  fp8["a_dtype"] = "float8e4m3";
  fp8["b_dtype"] = "float8e4m3";
  EXPECT_EQ(format_of(fp8, "h200_dense_n8192_k8192_g0_humming_w8a8_float8e4m3_float8e4m3.json"), "w8a8-fp8-ch:scale=f16");
  nlohmann::json bf16_out = base;
  bf16_out["c_dtype"] = "bfloat16";
  EXPECT_EQ(format_of(bf16_out, "d.json"), "w4a16-int4-ch:out=bf16");
  EXPECT_EQ(format_of({{"shape_n", 8192}, {"shape_k", 8192}, {"dtype", "float16"}}, "h200_dense_n8192_k8192_g0_torch_w16a16_float16.json"), "f16");
  EXPECT_EQ(read_external_file(dir / "h200_dense_n8192_k8192_g0_torch_w16a16_float16.json").rows.at(0).label, "torch");

  // --format replaces what the file says (and the notes keep the original).
  ImportOptions options;
  options.format = "w8a8-fp8-ch";
  const ExternalFile replaced = read_external_file(dir / "h200_dense_n8192_k8192_g0_humming_w8a8_float8e4m3_float8e4m3.json", options);
  EXPECT_EQ(replaced.rows.at(0).problem.format, "w8a8-fp8-ch");
  EXPECT_EQ(nlohmann::json::parse(replaced.rows.at(0).notes)["format_in_file"], "w8a8-fp8-ch:scale=f16");
}

TEST(ImportHumming, BadFilesNameTheFileAndTheField) {
  TempDir dir;
  const nlohmann::json base = {{"shape_n", 8192}, {"shape_k", 8192}, {"a_dtype", "float16"}, {"b_dtype", "int4"}};
  auto write = [&](const std::string& name, const nlohmann::json& json) {
    testing::write_text(dir / name, json.dump());
    return dir / name;
  };
  nlohmann::json moe = base;
  moe["num_experts"] = 256;
  moe["top_k"] = 8;
  const auto moe_file = write("moe.json", humming_file(moe));
  expect_input_error([&] { read_external_file(moe_file); }, {moe_file.string(), "problem.num_experts", "not a dense GEMM"});
  nlohmann::json bad_type = base;
  bad_type["b_dtype"] = "int99";
  const auto type_file = write("type.json", humming_file(bad_type));
  expect_input_error([&] { read_external_file(type_file); }, {type_file.string(), "problem.b_dtype"});
  nlohmann::json no_n = base;
  no_n.erase("shape_n");
  const auto n_file = write("n.json", humming_file(no_n));
  expect_input_error([&] { read_external_file(n_file); }, {n_file.string(), "problem.shape_n"});
  nlohmann::json bad_time = humming_file(base);
  bad_time["result"]["64"]["time"] = -1;
  const auto time_file = write("time.json", bad_time);
  expect_input_error([&] { read_external_file(time_file); }, {time_file.string(), "result.64.time"});
  nlohmann::json bad_m = humming_file(base);
  bad_m["result"]["sixty"] = {{"time", 0.1}};
  const auto m_file = write("m.json", bad_m);
  expect_input_error([&] { read_external_file(m_file); }, {m_file.string(), "result.sixty"});
  testing::write_text(dir / "broken.json", "{\"problem\": ");
  expect_input_error([&] { read_external_file(dir / "broken.json"); }, {"broken.json", "invalid JSON"});
}

TEST(ImportGeneric, ReadsJsonListsAndCsv) {
  TempDir dir;
  const nlohmann::json list = nlohmann::json::array(
      {{{"format", "w8a8-fp8-ch"}, {"m", 16}, {"n", 7168}, {"k", 2048}, {"time_us", 9.5}, {"label", "DeepGEMM"}, {"gpu", "NVIDIA H200"},
        {"source", "deepgemm"}, {"timing", "cupti-median"}},
       {{"format", "W4A16-INT4-CH"}, {"m", 1}, {"n", 8192}, {"k", 8192}, {"time_us", "21.5"}, {"label", "marlin"}, {"gpu", "h200"}}});
  testing::write_text(dir / "runs.json", list.dump());
  const ExternalFile json = read_external_file(dir / "runs.json");
  EXPECT_EQ(json.kind, ExternalFileKind::JsonList);
  ASSERT_EQ(json.rows.size(), 2u);
  EXPECT_EQ(json.rows[0].gpu, "h200");
  EXPECT_EQ(json.rows[0].source, "deepgemm");
  EXPECT_EQ(nlohmann::json::parse(json.rows[0].notes)["timing"], "cupti-median");
  EXPECT_EQ(json.rows[1].problem.format, "w4a16-int4-ch");  // canonical text
  EXPECT_EQ(json.rows[1].source, "runs");                   // the file name when no source is given
  EXPECT_DOUBLE_EQ(json.rows[1].time_us, 21.5);

  testing::write_text(dir / "runs.csv",
                      "format,m,n,k,time_us,label,gpu,source,notes\n"
                      "\"w8a8-fp8-ch:scale=f16,act-scale=token\",32,7168,2048,11.25,DeepGEMM,H200,deepgemm,\"tuned, JIT\"\n"
                      "\n"
                      "f16,32,7168,2048,20.0,cublas,H200,torch,\n");
  ImportOptions options;
  options.timing = "cuda-event-median";
  const ExternalFile csv = read_external_file(dir / "runs.csv", options);
  EXPECT_EQ(csv.kind, ExternalFileKind::Csv);
  ASSERT_EQ(csv.rows.size(), 2u);
  EXPECT_EQ(csv.rows[0].problem.format, "w8a8-fp8-ch:scale=f16");
  EXPECT_EQ(nlohmann::json::parse(csv.rows[0].notes)["notes"], "tuned, JIT");
  EXPECT_EQ(nlohmann::json::parse(csv.rows[0].notes)["timing"], "cuda-event-median");
  EXPECT_EQ(csv.rows[1].problem.format, "f16");
  EXPECT_DOUBLE_EQ(csv.rows[1].time_us, 20.0);
}

TEST(ImportGeneric, BadRowsNameTheFileLineAndColumn) {
  TempDir dir;
  testing::write_text(dir / "bad.csv", "format,m,n,k,time_us,label,gpu\nw4a16-int4-ch,1,8192,8192,20,a,h200\nw4a16-int4-ch,2,8192,8192,fast,a,h200\n");
  expect_input_error([&] { read_external_file(dir / "bad.csv"); }, {"bad.csv", "line 3", "field 'time_us'"});
  testing::write_text(dir / "column.csv", "format,m,n,k,time,label,gpu\n");
  expect_input_error([&] { read_external_file(dir / "column.csv"); }, {"column.csv", "field 'time'", "unknown column"});
  testing::write_text(dir / "shape.csv", "format,m,n,k,time_us,label,gpu\nw4a16-int4-g128,1,8192,100,20,a,h200\n");
  expect_input_error([&] { read_external_file(dir / "shape.csv"); }, {"shape.csv", "line 2", "field 'format'"});
  testing::write_text(dir / "nogpu.json", R"([{"format": "w4a16-int4-ch", "m": 1, "n": 64, "k": 64, "time_us": 3, "label": "x"}])");
  expect_input_error([&] { read_external_file(dir / "nogpu.json"); }, {"nogpu.json", "[0]", "field 'gpu'"});
  testing::write_text(dir / "typo.json", R"({"results": [{"fromat": "w4a16-int4-ch"}]})");
  expect_input_error([&] { read_external_file(dir / "typo.json"); }, {"typo.json", "results[0].fromat", "unknown field"});
  testing::write_text(dir / "twice.json", R"([{"format": "f16", "m": 1, "n": 64, "k": 64, "time_us": 3, "label": "x", "gpu": "h200"},
                                              {"format": "f16", "m": 1, "n": 64, "k": 64, "time_us": 4, "label": "x", "gpu": "h200"}])");
  expect_input_error([&] { read_external_file(dir / "twice.json"); }, {"twice.json", "two results"});
}

TEST(ImportGeneric, AFileIsStoredWhollyOrNotAtAll) {
  TempDir dir;
  const std::string db = (dir / "qtune.db").string();
  // The command reads every file before storing any: a bad second file leaves the first unstored too.
  testing::write_text(dir / "good.csv", "format,m,n,k,time_us,label,gpu\nf16,1,64,64,3,x,h200\n");
  testing::write_text(dir / "bad.csv", "format,m,n,k,time_us,label,gpu\nf16,1,64,64,3,x,h200\nf16,0,64,64,3,x,h200\n");
  EXPECT_EQ(testing::run_qtune({"import", (dir / "good.csv").string(), (dir / "bad.csv").string(), "--db", db}), 2);
  if (fs::exists(db)) {
    EXPECT_EQ(db::Store::open_read_only(db).list_external_results().size(), 0u);
  }

  // A failure while storing (here: a row the store refuses, after rows it accepted) rolls the whole file back.
  ExternalFile file = read_external_file(dir / "good.csv");
  ExternalRow refused = file.rows[0];
  refused.problem.m = 2;
  refused.time_us = -5;  // the store refuses a negative time
  file.rows.push_back(refused);
  db::Store store = db::Store::open(db);
  EXPECT_ANY_THROW(store_external_file(store, file));
  EXPECT_EQ(store.list_external_results().size(), 0u);
  file.rows.pop_back();
  EXPECT_EQ(store_external_file(store, file), 1u);
  EXPECT_EQ(store.list_external_results().size(), 1u);
}

TEST(ImportGeneric, DuplicateCsvRowsAreRefusedAsInJson) {
  TempDir dir;
  const std::string db = (dir / "qtune.db").string();
  testing::write_text(dir / "twice.csv", "format,m,n,k,time_us,label,gpu\nf16,1,64,64,3,x,h200\nf16,1,64,64,4,x,h200\n");
  expect_input_error([&] { read_external_file(dir / "twice.csv"); }, {"twice.csv", "two results", "f16 m=1 n=64 k=64 on 'h200'"});
  EXPECT_EQ(testing::run_qtune({"import", (dir / "twice.csv").string(), "--db", db}), 2);
  EXPECT_FALSE(fs::exists(db));  // the file is read whole before the database is opened
}

TEST(ImportHumming, ATimeMustBeFinitePositiveAndAtMostAnHour) {
  TempDir dir;
  const std::string db = (dir / "qtune.db").string();
  const nlohmann::json problem = {{"shape_n", 8192}, {"shape_k", 8192}, {"a_dtype", "float16"}, {"b_dtype", "int4"}};
  for (const double milliseconds : {1e306, 3.6e6 * 1.01, 0.0}) {
    nlohmann::json file = humming_file(problem);
    file["result"]["64"]["time"] = milliseconds;
    testing::write_text(dir / "time.json", file.dump());
    expect_input_error([&] { read_external_file(dir / "time.json"); }, {"time.json", "field 'result.64.time'"});
    EXPECT_EQ(testing::run_qtune({"import", (dir / "time.json").string(), "--db", db}), 2) << milliseconds;
  }
  nlohmann::json longest = humming_file(problem);
  longest["result"]["64"]["time"] = 3.6e6;  // one hour: slow, but a time
  testing::write_text(dir / "hour.json", longest.dump());
  EXPECT_DOUBLE_EQ(read_external_file(dir / "hour.json").rows.at(1).time_us, 3.6e9);
  // The same bound in CSV.
  testing::write_text(dir / "time.csv", "format,m,n,k,time_us,label,gpu\nf16,1,64,64,1e306,x,h200\n");
  expect_input_error([&] { read_external_file(dir / "time.csv"); }, {"time.csv", "line 2", "field 'time_us'", "longer than an hour"});
}

TEST(ImportHumming, AShapeTheFormatCannotTakeIsRefusedAsInCsv) {
  TempDir dir;
  const nlohmann::json problem = {{"shape_n", 8192}, {"shape_k", 8200}, {"a_dtype", "float16"}, {"b_dtype", "int4"},
                                  {"weight_scale_group_size", 128}};
  testing::write_text(dir / "g128.json", humming_file(problem).dump());
  expect_input_error([&] { read_external_file(dir / "g128.json"); }, {"g128.json", "field 'problem'", "K=8200", "group size"});
  testing::write_text(dir / "g128.csv", "format,m,n,k,time_us,label,gpu\nw4a16-int4-g128,1,8192,8200,20,a,h200\n");
  expect_input_error([&] { read_external_file(dir / "g128.csv"); }, {"g128.csv", "field 'format'", "K=8200", "group size"});
}

TEST(ImportHumming, EverySharedSampleImportsOrIsRefusedWithAReason) {
  // CI clones the repository beside shared/; this reads Humming's published files as they are.
  const fs::path samples = fs::path(QTUNE_SOURCE_DIR) / ".." / "shared" / "samples" / "humming-results";
  if (!fs::is_directory(samples)) GTEST_SKIP() << "no " << samples.string() << " beside the repository (the copy in tests/reports/data is tested above)";
  int imported = 0, refused = 0;
  for (const auto& entry : fs::directory_iterator(samples)) {
    if (entry.path().extension() != ".json") continue;
    try {
      const ExternalFile file = read_external_file(entry.path());
      EXPECT_FALSE(file.rows.empty()) << entry.path();
      ++imported;
    } catch (const InputError& error) {
      // Only the MoE benchmark is outside qtune's dense GEMMs.
      EXPECT_NE(std::string(error.what()).find("problem.num_experts"), std::string::npos) << error.what();
      ++refused;
    }
  }
  EXPECT_GE(imported, 4);
  EXPECT_LE(refused, 1);
}

// Defect 6 of issue 18: invalid UTF-8 in a label, a note or the file name is refused (exit 2 naming the field)
// before anything is stored; it gave exit 1 [json.exception.type_error.316] after the rows were committed.
TEST(ImportText, InvalidUtf8IsRefusedBeforeAnythingIsStored) {
  TempDir dir;
  const std::string db = (dir / "qtune.db").string();
  { db::Store::open(db); }
  const std::string header = "format,m,n,k,time_us,label,gpu,notes\n";
  testing::write_text(dir / "label.csv", header + "f16,1,64,64,3,bad\xff\xfe,h200,fine\n");
  testing::write_text(dir / "notes.csv", header + "f16,1,64,64,3,ok,h200,bad\xc3\n");
  testing::write_text(dir / "name\xff.csv", header + "f16,1,64,64,3,ok,h200,fine\n");
  expect_input_error([&] { read_external_file(dir / "label.csv"); }, {"label.csv", "line 2", "field 'label'", "not valid UTF-8", "\\xff"});
  expect_input_error([&] { read_external_file(dir / "notes.csv"); }, {"notes.csv", "field 'notes'", "not valid UTF-8"});
  expect_input_error([&] { read_external_file(dir / "name\xff.csv"); }, {"file name", "\\xff"});
  ImportOptions options;
  options.label = "x\xff";
  expect_input_error([&] { read_external_file(dir / "notes.csv", options); }, {"--label", "not valid UTF-8"});
  for (const std::string file : {"label.csv", "notes.csv", "name\xff.csv"}) {
    EXPECT_EQ(testing::run_qtune({"import", (dir / file).string(), "--db", db, "--output", "json"}), 2) << file;
  }
  EXPECT_EQ(db::Store::open_read_only(db).list_external_results().size(), 0u);
}

// Defect 16 of issue 18: binary or huge input is echoed quoted, escaped and cut short.
TEST(ImportText, MessagesQuoteInputBounded) {
  TempDir dir;
  const std::string header = "format,m,n,k,time_us,label,gpu\n";
  testing::write_text(dir / "m.csv", header + "f16," + std::string(100000, '9') + "x,64,64,3,a,h200\n");
  testing::write_text(dir / "binary.csv", header + "f16,\x01\x02\x1b[2J\xff,64,64,3,a,h200\n");
  testing::write_text(dir / "column.csv", "format," + std::string(100000, 'c') + "\n");
  for (const std::string file : {"m.csv", "binary.csv", "column.csv"}) {
    try {
      read_external_file(dir / file);
      FAIL() << file << " accepted";
    } catch (const InputError& error) {
      const std::string message = error.what();
      EXPECT_LT(message.size(), (dir / file).string().size() + 250) << message.substr(0, 300);
      for (const char c : message) EXPECT_GE(static_cast<unsigned char>(c), 0x20) << message;
      EXPECT_EQ(message.find('\xff'), std::string::npos) << message;
    }
  }
}

// Defect 15 of issue 18: the import summary counts labels instead of printing every one.
TEST(ImportText, SummaryNamesAFewLabelsAndCountsTheRest) {
  TempDir dir;
  std::string csv = "format,m,n,k,time_us,label,gpu\n";
  for (int i = 0; i < 1000; ++i) csv += "f16,1,64,64,3,label" + std::to_string(1000 + i) + ",h200\n";
  testing::write_text(dir / "many.csv", csv);
  ::testing::internal::CaptureStdout();
  const int status = testing::run_qtune({"import", (dir / "many.csv").string(), "--db", (dir / "qtune.db").string(), "--output", "csv"});
  const std::string output = ::testing::internal::GetCapturedStdout();
  ASSERT_EQ(status, 0);
  EXPECT_NE(output.find("label1000; label1001; label1002; \xe2\x80\xa6 and 997 more"), std::string::npos) << output;
  EXPECT_LT(output.size(), 600u) << output;
  EXPECT_EQ(db::Store::open_read_only(dir / "qtune.db").list_external_results().size(), 1000u);
}

}  // namespace
}  // namespace qtune::reports
