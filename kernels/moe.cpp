#include "kernels/moe.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <numeric>

#include <nlohmann/json.hpp>

#include "kernels/error.hpp"
#include "kernels/input_file.hpp"
#include "kernels/quantize.hpp"
#include "kernels/text_escape.hpp"

namespace qtune {
namespace {

// Bounds that keep every flat index (pair, row, row · K) well inside 32 bits for the kernels' int indexing.
constexpr int kMaxExperts = 1 << 16;
constexpr int64_t kMaxTokens = 1 << 20;
constexpr int64_t kMaxPairs = 1 << 24;  // tokens · top_k: 16M (DeepSeek-V3 at T = 4096 has 32K)

std::string lower(std::string_view text) {
  std::string result(text);
  for (char& c : result) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return result;
}

[[noreturn]] void fail_field(std::string_view context, const std::string& field, const std::string& why) {
  QTUNE_INPUT_ERROR(std::string(context) + ": field '" + field + "': " + why);
}

std::string pair_name(std::string_view array, int64_t token, int slot) {
  return std::string(array) + "[" + std::to_string(token) + "][" + std::to_string(slot) + "]";
}

// Draws `top_k` distinct experts with probability proportional to `popularity` (sequential sampling without
// replacement: each draw renormalizes over the experts not yet taken).
void draw_distinct(RandomGenerator& random, const std::vector<double>& popularity, int top_k, int32_t* out) {
  std::vector<double> left = popularity;
  double total = std::accumulate(left.begin(), left.end(), 0.0);
  for (int slot = 0; slot < top_k; ++slot) {
    double target = random.uniform() * total;
    size_t chosen = left.size();
    for (size_t e = 0; e < left.size(); ++e) {
      if (left[e] <= 0.0) continue;
      chosen = e;  // the last expert still available takes any rounding remainder
      target -= left[e];
      if (target <= 0.0) break;
    }
    out[slot] = static_cast<int32_t>(chosen);
    total -= left[chosen];
    left[chosen] = 0.0;
  }
}

// A seeded permutation of 0..count-1 (Fisher-Yates).
std::vector<int32_t> permutation(int count, RandomGenerator& random) {
  std::vector<int32_t> order(static_cast<size_t>(count));
  std::iota(order.begin(), order.end(), 0);
  for (int i = count - 1; i > 0; --i) {
    const int j = static_cast<int>(random.next() % static_cast<uint64_t>(i + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

int64_t json_int(const nlohmann::json& value, std::string_view context, const std::string& field, int64_t min,
                 int64_t max) {
  if (!value.is_number_integer()) fail_field(context, field, "expected an integer");
  const int64_t number = value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(max)
                             ? max + 1
                             : value.get<int64_t>();
  if (number < min || number > max) {
    fail_field(context, field, "expected " + std::to_string(min) + " to " + std::to_string(max) + ", got " +
                                   (value.is_number_unsigned() ? std::to_string(value.get<uint64_t>()) : std::to_string(number)));
  }
  return number;
}

}  // namespace

std::string_view moe_projection_name(MoeProjection projection) {
  return projection == MoeProjection::GateUp ? "gate-up" : "down";
}

MoeProjection parse_moe_projection(std::string_view text, std::string_view field) {
  const std::string name = lower(text);
  if (name == "gate-up" || name == "gate_up") return MoeProjection::GateUp;
  if (name == "down") return MoeProjection::Down;
  QTUNE_INPUT_ERROR(std::string(field) + ": unknown projection " + quote_input(text) + " (known: gate-up, down)");
}

std::string_view moe_layout_name(MoeLayout layout) {
  switch (layout) {
    case MoeLayout::TokenIndexed: return "token-indexed";
    case MoeLayout::GroupedContiguous: return "grouped-contiguous";
    case MoeLayout::GroupedMasked: return "grouped-masked";
  }
  return "?";
}

MoeLayout parse_moe_layout(std::string_view text, std::string_view field) {
  const std::string name = lower(text);
  for (MoeLayout layout : {MoeLayout::TokenIndexed, MoeLayout::GroupedContiguous, MoeLayout::GroupedMasked}) {
    if (name == moe_layout_name(layout)) return layout;
  }
  QTUNE_INPUT_ERROR(std::string(field) + ": unknown layout " + quote_input(text) +
                    " (known: token-indexed, grouped-contiguous, grouped-masked)");
}

// ------------------------------------------------------------------------------------------------ RoutingSpec

std::string RoutingSpec::to_string() const {
  switch (kind) {
    case RoutingKind::Uniform: return "uniform";
    case RoutingKind::Balanced: return "balanced";
    case RoutingKind::Zipf: {
      std::string exponent = fixed(zipf_exponent, 3);
      while (exponent.back() == '0') exponent.pop_back();
      if (exponent.back() == '.') exponent.pop_back();
      return "zipf:" + exponent;
    }
    case RoutingKind::File: return "file:" + file.string();
  }
  return "?";
}

RoutingSpec RoutingSpec::parse(std::string_view text, uint64_t seed, std::string_view field) {
  RoutingSpec spec;
  spec.seed = seed;
  const size_t colon = text.find(':');
  const std::string kind = lower(text.substr(0, colon));
  const std::string_view argument = colon == std::string_view::npos ? std::string_view() : text.substr(colon + 1);
  if (kind == "file") {
    if (argument.empty()) QTUNE_INPUT_ERROR(std::string(field) + ": 'file:' needs a path (file:routing.json)");
    spec.kind = RoutingKind::File;
    spec.file = std::filesystem::path(std::string(argument));
    return spec;
  }
  if (kind == "zipf") {
    spec.kind = RoutingKind::Zipf;
    if (colon != std::string_view::npos) {
      const std::string number(argument);
      char* end = nullptr;
      spec.zipf_exponent = number.empty() ? -1.0 : std::strtod(number.c_str(), &end);
      if (number.empty() || end != number.c_str() + number.size() || !std::isfinite(spec.zipf_exponent) ||
          spec.zipf_exponent < 0.0 || spec.zipf_exponent > 100.0) {
        QTUNE_INPUT_ERROR(std::string(field) + ": Zipf exponent " + quote_input(argument) +
                          " is not a number from 0 to 100 (zipf:1.2)");
      }
    }
    return spec;
  }
  if (colon == std::string_view::npos && (kind == "uniform" || kind == "balanced")) {
    spec.kind = kind == "uniform" ? RoutingKind::Uniform : RoutingKind::Balanced;
    return spec;
  }
  QTUNE_INPUT_ERROR(std::string(field) + ": unknown routing " + quote_input(text) +
                    " (known: uniform, balanced, zipf[:EXPONENT], file:PATH)");
}

// ------------------------------------------------------------------------------------------------ Routing

std::vector<int64_t> Routing::pairs_per_expert() const {
  std::vector<int64_t> counts(static_cast<size_t>(std::max(experts, 0)), 0);
  for (int32_t id : ids) {
    if (id >= 0 && id < experts) ++counts[static_cast<size_t>(id)];
  }
  return counts;
}

int Routing::experts_touched() const {
  const auto counts = pairs_per_expert();
  return static_cast<int>(std::count_if(counts.begin(), counts.end(), [](int64_t c) { return c > 0; }));
}

void validate_routing(const Routing& routing, std::string_view context) {
  if (routing.experts < 1 || routing.experts > kMaxExperts) {
    fail_field(context, "experts", "expected 1 to " + std::to_string(kMaxExperts) + ", got " + std::to_string(routing.experts));
  }
  if (routing.top_k < 1 || routing.top_k > routing.experts) {
    fail_field(context, "top_k", "expected 1 to experts (" + std::to_string(routing.experts) + "), got " +
                                      std::to_string(routing.top_k));
  }
  if (routing.tokens < 1 || routing.tokens > kMaxTokens) {
    fail_field(context, "tokens", "expected 1 to " + std::to_string(kMaxTokens) + ", got " + std::to_string(routing.tokens));
  }
  if (routing.pairs() > kMaxPairs) {
    fail_field(context, "tokens", std::to_string(routing.tokens) + " tokens x top_k " + std::to_string(routing.top_k) +
                                      " exceed " + std::to_string(kMaxPairs) + " (token, slot) pairs");
  }
  const size_t pairs = static_cast<size_t>(routing.pairs());
  if (routing.ids.size() != pairs) {
    fail_field(context, "ids", std::to_string(routing.ids.size()) + " ids for " + std::to_string(routing.tokens) +
                                   " tokens x top_k " + std::to_string(routing.top_k) + " (" + std::to_string(pairs) + ")");
  }
  if (routing.weights.size() != pairs) {
    fail_field(context, "weights", std::to_string(routing.weights.size()) + " weights for " + std::to_string(pairs) + " pairs");
  }
  std::vector<int64_t> seen(static_cast<size_t>(routing.experts), -1);
  for (int64_t token = 0; token < routing.tokens; ++token) {
    for (int slot = 0; slot < routing.top_k; ++slot) {
      const size_t p = static_cast<size_t>(token * routing.top_k + slot);
      const int32_t id = routing.ids[p];
      if (id < 0 || id >= routing.experts) {
        fail_field(context, pair_name("ids", token, slot),
                   "expert " + std::to_string(id) + " is out of range 0 to " + std::to_string(routing.experts - 1));
      }
      if (seen[static_cast<size_t>(id)] == token) {
        fail_field(context, pair_name("ids", token, slot), "expert " + std::to_string(id) + " appears twice in the token's row");
      }
      seen[static_cast<size_t>(id)] = token;
      const float weight = routing.weights[p];
      if (!std::isfinite(weight) || weight <= 0.0f) {
        fail_field(context, pair_name("weights", token, slot), "expected a finite positive weight");
      }
    }
  }
}

std::vector<float> generate_router_weights(int64_t tokens, int top_k, uint64_t seed) {
  RandomGenerator random(seed ^ 0x5eed0f20a7e5ull);
  std::vector<float> weights(static_cast<size_t>(tokens * top_k));
  std::vector<double> logits(static_cast<size_t>(top_k));
  for (int64_t token = 0; token < tokens; ++token) {
    double largest = -1e300;
    for (double& logit : logits) {
      logit = random.normal();
      largest = std::max(largest, logit);
    }
    double sum = 0.0;
    for (double& logit : logits) sum += (logit = std::exp(logit - largest));
    for (int slot = 0; slot < top_k; ++slot) {
      weights[static_cast<size_t>(token * top_k + slot)] = static_cast<float>(logits[static_cast<size_t>(slot)] / sum);
    }
  }
  return weights;
}

Routing generate_routing(const RoutingSpec& spec, int experts, int top_k, int64_t tokens) {
  if (spec.kind == RoutingKind::File) QTUNE_INPUT_ERROR("routing: a file routing is read, not generated (load_routing_file)");
  Routing routing;
  routing.experts = experts;
  routing.top_k = top_k;
  routing.tokens = tokens;
  // The sizes come from the user: checked (validate_routing stops at the first bad one) before anything is allocated.
  if (experts < 1 || experts > kMaxExperts || top_k < 1 || top_k > experts || tokens < 1 || tokens > kMaxTokens ||
      tokens * top_k > kMaxPairs) {
    validate_routing(routing);
  }
  routing.ids.assign(static_cast<size_t>(routing.pairs()), 0);
  RandomGenerator random(spec.seed);
  if (spec.kind == RoutingKind::Balanced) {
    const std::vector<int32_t> order = permutation(experts, random);
    // Consecutive pairs of a token are top_k <= E consecutive residues mod E: distinct experts.
    for (int64_t p = 0; p < routing.pairs(); ++p) routing.ids[static_cast<size_t>(p)] = order[static_cast<size_t>(p % experts)];
  } else {
    std::vector<double> popularity(static_cast<size_t>(experts), 1.0);
    if (spec.kind == RoutingKind::Zipf) {
      if (!std::isfinite(spec.zipf_exponent) || spec.zipf_exponent < 0.0) {
        QTUNE_INPUT_ERROR("routing: Zipf exponent must be a finite number >= 0");
      }
      const std::vector<int32_t> rank_of = permutation(experts, random);
      for (int e = 0; e < experts; ++e) {
        popularity[static_cast<size_t>(e)] = std::pow(static_cast<double>(rank_of[static_cast<size_t>(e)] + 1), -spec.zipf_exponent);
      }
    }
    if (spec.kind == RoutingKind::Uniform) {
      // Partial Fisher-Yates: exact uniform draws without replacement, O(top_k) per token.
      std::vector<int32_t> pool(static_cast<size_t>(experts));
      std::iota(pool.begin(), pool.end(), 0);
      for (int64_t token = 0; token < tokens; ++token) {
        for (int slot = 0; slot < top_k; ++slot) {
          const int j = slot + static_cast<int>(random.next() % static_cast<uint64_t>(experts - slot));
          std::swap(pool[static_cast<size_t>(slot)], pool[static_cast<size_t>(j)]);
          routing.ids[static_cast<size_t>(token * top_k + slot)] = pool[static_cast<size_t>(slot)];
        }
      }
    } else {
      for (int64_t token = 0; token < tokens; ++token) {
        draw_distinct(random, popularity, top_k, routing.ids.data() + token * top_k);
      }
    }
  }
  routing.weights = generate_router_weights(tokens, top_k, spec.seed);
  return routing;
}

Routing routing_from_json(const nlohmann::json& document, std::string_view context, uint64_t seed) {
  if (!document.is_object()) QTUNE_INPUT_ERROR(std::string(context) + ": expected a JSON object with experts, top_k and ids");
  for (const auto& [key, value] : document.items()) {
    if (key != "experts" && key != "top_k" && key != "ids" && key != "weights" && key != "notes") {
      fail_field(context, key, "unknown field (known: experts, top_k, ids, weights, notes)");
    }
  }
  for (const char* key : {"experts", "top_k", "ids"}) {
    if (!document.contains(key)) fail_field(context, key, "missing");
  }
  Routing routing;
  routing.experts = static_cast<int>(json_int(document["experts"], context, "experts", 1, kMaxExperts));
  routing.top_k = static_cast<int>(json_int(document["top_k"], context, "top_k", 1, routing.experts));
  const nlohmann::json& ids = document["ids"];
  if (!ids.is_array() || ids.empty()) fail_field(context, "ids", "expected a non-empty array of rows of top_k expert ids");
  if (ids.size() > static_cast<size_t>(kMaxTokens)) fail_field(context, "ids", "more than " + std::to_string(kMaxTokens) + " tokens");
  routing.tokens = static_cast<int64_t>(ids.size());
  if (routing.pairs() > kMaxPairs) fail_field(context, "ids", "more than " + std::to_string(kMaxPairs) + " (token, slot) pairs");
  for (size_t token = 0; token < ids.size(); ++token) {
    const std::string row_name = "ids[" + std::to_string(token) + "]";
    if (!ids[token].is_array() || ids[token].size() != static_cast<size_t>(routing.top_k)) {
      fail_field(context, row_name, "expected an array of top_k (" + std::to_string(routing.top_k) + ") expert ids");
    }
    for (size_t slot = 0; slot < ids[token].size(); ++slot) {
      const std::string name = pair_name("ids", static_cast<int64_t>(token), static_cast<int>(slot));
      if (!ids[token][slot].is_number_integer()) fail_field(context, name, "expected an integer expert id");
      routing.ids.push_back(static_cast<int32_t>(json_int(ids[token][slot], context, name, INT32_MIN, INT32_MAX)));
    }
  }
  if (document.contains("weights")) {
    const nlohmann::json& weights = document["weights"];
    if (!weights.is_array() || weights.size() != ids.size()) {
      fail_field(context, "weights", "expected one row per row of ids (" + std::to_string(ids.size()) + ")");
    }
    for (size_t token = 0; token < weights.size(); ++token) {
      if (!weights[token].is_array() || weights[token].size() != static_cast<size_t>(routing.top_k)) {
        fail_field(context, "weights[" + std::to_string(token) + "]", "expected an array of top_k numbers");
      }
      double sum = 0.0;
      for (size_t slot = 0; slot < weights[token].size(); ++slot) {
        const nlohmann::json& value = weights[token][slot];
        const double weight = value.is_number() ? value.get<double>() : -1.0;
        if (!std::isfinite(weight) || weight <= 0.0) {
          fail_field(context, pair_name("weights", static_cast<int64_t>(token), static_cast<int>(slot)),
                     "expected a finite positive number");
        }
        sum += weight;
      }
      for (size_t slot = 0; slot < weights[token].size(); ++slot) {
        routing.weights.push_back(static_cast<float>(weights[token][slot].get<double>() / sum));
      }
    }
  } else {
    routing.weights = generate_router_weights(routing.tokens, routing.top_k, seed);
  }
  validate_routing(routing, context);
  return routing;
}

nlohmann::json routing_to_json(const Routing& routing) {
  nlohmann::json ids = nlohmann::json::array();
  nlohmann::json weights = nlohmann::json::array();
  for (int64_t token = 0; token < routing.tokens; ++token) {
    nlohmann::json id_row = nlohmann::json::array();
    nlohmann::json weight_row = nlohmann::json::array();
    for (int slot = 0; slot < routing.top_k; ++slot) {
      id_row.push_back(routing.ids[static_cast<size_t>(token * routing.top_k + slot)]);
      weight_row.push_back(routing.weights[static_cast<size_t>(token * routing.top_k + slot)]);
    }
    ids.push_back(std::move(id_row));
    weights.push_back(std::move(weight_row));
  }
  return {{"experts", routing.experts}, {"top_k", routing.top_k}, {"ids", std::move(ids)}, {"weights", std::move(weights)}};
}

Routing load_routing_file(const std::filesystem::path& file, uint64_t seed) {
  const std::string context = file.string();
  return routing_from_json(parse_json(read_file_text(file), context), context, seed);
}

// ------------------------------------------------------------------------------------------------ MoeProblem

void MoeProblem::validate() const {
  if (experts < 1 || experts > kMaxExperts) {
    QTUNE_INPUT_ERROR("experts: expected 1 to " + std::to_string(kMaxExperts) + ", got " + std::to_string(experts));
  }
  if (top_k < 1 || top_k > experts) {
    QTUNE_INPUT_ERROR("top_k: expected 1 to experts (" + std::to_string(experts) + "), got " + std::to_string(top_k));
  }
  if (tokens < 1 || tokens > kMaxTokens) {
    QTUNE_INPUT_ERROR("tokens: expected 1 to " + std::to_string(kMaxTokens) + ", got " + std::to_string(tokens));
  }
  if (tokens * top_k > kMaxPairs) {
    QTUNE_INPUT_ERROR("tokens: " + std::to_string(tokens) + " tokens x top_k " + std::to_string(top_k) + " exceed " +
                      std::to_string(kMaxPairs) + " (token, slot) pairs");
  }
  if (n < 1) QTUNE_INPUT_ERROR("n: expected a positive number of output features per expert, got " + std::to_string(n));
  if (k < 1) QTUNE_INPUT_ERROR("k: expected a positive number of input features per expert, got " + std::to_string(k));
  format.validate();
  format.validate_shape(n, k);
  if (input_rows() * k > INT32_MAX || output_rows() * n > INT32_MAX) {
    QTUNE_INPUT_ERROR("tokens: " + std::to_string(tokens) + " tokens x top_k " + std::to_string(top_k) +
                      " rows exceed the kernels' 32-bit indexing (2^31 - 1 elements of activations or output)");
  }
  if (routing.kind == RoutingKind::Zipf && (!std::isfinite(routing.zipf_exponent) || routing.zipf_exponent < 0.0)) {
    QTUNE_INPUT_ERROR("routing: Zipf exponent must be a finite number >= 0");
  }
}

Routing MoeProblem::make_routing() const {
  validate();
  if (routing.kind != RoutingKind::File) return generate_routing(routing, experts, top_k, tokens);
  Routing loaded = load_routing_file(routing.file, routing.seed);
  const std::string context = routing.file.string();
  if (loaded.experts != experts) {
    fail_field(context, "experts", std::to_string(loaded.experts) + " experts, but the problem has " + std::to_string(experts));
  }
  if (loaded.top_k != top_k) {
    fail_field(context, "top_k", std::to_string(loaded.top_k) + ", but the problem has top_k " + std::to_string(top_k));
  }
  if (loaded.tokens != tokens) {
    fail_field(context, "ids", std::to_string(loaded.tokens) + " rows (tokens), but the problem has " +
                                   std::to_string(tokens) + " tokens");
  }
  return loaded;
}

int64_t MoeProblem::input_rows() const { return projection == MoeProjection::GateUp ? tokens : tokens * top_k; }
int64_t MoeProblem::output_rows() const { return projection == MoeProjection::GateUp ? tokens * top_k : tokens; }

std::string MoeProblem::to_string() const {
  return format.to_string() + " moe " + std::string(moe_projection_name(projection)) + " E=" + std::to_string(experts) +
         " top_k=" + std::to_string(top_k) + " T=" + std::to_string(tokens) + " n=" + std::to_string(n) +
         " k=" + std::to_string(k) + " " + std::string(moe_layout_name(layout)) + " " + routing.to_string();
}

nlohmann::json MoeProblem::to_json() const {
  return {{"format", format.to_string()},
          {"experts", experts},
          {"top_k", top_k},
          {"tokens", tokens},
          {"n", n},
          {"k", k},
          {"projection", std::string(moe_projection_name(projection))},
          {"layout", std::string(moe_layout_name(layout))},
          {"routing", routing.to_string()},
          {"seed", routing.seed}};
}

MoeProblem MoeProblem::from_json(const nlohmann::json& json) {
  constexpr std::string_view context = "moe problem";
  if (!json.is_object()) QTUNE_INPUT_ERROR("moe problem: expected a JSON object");
  auto string_field = [&](const char* key) {
    if (!json.contains(key) || !json[key].is_string()) fail_field(context, key, "expected a string");
    return json[key].get<std::string>();
  };
  auto int_field = [&](const char* key, int64_t max) {
    if (!json.contains(key)) fail_field(context, key, "missing");
    return json_int(json[key], context, key, 0, max);
  };
  MoeProblem problem;
  problem.format = FormatSpec::parse(string_field("format"));
  problem.experts = static_cast<int>(int_field("experts", kMaxExperts));
  problem.top_k = static_cast<int>(int_field("top_k", kMaxExperts));
  problem.tokens = int_field("tokens", kMaxTokens);
  problem.n = int_field("n", INT32_MAX);
  problem.k = int_field("k", INT32_MAX);
  problem.projection = parse_moe_projection(string_field("projection"), "projection");
  problem.layout = parse_moe_layout(string_field("layout"), "layout");
  const uint64_t seed = json.contains("seed") ? static_cast<uint64_t>(json_int(json["seed"], context, "seed", 0, INT64_MAX)) : 1;
  problem.routing = RoutingSpec::parse(string_field("routing"), seed, "routing");
  problem.validate();
  return problem;
}

}  // namespace qtune
