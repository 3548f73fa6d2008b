// Shared by the libFuzzer harnesses of tests/fuzz/ (issue 17; built with DLRM_FUZZ, clang).
// A harness is a finding when an input crashes, trips ASan/UBSan, throws anything but a
// dlrm::Error, or gets an INTERNAL dlrm::Error (the engine's own bug, not bad input):
// Finding() prints what and aborts, which libFuzzer records with the input.
//
// Seeds: a harness whose seeds are built at run time (a checkpoint, encoded messages)
// writes them into the directory of the flag -dlrm_seeds=DIR, which LLVMFuzzerInitialize
// removes from the arguments before libFuzzer reads them (tests/fuzz/run_fuzzer.sh passes
// the corpus directory).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

#include "engine/core/status.h"

namespace dlrm::fuzz {

[[noreturn]] inline void Finding(const std::string& what) {
  std::fprintf(stderr, "FINDING: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// Runs fn; a dlrm::Error naming bad input is an answer, anything else a finding.
template <typename Fn>
void RefusedOrDone(const Fn& fn) {
  try {
    fn();
  } catch (const Error& e) {
    if (e.code() == StatusCode::kInternal) Finding(std::string("INTERNAL: ") + e.what());
  } catch (const std::exception& e) {
    Finding(std::string("escaped as std::exception: ") + e.what());
  }
}

// Takes -dlrm_seeds=DIR out of the arguments and writes seeds() there as seed_<i>.
template <typename Seeds>
void WriteSeedsIfAsked(int* argc, char*** argv, const Seeds& seeds) {
  const std::string flag = "-dlrm_seeds=";
  for (int i = 1; i < *argc; ++i) {
    const std::string arg = (*argv)[i];
    if (arg.rfind(flag, 0) != 0) continue;
    const std::vector<std::string> all = seeds();
    for (size_t k = 0; k < all.size(); ++k)
      std::ofstream(arg.substr(flag.size()) + "/seed_" + std::to_string(k), std::ios::binary)
          << all[k];
    for (int j = i; j + 1 < *argc; ++j) (*argv)[j] = (*argv)[j + 1];
    --*argc;
    return;
  }
}

}  // namespace dlrm::fuzz
