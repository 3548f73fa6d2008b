// Shared helpers for the test suites.
#pragma once

#include <string>

namespace dlrm::testing {

// A fresh, empty directory for one test's files (under DLRM_TEST_TMPDIR or /tmp).
std::string TempDir(const std::string& name);

}  // namespace dlrm::testing
