// The cubin manifest libqtune_runtime reads (tuner/production/cubin_store.cpp): DIR/manifest.json.
#include "kernels/input_file.hpp"
#include "tests/fuzz/fuzz_target.hpp"
#include "tuner/production/cubin_store.hpp"
#include "tuner/production/selector.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return qtune::fuzz::parse_or_reject(data, size, [](const std::string& text) {
    namespace production = qtune::production;
    const std::string file = "fuzz/manifest.json";
    const production::CubinManifest manifest =
        production::CubinManifest::from_json(qtune::parse_json_text(text, file, "cubins"), file);
    for (const production::CubinEntry& entry : manifest.kernels) {
      const int sm = production::ArchTarget::parse(entry.arch).sm;
      if (manifest.find(entry.format, entry.config, sm, entry.arch) == nullptr) {
        qtune::fuzz::finding("no entry found for " + entry.format + " " + entry.config.to_string() + " on " + entry.arch);
      }
    }
    for (const production::MoeCubinEntry& entry : manifest.moe_kernels) {
      const int sm = production::ArchTarget::parse(entry.kernel.arch).sm;
      if (manifest.find_moe(entry.kernel, sm) == nullptr) qtune::fuzz::finding("no MoE entry found for " + entry.kernel.key());
    }
    // What a manifest reads back is what it writes (`qtune export --cubins` writes manifest.to_json()).
    if (production::CubinManifest::from_json(manifest.to_json(), file).to_json() != manifest.to_json()) {
      qtune::fuzz::finding("the manifest does not read back what it writes");
    }
  });
}
