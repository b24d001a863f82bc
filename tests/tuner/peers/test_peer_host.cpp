// Providers hosted in Python, end to end on the CPU: qtune starts the real Python worker (qtune_peer_worker.py) and
// runs the tests' fake peer, a pure-Python provider that multiplies qtune's operands on the host, through every step
// and every way a peer can fail: describe, configurations, prepare, launch, verify, a wrong answer, an exception, a
// crash, an exit, a hang, a missing peer. Skipped, saying so, where no python3 exists.
#include <gtest/gtest.h>

#include <string>

#include "kernels/error.hpp"
#include "reports/humming_table.hpp"
#include "tests/common/temp_dir.hpp"
#include "tests/common/expect_error.hpp"
#include "tests/common/scoped_environment.hpp"
#include "tests/tuner/peers/peer_test_support.hpp"
#include "tests/tuner/runtime/gpu_test_support.hpp"
#include "tuner/peers/peer_host.hpp"

namespace qtune::peers {
namespace {

using test_support::expect_input_error;
using test_support::ScopedEnvironment;

constexpr double kTimeout = 60;

const PeerProblem kSmall{3, 64, 128, 5, 0};  // M x N x K, seed, device

PeerRunOptions verify_only(double timeout_s = kTimeout) {
  PeerRunOptions options;
  options.measure_time = false;
  options.timeout_s = timeout_s;
  return options;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A run that failed as it should: the outcome, the error type where one is given, and an error naming `part`.
void expect_failed(const PeerResult& result, PeerOutcome outcome, const std::string& part,
                   const std::string& error_type = "") {
  EXPECT_EQ(result.outcome, outcome) << to_string(result.outcome) << ": " << result.error;
  if (!error_type.empty()) {
    EXPECT_EQ(result.error_type, error_type) << result.error;
  }
  EXPECT_TRUE(contains(result.error, part)) << result.error;
  EXPECT_FALSE(result.measurement.has_value());
}

TEST(ProviderId, SplitsPeerAndOperandsAndMakesTheFormatCanonical) {
  EXPECT_EQ(parse_provider_id("humming-w4a16-int4-ch"), (ProviderId{"humming", "w4a16-int4-ch"}));
  EXPECT_EQ(parse_provider_id("torch-f16"), (ProviderId{"torch", "f16"}));
  EXPECT_EQ(parse_provider_id("Marlin-W4A16-INT4-G128").text(), "marlin-w4a16-int4-g128");
  EXPECT_EQ(parse_provider_id("torch-w8a8-fp8-ch:out=bf16").operands, "w8a8-fp8-ch:out=bf16");
  EXPECT_EQ(parse_provider_id("gptq_marlin-w4a16-int4-ch").peer, "gptq_marlin");
  for (const char* bad : {"humming", "-w4a16-int4-ch", "humming-", "humming-w9a16-int4"}) {
    expect_input_error([&] { parse_provider_id(bad, "--baseline"); }, {"--baseline", bad});
  }
}

TEST(PeerEnvironment, NamesTheVariableOfWhatIsMissing) {
  {
    ScopedEnvironment python("QTUNE_PYTHON", "/nonexistent/python3");
    expect_input_error([] { peer_environment(); }, {"QTUNE_PYTHON", "/nonexistent/python3"});
  }
  ScopedEnvironment python("QTUNE_PYTHON", "/bin/sh");  // any executable: the package is what is missing
  ScopedEnvironment folder("QTUNE_PEERS_DIR", "/nonexistent/qtune-peers");
  expect_input_error([] { peer_environment(); }, {"QTUNE_PEERS_DIR", "/nonexistent/qtune-peers"});
}

TEST(PeerEnvironment, PeerPathsFromTheOptionComeBeforeTheVariable) {
  QTUNE_REQUIRE_PEER_PYTHON(found);
  ScopedEnvironment paths("QTUNE_PEER_PATH", "/peers/humming::/peers/site");
  const PeerEnvironment environment = peer_environment({"/option/marlin"});
  ASSERT_EQ(environment.peer_paths.size(), 3u);
  EXPECT_EQ(environment.peer_paths[0], "/option/marlin");
  EXPECT_EQ(environment.peer_paths[1], "/peers/humming");
  EXPECT_EQ(environment.peer_paths[2], "/peers/site");
  EXPECT_EQ(environment.abi_library, found.abi_library);
  const measure::WorkerOptions options = peer_worker_options(environment);
  EXPECT_EQ(options.executable, environment.python.string());
  EXPECT_TRUE(contains(options.arguments.at(0), "qtune_peer_worker.py"));
  EXPECT_EQ(std::count(options.arguments.begin(), options.arguments.end(), "--peer-path"), 3);
}

TEST(PeerHost, DescribesEveryPeerWithItsProvidersAndWhatToInstall) {
  QTUNE_REQUIRE_PEER_PYTHON(environment);
  PeerHost host(environment);
  const std::vector<PeerInfo>& peers = host.describe(kTimeout);
  std::map<std::string, PeerInfo> by_name;
  for (const PeerInfo& peer : peers) by_name[peer.peer] = peer;
  for (const char* name : {"torch", "marlin", "gptq_marlin", "humming", "deepgemm", "fake", "absent"}) {
    ASSERT_TRUE(by_name.contains(name)) << name;
    const PeerInfo& peer = by_name[name];
    EXPECT_FALSE(peer.install.empty()) << name;
    EXPECT_FALSE(peer.providers.empty()) << name;
    if (!peer.available) {
      EXPECT_FALSE(peer.problem.empty()) << name;
    }
    // The adapters name their operands as qtune does, so a provider id round-trips unchanged.
    for (const std::string& provider : peer.providers) EXPECT_EQ(parse_provider_id(provider).text(), provider);
  }
  EXPECT_TRUE(by_name["fake"].available);
  EXPECT_EQ(by_name["fake"].version, "1.0");
  EXPECT_FALSE(by_name["absent"].available);
  EXPECT_TRUE(contains(by_name["absent"].problem, "not importable")) << by_name["absent"].problem;
  const std::vector<std::string> humming = by_name["humming"].providers;
  EXPECT_NE(std::find(humming.begin(), humming.end(), "humming-w4a16-int4-ch"), humming.end());
  EXPECT_NE(std::find(humming.begin(), humming.end(), "humming-w4a8-int4-fp8:scale=f16"), humming.end());
  const std::vector<std::string> torch = by_name["torch"].providers;
  EXPECT_NE(std::find(torch.begin(), torch.end(), "torch-w8a8-fp8-ch:out=bf16"), torch.end());
}

TEST(PeerHost, RefusesWhatCannotRunWithOneLineNamingTheProvider) {
  QTUNE_REQUIRE_PEER_PYTHON(environment);
  PeerHost host(environment);
  EXPECT_NO_THROW(host.require(parse_provider_id("fake-w4a16-int4-ch"), kTimeout));
  const auto refused = [&](const std::string& provider, const std::string& part) {
    expect_input_error([&] { host.require(parse_provider_id(provider), kTimeout); }, {"provider '" + provider + "'", part});
  };
  refused("absent-w4a16-int4-ch", "pip install absent-peer");
  refused("nosuch-f16", "known: ");
  refused("fake-w8a8-int8-ch", "offers fake-w4a16-int4-ch, fake-f16");
}

TEST(PeerHost, ARefusalNamesTheSameFormatWithThePeersOptions) {
  const std::vector<std::string> offered = {"humming-w4a16-int4-ch", "humming-w4a8-int4-fp8:scale=f16",
                                            "humming-w4a8-int4-int8:scale=f16", "humming-w4a8-int4-fp8x:scale=f16"};
  EXPECT_EQ(offered_variants(parse_provider_id("humming-w4a8-int4-fp8"), offered),
            std::vector<std::string>{"w4a8-int4-fp8:scale=f16"});
  EXPECT_TRUE(offered_variants(parse_provider_id("humming-w8a8-int8-ch"), offered).empty());
}

TEST(PeerHost, ConfigurationsComeFromTheAdapter) {
  QTUNE_REQUIRE_PEER_PYTHON(environment);
  PeerHost host(environment);
  const std::vector<nlohmann::json> configs = host.configurations(parse_provider_id("fake-f16"), kSmall, kTimeout);
  ASSERT_EQ(configs.size(), 2u);
  EXPECT_EQ(configs[0], (nlohmann::json{{"behaviour", "correct"}}));
}

TEST(PeerHost, ARightAnswerIsVerifiedAgainstQtunesReference) {
  QTUNE_REQUIRE_PEER_PYTHON(environment);
  PeerHost host(environment);
  for (const char* provider : {"fake-w4a16-int4-ch", "fake-f16"}) {
    const PeerResult result = host.run(parse_provider_id(provider), kSmall, {{"behaviour", "correct"}}, verify_only());
    ASSERT_EQ(result.outcome, PeerOutcome::Verified) << provider << ": " << result.error;
    ASSERT_TRUE(result.verification.has_value());
    EXPECT_TRUE(result.verification->passed);
    EXPECT_LT(result.verification->relative_error, 1e-3) << result.verification->summary;
    EXPECT_EQ(result.verification->nan_count, 0);
    EXPECT_EQ(result.peer_version, "1.0");
    EXPECT_EQ(result.config, (nlohmann::json{{"behaviour", "correct"}}));
    EXPECT_FALSE(result.measurement.has_value());
  }
  EXPECT_EQ(host.workers_started(), 1);  // one worker served every job
}

TEST(PeerHost, AWrongAnswerIsRecordedAndNeverMeasured) {
  QTUNE_REQUIRE_PEER_PYTHON(environment);
  PeerHost host(environment);
  PeerRunOptions options = verify_only();
  options.measure_time = true;  // asked for, but a wrong answer is never measured
  const PeerResult result = host.run(parse_provider_id("fake-w4a16-int4-ch"), kSmall, {{"behaviour", "wrong"}}, options);
  expect_failed(result, PeerOutcome::WrongAnswer, "FAIL");
  ASSERT_TRUE(result.verification.has_value());
  EXPECT_FALSE(result.verification->passed);
  EXPECT_GT(result.verification->bad_count, 0);
}

TEST(PeerHost, AnExceptionOrABadConfigIsAnErrorAndTheWorkerLivesOn) {
  QTUNE_REQUIRE_PEER_PYTHON(environment);
  PeerHost host(environment);
  const ProviderId fake = parse_provider_id("fake-f16");
  expect_failed(host.run(fake, kSmall, {{"behaviour", "raise"}}, verify_only()), PeerOutcome::Error,
                "the fake peer's kernel failed", "exception");
  expect_failed(host.run(fake, kSmall, {{"colour", "blue"}}, verify_only()), PeerOutcome::Error, "'colour'",
                "InputError");
  expect_failed(host.run(parse_provider_id("absent-w4a16-int4-ch"), kSmall, {}, verify_only()), PeerOutcome::Error,
                "pip install absent-peer", "InputError");
  EXPECT_EQ(host.run(fake, kSmall, {}, verify_only()).outcome, PeerOutcome::Verified);
  EXPECT_EQ(host.workers_started(), 1);
}

TEST(PeerHost, ACrashOrAnExitKillsOnlyTheWorker) {
  QTUNE_REQUIRE_PEER_PYTHON(environment);
  PeerHost host(environment);
  const ProviderId fake = parse_provider_id("fake-f16");
  expect_failed(host.run(fake, kSmall, {{"behaviour", "crash"}}, verify_only()), PeerOutcome::Crashed, "signal 11");
  expect_failed(host.run(fake, kSmall, {{"behaviour", "exit"}}, verify_only()), PeerOutcome::Crashed,
                "exited with status 7");
  EXPECT_EQ(host.run(fake, kSmall, {}, verify_only()).outcome, PeerOutcome::Verified);
  EXPECT_EQ(host.workers_started(), 3);  // a fresh worker after each death
}

TEST(PeerHost, AHangIsKilledByTheWatchdog) {
  QTUNE_REQUIRE_PEER_PYTHON(environment);
  PeerHost host(environment);
  const ProviderId fake = parse_provider_id("fake-f16");
  host.describe(kTimeout);  // the worker is up, so the hang alone meets the watchdog
  const PeerResult hung = host.run(fake, kSmall, {{"behaviour", "hang"}}, verify_only(2.0));
  expect_failed(hung, PeerOutcome::Timeout, "did not finish within 2 s");
  EXPECT_LT(hung.seconds, 30);
  EXPECT_EQ(host.run(fake, kSmall, {}, verify_only()).outcome, PeerOutcome::Verified);
}

// The fake peer has no GPU kernel for CUPTI to time: it times itself on the host (Adapter.measure), so that the
// commands can be tested end to end without a GPU. The real adapters use qtune's measure() (test_peer_abi.cpp checks
// that it says so without a GPU).
TEST(PeerHost, TheFakePeerIsTimedOnTheHost) {
  QTUNE_REQUIRE_PEER_PYTHON(environment);
  PeerHost host(environment);
  PeerRunOptions options = verify_only();
  options.measure_time = true;
  const PeerResult result = host.run(parse_provider_id("fake-f16"), kSmall, {}, options);
  ASSERT_EQ(result.outcome, PeerOutcome::Measured) << result.error;
  ASSERT_TRUE(result.measurement.has_value());
  EXPECT_GT(result.measurement->median_us, 0);
  EXPECT_EQ(result.measurement->samples_us.size(), 3u);
  EXPECT_EQ(result.measurement->device_name, "host (fake peer)");
}

// A small MoE problem: 4 experts, top-2, 3 tokens, N = 16, K = 64 per expert.
PeerProblem small_moe(MoeProjection projection) {
  PeerProblem problem;
  problem.seed = 5;
  problem.moe = MoeProblem{.format = FormatSpec::parse("w4a16-int4-ch"), .experts = 4, .top_k = 2, .tokens = 3, .n = 16,
                           .k = 64, .projection = projection};
  return problem;
}

// The fake peer computes the MoE output peer_abi.h defines from qtune's operands (routing, touched experts): right
// for both projections, and its wrong behaviour is caught by the MoE reference.
TEST(PeerHost, AMoeProblemRunsThroughAPeerAndIsCheckedAgainstTheMoeReference) {
  QTUNE_REQUIRE_PEER_PYTHON(environment);
  PeerHost host(environment);
  const ProviderId fake = parse_provider_id("fake-w4a16-int4-ch");
  EXPECT_NO_THROW(host.require_moe(fake, kTimeout));
  for (const MoeProjection projection : {MoeProjection::GateUp, MoeProjection::Down}) {
    const PeerProblem problem = small_moe(projection);
    const std::vector<nlohmann::json> configs = host.configurations(fake, problem, kTimeout);
    ASSERT_FALSE(configs.empty());
    EXPECT_EQ(configs.front(), (nlohmann::json{{"behaviour", "correct"}}));
    const PeerResult right = host.run(fake, problem, configs.front(), verify_only());
    ASSERT_EQ(right.outcome, PeerOutcome::Verified) << moe_projection_name(projection) << ": " << right.error;
    EXPECT_LT(right.verification->relative_error, 1e-3) << right.verification->summary;
    const PeerResult wrong = host.run(fake, problem, {{"behaviour", "wrong"}}, verify_only());
    expect_failed(wrong, PeerOutcome::WrongAnswer, "FAIL");
  }
  // The problem's format must be the provider's.
  PeerProblem other = small_moe(MoeProjection::GateUp);
  other.moe->format = FormatSpec::parse("w4a16-int4-g128");
  other.moe->k = 128;
  expect_failed(host.run(fake, other, {}, verify_only()), PeerOutcome::Error, "problem.moe.format", "InputError");
  EXPECT_EQ(host.workers_started(), 1);
}

TEST(PeerHost, APeerWithoutMoeKernelsIsRefusedForMoeInOneLine) {
  QTUNE_REQUIRE_PEER_PYTHON(environment);
  PeerHost host(environment);
  // fake runs f16 GEMMs dense only; absent is not installed; nosuch is no peer.
  expect_input_error([&] { host.require_moe(parse_provider_id("fake-f16"), kTimeout); },
                     {"provider 'fake-f16'", "runs MoE GEMMs as fake-w4a16-int4-ch"});
  expect_input_error([&] { host.require_moe(parse_provider_id("absent-w4a16-int4-ch"), kTimeout); },
                     {"provider 'absent-w4a16-int4-ch'", "pip install absent-peer"});
  expect_input_error([&] { host.require_moe(parse_provider_id("nosuch-w4a16-int4-ch"), kTimeout); }, {"no peer 'nosuch'"});
  PeerProblem moe = small_moe(MoeProjection::Down);
  expect_failed(host.run(parse_provider_id("fake-f16"), moe, {}, verify_only()), PeerOutcome::Error,
                "offers fake-w4a16-int4-ch, fake-w4a16-int4-g128 for MoE GEMMs", "InputError");
}

TEST(PeerHost, OutcomesHaveNames) {
  EXPECT_EQ(to_string(PeerOutcome::Measured), "measured");
  EXPECT_EQ(to_string(PeerOutcome::WrongAnswer), "wrong-answer");
  EXPECT_EQ(to_string(PeerOutcome::Timeout), "timeout");
}

TEST(PeersPythonPackage, UnitTestsPass) {
  QTUNE_REQUIRE_PEER_PYTHON(environment);
  const auto [status, output] = testing::run_command(
      "'" + environment.python.string() + "' -m unittest discover -s '" + (environment.package_dir / "tests").string() +
      "' 2>&1");
  EXPECT_EQ(status, 0) << output;
  EXPECT_TRUE(contains(output, "OK")) << output;
}

// The table qtune writes is the one the Python loader reads: the same config for every M, the same layer key.
TEST(HummingTableFile, ThePythonLoaderReadsWhatQtuneWrites) {
  QTUNE_REQUIRE_PEER_PYTHON(environment);
  const auto config_for = [](int bm) {
    return search::HummingSpace::from_tuning_config(
        {{"block_shape", {bm, 256, 64}}, {"warp_shape", {bm, 32, 64}}, {"num_stages", 4}});
  };
  std::vector<reports::HummingCell> cells;
  for (std::int64_t m : {1, 16, 64, 4096}) {
    cells.push_back({"w4a16-int4-g128", m, 8192, 8192, config_for(m <= 16 ? 16 : 128), 10.0});
  }
  const reports::HummingTable table = reports::build_humming_table("h200", "NVIDIA H200", 90, cells);
  test_support::TempDir directory;
  const std::filesystem::path path = directory.path() / "table.json";
  reports::write_humming_table(table, path);
  const std::string script =
      "import json, sys; sys.path.insert(0, sys.argv[1]); from qtune_peers import humming_table as t; "
      "table = t.load(sys.argv[2]); layer = json.load(open(sys.argv[2]))['layers'][0]['layer']; "
      "print(json.dumps([t.lookup(table, layer, m) for m in (1, 16, 17, 64, 65, 100000)] + "
      "[t.matches_device(table, 'NVIDIA H200', (9, 0)), t.matches_device(table, 'NVIDIA A100', (8, 0))]))";
  const auto [status, output] = testing::run_command("'" + environment.python.string() + "' -c \"" + script + "\" '" +
                                                     environment.package_dir.string() + "' '" + path.string() + "' 2>&1");
  ASSERT_EQ(status, 0) << output;
  const nlohmann::json answers = nlohmann::json::parse(output);
  const nlohmann::json small = search::HummingSpace::tuning_config(config_for(16));
  const nlohmann::json large = search::HummingSpace::tuning_config(config_for(128));
  EXPECT_EQ(answers, nlohmann::json({small, small, large, large, large, large, true, false}));
}

}  // namespace
}  // namespace qtune::peers
