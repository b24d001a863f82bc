// The C ABI the Python adapters load (tuner/peers/peer_abi.h), through the built libqtune_peer_abi.so opened with
// dlopen as ctypes opens it: problems, buffers, host verification, and the errors every function reports.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/codec.hpp"
#include "kernels/moe.hpp"
#include "kernels/moe_reference.hpp"
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

 public:
  template <typename T>
  std::vector<T> buffer_of(qtune_peer_problem* problem, const char* name) { return buffer<T>(problem, name); }

 protected:
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

// A small MoE problem's request: 8 experts, top-2, `tokens` tokens, N = 64, K = 256.
std::string moe_request(const std::string& projection, int64_t tokens, const std::string& format = "w4a16-int4-g128") {
  const MoeProblem problem{.format = FormatSpec::parse(format), .experts = 8, .top_k = 2, .tokens = tokens, .n = 64,
                           .k = 256, .projection = parse_moe_projection(projection)};
  return nlohmann::json{{"moe", problem.to_json()}, {"seed", 3}}.dump();
}

// The output peer_abi.h defines, from the problem's buffers: gate-up pair rows, or down's router-weighted sums.
// (`router_weighted` false: down's slots summed without their router weights, a wrong reduction.)
std::vector<uint16_t> moe_output(PeerAbi& test, qtune_peer_problem* problem, const nlohmann::json& description,
                                 bool router_weighted = true) {
  const int64_t n = description.at("n"), k = description.at("k"), top_k = description.at("top_k");
  const int64_t tokens = description.at("tokens");
  const bool gate_up = description.at("projection") == "gate-up";
  const std::vector<float> a = test.buffer_of<float>(problem, "activation_values");
  const std::vector<int32_t> ids = test.buffer_of<int32_t>(problem, "topk_ids");
  const std::vector<float> router = test.buffer_of<float>(problem, "router_weights");
  std::map<int32_t, std::vector<float>> weights;
  for (const int32_t e : ids) {
    if (!weights.contains(e)) weights[e] = test.buffer_of<float>(problem, ("expert" + std::to_string(e) + ".weight_values").c_str());
  }
  const auto pair_value = [&](int64_t pair, int64_t col) {
    const int64_t row = gate_up ? pair / top_k : pair;
    const std::vector<float>& w = weights.at(ids[static_cast<size_t>(pair)]);
    double sum = 0;
    for (int64_t i = 0; i < k; ++i) sum += double(a[static_cast<size_t>(row * k + i)]) * double(w[static_cast<size_t>(col * k + i)]);
    return sum;
  };
  std::vector<uint16_t> c;
  for (int64_t row = 0; row < (gate_up ? tokens * top_k : tokens); ++row) {
    for (int64_t col = 0; col < n; ++col) {
      double value = 0;
      if (gate_up) {
        value = pair_value(row, col);
      } else {
        for (int64_t slot = 0; slot < top_k; ++slot) {
          const double weight = router_weighted ? router[static_cast<size_t>(row * top_k + slot)] : 1.0;
          value += weight * pair_value(row * top_k + slot, col);
        }
      }
      c.push_back(float_to_f16_bits(float(value)));
    }
  }
  return c;
}

TEST_F(PeerAbi, AMoeProblemExposesItsRoutingActivationsAndTheTouchedExpertsOnly) {
  qtune_peer_problem* made = problem(moe_request("gate-up", 3));
  ASSERT_NE(made, nullptr) << library_.last_error();
  const nlohmann::json description = describe(made);
  EXPECT_EQ(description.at("kind"), "moe");
  EXPECT_EQ(description.at("operands"), "w4a16-int4-g128");
  EXPECT_EQ(description.at("m"), 6);  // gate-up: a row per (token, slot) pair
  EXPECT_EQ(description.at("input_rows"), 3);
  EXPECT_EQ(description.at("top_k"), 2);
  const nlohmann::json& buffers = description.at("buffers");
  EXPECT_EQ(buffers.at("topk_ids").at("dtype"), "int32");
  EXPECT_EQ(buffers.at("topk_ids").at("shape"), nlohmann::json({3, 2}));
  EXPECT_EQ(buffers.at("router_weights").at("shape"), nlohmann::json({3, 2}));
  EXPECT_EQ(buffers.at("activation_bits16").at("shape"), nlohmann::json({3, 256}));

  // The routing is the problem's, and the touched experts are exactly those it names, each with its weights.
  const MoeProblem moe = MoeProblem::from_json(description.at("moe"));
  const Routing routing = moe.make_routing();
  EXPECT_EQ(buffer_of<int32_t>(made, "topk_ids"), routing.ids);
  EXPECT_EQ(buffer_of<float>(made, "router_weights"), routing.weights);
  std::vector<int32_t> touched;
  for (int32_t e = 0; e < 8; ++e) {
    if (routing.pairs_per_expert()[static_cast<size_t>(e)] > 0) touched.push_back(e);
  }
  EXPECT_EQ(description.at("experts_touched").get<std::vector<int32_t>>(), touched);
  EXPECT_EQ(buffer_of<int32_t>(made, "touched_experts"), touched);
  EXPECT_EQ(description.at("expert_global_scales").size(), touched.size());
  for (int32_t e = 0; e < 8; ++e) {
    const bool is_touched = std::find(touched.begin(), touched.end(), e) != touched.end();
    const std::string codes = "expert" + std::to_string(e) + ".weight_codes";
    EXPECT_EQ(buffers.contains(codes), is_touched) << codes;
    if (!is_touched) continue;
    EXPECT_EQ(buffers.at(codes).at("shape"), nlohmann::json({64, 256}));
    // qtune's MoE provider's values for this expert and seed: the ones its CPU reference checks.
    const QuantizedWeights expected = make_expert_weights(moe, e, 3);
    EXPECT_EQ(buffer_of<uint8_t>(made, codes.c_str()), expected.codes) << codes;
    EXPECT_EQ(buffer_of<uint32_t>(made, ("expert" + std::to_string(e) + ".weight_scale_bits").c_str()), expected.scales.bits);
  }
  EXPECT_EQ(buffer_of<uint16_t>(made, "activation_bits16"), make_moe_activations(moe, 3).bits16);
  QTUNE_ABI(library_, qtune_peer_problem_destroy)(made);

  // Down: one input row per pair, one output row per token.
  qtune_peer_problem* down = problem(moe_request("down", 3, "w4a8-int4-fp8"));
  ASSERT_NE(down, nullptr) << library_.last_error();
  const nlohmann::json down_description = describe(down);
  EXPECT_EQ(down_description.at("m"), 3);
  EXPECT_EQ(down_description.at("input_rows"), 6);
  EXPECT_EQ(down_description.at("buffers").at("activation_codes").at("shape"), nlohmann::json({6, 256}));
  EXPECT_EQ(down_description.at("buffers").at("activation_scale_values").at("shape"), nlohmann::json({6, 1}));
  QTUNE_ABI(library_, qtune_peer_problem_destroy)(down);
}

// The expert cache lends each expert to one live problem and takes it back: problem after problem of the same shape
// (a tune's token buckets, a gate-up and a down of the same N and K) sees the same weights, never a moved-from husk.
TEST_F(PeerAbi, MoeProblemsOfOneShapeInTurnSeeTheSameExperts) {
  for (int round = 0; round < 4; ++round) {
    qtune_peer_problem* made = problem(moe_request(round % 2 == 0 ? "gate-up" : "down", 5));
    ASSERT_NE(made, nullptr) << library_.last_error();
    const nlohmann::json description = describe(made);
    const MoeProblem moe = MoeProblem::from_json(description.at("moe"));
    for (const int32_t e : description.at("experts_touched").get<std::vector<int32_t>>()) {
      const std::string codes = "expert" + std::to_string(e) + ".weight_codes";
      EXPECT_EQ(buffer_of<uint8_t>(made, codes.c_str()), make_expert_weights(moe, e, 3).codes) << "round " << round << " " << codes;
    }
    QTUNE_ABI(library_, qtune_peer_problem_destroy)(made);
  }
}

TEST_F(PeerAbi, AMoeOutputIsCheckedAsDefinedAndWrongOnesFail) {
  for (const std::string projection : {"gate-up", "down"}) {
    qtune_peer_problem* made = problem(moe_request(projection, 4));
    ASSERT_NE(made, nullptr) << library_.last_error();
    const nlohmann::json description = describe(made);
    const int64_t n = 64;
    const std::vector<uint16_t> output = moe_output(*this, made, description);
    ASSERT_EQ(static_cast<int64_t>(output.size()), description.at("m").get<int64_t>() * n);
    const nlohmann::json right = verify(made, output, n);
    EXPECT_TRUE(right.at("passed").get<bool>()) << projection << ": " << right.dump();

    std::vector<uint16_t> wrong = output;
    wrong[static_cast<size_t>(n + 3)] = float_to_f16_bits(100.0f);
    EXPECT_FALSE(verify(made, wrong, n).at("passed").get<bool>()) << projection;
    // Rows in another order (the first two rows swapped: another pair's or token's row) fail too.
    std::vector<uint16_t> swapped = output;
    std::swap_ranges(swapped.begin(), swapped.begin() + n, swapped.begin() + n);
    EXPECT_FALSE(verify(made, swapped, n).at("passed").get<bool>()) << projection;
    if (projection == "down") {
      EXPECT_EQ(buffer_of<float>(made, "activation_values").size(), 8u * 256u) << "down reads one row per pair";
      // The slots summed without their router weights: not the operation's output.
      EXPECT_FALSE(verify(made, moe_output(*this, made, description, false), n).at("passed").get<bool>());
    }
    QTUNE_ABI(library_, qtune_peer_problem_destroy)(made);
  }
}

TEST_F(PeerAbi, BadMoeRequestsNameTheField) {
  nlohmann::json request = nlohmann::json::parse(moe_request("gate-up", 2));
  request["moe"]["top_k"] = 9;  // more than the 8 experts
  EXPECT_EQ(problem(request.dump()), nullptr);
  EXPECT_EQ(library_.last_error().at("error_type"), "InputError");
  EXPECT_NE(library_.last_error().at("error").get<std::string>().find("top_k"), std::string::npos) << library_.last_error();
  request = nlohmann::json::parse(moe_request("gate-up", 2));
  request["moe"].erase("tokens");
  EXPECT_EQ(problem(request.dump()), nullptr);
  EXPECT_NE(library_.last_error().at("error").get<std::string>().find("tokens"), std::string::npos) << library_.last_error();
  // A MoE problem has no dense weight buffers.
  qtune_peer_problem* made = problem(moe_request("gate-up", 2));
  ASSERT_NE(made, nullptr);
  const void* data = nullptr;
  size_t bytes = 0;
  EXPECT_EQ(QTUNE_ABI(library_, qtune_peer_problem_buffer)(made, "weight_codes", &data, &bytes), -1);
  EXPECT_EQ(QTUNE_ABI(library_, qtune_peer_problem_buffer)(made, "expert99.weight_codes", &data, &bytes), -1);
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
