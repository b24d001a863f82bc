// The C ABI the Python adapters load (tuner/peers/peer_abi.h), through the built libqtune_peer_abi.so opened with
// dlopen as ctypes opens it: problems, buffers, host verification, and the errors every function reports.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/codec.hpp"
#include "tests/tuner/runtime/gpu_test_support.hpp"
#include "tuner/peers/peer_abi.h"
#include "tuner/peers/peer_host.hpp"

namespace qtune::peers {
namespace {

// The library's functions, looked up by name as ctypes does.
class AbiLibrary {
 public:
  AbiLibrary() {
    try {
      path_ = peer_environment().abi_library.string();
    } catch (const InputError& error) {
      why_not_ = error.what();
      return;
    }
    handle_ = dlopen(path_.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) why_not_ = dlerror();
  }
  ~AbiLibrary() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  bool loaded() const { return handle_ != nullptr; }
  const std::string& why_not() const { return why_not_; }
  template <typename Function>
  Function* get(const char* name) const {
    return reinterpret_cast<Function*>(dlsym(handle_, name));
  }
  nlohmann::json last_error() const { return nlohmann::json::parse(get<decltype(qtune_peer_last_error)>("qtune_peer_last_error")()); }

 private:
  std::string path_;
  std::string why_not_;
  void* handle_ = nullptr;
};

#define QTUNE_ABI(library, name) (library.get<decltype(name)>(#name))

class PeerAbi : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!library_.loaded()) GTEST_SKIP() << "libqtune_peer_abi.so not loadable: " << library_.why_not();
  }
  qtune_peer_problem* problem(const std::string& request) {
    return QTUNE_ABI(library_, qtune_peer_problem_create)(request.c_str());
  }
  nlohmann::json describe(qtune_peer_problem* problem) {
    return nlohmann::json::parse(QTUNE_ABI(library_, qtune_peer_problem_describe)(problem));
  }
  template <typename T>
  std::vector<T> buffer(qtune_peer_problem* problem, const char* name) {
    const void* data = nullptr;
    size_t bytes = 0;
    EXPECT_EQ(QTUNE_ABI(library_, qtune_peer_problem_buffer)(problem, name, &data, &bytes), 0) << name;
    std::vector<T> values(bytes / sizeof(T));
    if (data != nullptr) std::memcpy(values.data(), data, bytes);
    return values;
  }
  // C = A W^T from the dequantized values, as f16 or bf16 patterns.
  std::vector<uint16_t> product(qtune_peer_problem* problem, int64_t m, int64_t n, int64_t k, bool bf16) {
    const std::vector<float> a = buffer<float>(problem, "activation_values");
    const std::vector<float> w = buffer<float>(problem, "weight_values");
    std::vector<uint16_t> c(static_cast<size_t>(m * n));
    for (int64_t row = 0; row < m; ++row) {
      for (int64_t col = 0; col < n; ++col) {
        double sum = 0;
        for (int64_t i = 0; i < k; ++i) sum += double(a[row * k + i]) * double(w[col * k + i]);
        c[row * n + col] = bf16 ? float_to_bf16_bits(float(sum)) : float_to_f16_bits(float(sum));
      }
    }
    return c;
  }
  nlohmann::json verify(qtune_peer_problem* problem, const std::vector<uint16_t>& output, int64_t row_stride) {
    const char* text = QTUNE_ABI(library_, qtune_peer_verify_host)(problem, output.data(), row_stride);
    EXPECT_NE(text, nullptr) << library_.last_error();
    return text != nullptr ? nlohmann::json::parse(text) : nlohmann::json();
  }
  AbiLibrary library_;
};

TEST_F(PeerAbi, SaysItsVersionAndStartsWithoutAnError) {
  EXPECT_EQ(QTUNE_ABI(library_, qtune_peer_abi_version)(), QTUNE_PEER_ABI_VERSION);
  EXPECT_EQ(library_.last_error(), nlohmann::json::object());
  EXPECT_EQ(QTUNE_ABI(library_, qtune_peer_sticky_error)(), nullptr);  // opens nothing
}

TEST_F(PeerAbi, AProblemExposesQtunesQuantizedOperands) {
  qtune_peer_problem* made = problem(R"({"operands": "w4a16-int4-g128", "m": 2, "n": 64, "k": 256, "seed": 3})");
  ASSERT_NE(made, nullptr) << library_.last_error();
  const nlohmann::json description = describe(made);
  EXPECT_EQ(description.at("operands"), "w4a16-int4-g128");
  EXPECT_EQ(description.at("output_type"), "f16");
  EXPECT_DOUBLE_EQ(description.at("tolerance").get<double>(), 5e-3);
  const nlohmann::json& buffers = description.at("buffers");
  EXPECT_EQ(buffers.at("weight_codes").at("shape"), nlohmann::json({64, 256}));
  EXPECT_EQ(buffers.at("weight_codes").at("dtype"), "uint8");
  EXPECT_EQ(buffers.at("weight_scale_bits").at("shape"), nlohmann::json({64, 2}));
  EXPECT_EQ(buffers.at("activation_bits16").at("bytes"), 2 * 256 * 2);
  EXPECT_FALSE(buffers.contains("activation_codes"));
  EXPECT_EQ(description.at("weight_scales").at("cols_per_scale"), 128);
  // Codes are int4 in the low bits: never beyond 4 bits, and not all zero.
  const std::vector<uint8_t> codes = buffer<uint8_t>(made, "weight_codes");
  ASSERT_EQ(codes.size(), 64u * 256u);
  EXPECT_TRUE(std::all_of(codes.begin(), codes.end(), [](uint8_t code) { return code < 16; }));
  EXPECT_TRUE(std::any_of(codes.begin(), codes.end(), [](uint8_t code) { return code != 0; }));
  // The same request gives the same operands (the adapters cache packed weights on it).
  qtune_peer_problem* again = problem(R"({"operands": "w4a16-int4-g128", "m": 5, "n": 64, "k": 256, "seed": 3})");
  EXPECT_EQ(buffer<uint8_t>(again, "weight_codes"), codes);
  QTUNE_ABI(library_, qtune_peer_problem_destroy)(again);
  QTUNE_ABI(library_, qtune_peer_problem_destroy)(made);
}

TEST_F(PeerAbi, QuantizedActivationsComeWithTheirScales) {
  qtune_peer_problem* made = problem(R"({"operands": "w8a8-fp8-block128x128:out=bf16", "m": 4, "n": 128, "k": 256})");
  ASSERT_NE(made, nullptr) << library_.last_error();
  const nlohmann::json description = describe(made);
  EXPECT_EQ(description.at("output_type"), "bf16");
  EXPECT_EQ(description.at("buffers").at("activation_codes").at("shape"), nlohmann::json({4, 256}));
  EXPECT_EQ(description.at("buffers").at("activation_scale_values").at("shape"), nlohmann::json({4, 2}));
  EXPECT_EQ(description.at("buffers").at("weight_scale_values").at("shape"), nlohmann::json({1, 2}));
  QTUNE_ABI(library_, qtune_peer_problem_destroy)(made);
}

TEST_F(PeerAbi, VerificationPassesTheRightProductAndCatchesWrongOnes) {
  for (const std::string operands : {"w4a16-int4-ch", "f16", "bf16"}) {
    const int64_t m = 3, n = 32, k = 64;
    qtune_peer_problem* made = problem(R"({"operands": ")" + operands + R"(", "m": 3, "n": 32, "k": 64})");
    ASSERT_NE(made, nullptr) << library_.last_error();
    std::vector<uint16_t> output = product(made, m, n, k, operands == "bf16");
    const nlohmann::json right = verify(made, output, n);
    EXPECT_TRUE(right.at("passed").get<bool>()) << operands << ": " << right.dump();

    // Rows further apart than N (a padded output) are read with the stride.
    std::vector<uint16_t> strided(static_cast<size_t>(m * (n + 8)), 0xFFFF);
    for (int64_t row = 0; row < m; ++row) std::copy_n(output.begin() + row * n, n, strided.begin() + row * (n + 8));
    EXPECT_TRUE(verify(made, strided, n + 8).at("passed").get<bool>()) << operands;

    std::vector<uint16_t> wrong = output;
    wrong[static_cast<size_t>(n + 5)] = operands == "bf16" ? float_to_bf16_bits(100.0f) : float_to_f16_bits(100.0f);
    const nlohmann::json caught = verify(made, wrong, n);
    EXPECT_FALSE(caught.at("passed").get<bool>()) << operands;
    EXPECT_GT(caught.at("bad_count").get<int64_t>(), 0);

    std::vector<uint16_t> poisoned = output;
    poisoned.back() = 0xFFFF;  // the poison: an element the kernel never wrote
    const nlohmann::json unwritten = verify(made, poisoned, n);
    EXPECT_FALSE(unwritten.at("passed").get<bool>());
    EXPECT_EQ(unwritten.at("nan_count"), 1);
    QTUNE_ABI(library_, qtune_peer_problem_destroy)(made);
  }
}

TEST_F(PeerAbi, FailuresReturnNullAndDescribeThemselves) {
  EXPECT_EQ(problem("not json"), nullptr);
  EXPECT_EQ(library_.last_error().at("error_type"), "InputError");
  EXPECT_EQ(problem(R"({"operands": "w4a16-int4-ch", "m": 0, "n": 8, "k": 8})"), nullptr);
  EXPECT_NE(library_.last_error().at("error").get<std::string>().find("positive"), std::string::npos);
  EXPECT_EQ(problem(R"({"operands": "w9a16", "m": 1, "n": 8, "k": 8})"), nullptr);
  EXPECT_EQ(library_.last_error().at("error_type"), "InputError");
  qtune_peer_problem* made = problem(R"({"operands": "f16", "m": 2, "n": 8, "k": 16})");
  ASSERT_NE(made, nullptr);
  const void* data = nullptr;
  size_t bytes = 0;
  EXPECT_EQ(QTUNE_ABI(library_, qtune_peer_problem_buffer)(made, "weight_codes", &data, &bytes), -1);
  EXPECT_NE(library_.last_error().at("error").get<std::string>().find("weight_codes"), std::string::npos);
  std::vector<uint16_t> output(16);
  EXPECT_EQ(QTUNE_ABI(library_, qtune_peer_verify_host)(made, output.data(), 4), nullptr);  // stride < N
  EXPECT_NE(library_.last_error().at("error").get<std::string>().find("row_stride"), std::string::npos);
  QTUNE_ABI(library_, qtune_peer_problem_destroy)(made);
}

int count_launches(void* user_data, uint64_t) {
  ++*static_cast<int*>(user_data);
  return 0;
}

TEST_F(PeerAbi, WithoutAGpuMeasuringAndPoisoningSayNoGpu) {
  QTUNE_REQUIRE_NO_GPU();
  int launches = 0;
  EXPECT_EQ(QTUNE_ABI(library_, qtune_peer_measure)("{}", count_launches, &launches), nullptr);
  EXPECT_EQ(library_.last_error().at("error_type"), "NoGpuError");
  EXPECT_EQ(launches, 0);
  EXPECT_EQ(QTUNE_ABI(library_, qtune_peer_poison_device)(0, 16, 0), -1);
  EXPECT_EQ(library_.last_error().at("error_type"), "NoGpuError");
  EXPECT_EQ(QTUNE_ABI(library_, qtune_peer_measure)(R"({"min_repetitions": -1})", count_launches, &launches), nullptr);
  EXPECT_EQ(library_.last_error().at("error_type"), "InputError");  // options are checked first
}

}  // namespace
}  // namespace qtune::peers
