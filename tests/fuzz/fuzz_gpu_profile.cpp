// GPU profiles (configs/gpus/*.json, or a file given to --gpu): search/gpu_profile.cpp.
#include "search/config_files.hpp"
#include "search/gpu_profile.hpp"
#include "tests/fuzz/fuzz_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return qtune::fuzz::parse_or_reject(data, size, [](const std::string& text) {
    const std::string file = "fuzz/gpu.json";
    const std::vector<qtune::search::GpuProfile> profiles = {
        qtune::search::gpu_profile_from_json(qtune::parse_json_text(text, file), file)};
    const qtune::search::GpuProfile& profile = profiles.front();
    for (const std::string& name : profile.aliases) qtune::search::find_gpu_profile(profiles, name);
    qtune::search::match_device(profiles, {profile.display_name, profile.sm, profile.sm_count});
  });
}
