// libFuzzer harness (issue 17): the config text parser and validator. Every input parses
// and validates, or is refused naming bad input (fuzz_support.h); a config that passes
// validation prints as text that parses back to the same config. Seeds: the project's
// configs (bench/configs, tools/configs, tests/data), passed as corpus directories.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  // Its seeds are files already: run_fuzzer.sh's seed directories.
  dlrm::fuzz::WriteSeedsIfAsked(argc, argv, [] { return std::vector<std::string>{}; });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  dlrm::fuzz::RefusedOrDone([&] {
    const dlrm::config::DlrmConfig config = dlrm::ParseConfigText(text);
    dlrm::ValidateConfig(config);
    const dlrm::config::DlrmConfig again = dlrm::ParseConfigText(dlrm::ConfigToText(config));
    if (again.SerializeAsString() != config.SerializeAsString())
      dlrm::fuzz::Finding("a valid config does not read back as itself");
  });
  return 0;
}
