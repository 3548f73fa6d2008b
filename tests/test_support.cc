#include "tests/test_support.h"

#include <cstdlib>
#include <filesystem>

#include <unistd.h>

namespace dlrm::testing {

std::string TempDir(const std::string& name) {
  const char* base = std::getenv("DLRM_TEST_TMPDIR");
  std::filesystem::path dir = base ? base : std::filesystem::temp_directory_path();
  dir /= name + "." + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

}  // namespace dlrm::testing
