#include "engine/core/scratch_dir.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include "engine/core/status.h"

namespace dlrm {

namespace fs = std::filesystem;

ScratchDir::ScratchDir(const std::string& parent, const std::string& prefix) {
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) Throw(StatusCode::kIo, "cannot create directory \"", parent, "\": ", ec.message());
  std::string pattern = (fs::path(parent) / (prefix + "XXXXXX")).string();
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (::mkdtemp(buffer.data()) == nullptr)
    Throw(StatusCode::kIo, "cannot make a directory in \"", parent, "\": ", std::strerror(errno));
  path_ = buffer.data();
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string TempDirectory() {
  std::error_code ec;
  const fs::path dir = fs::temp_directory_path(ec);
  return ec ? std::string("/tmp") : dir.string();
}

void CopyDirectoryLinking(const std::string& from, const std::string& to) {
  std::error_code ec;
  if (!fs::create_directory(to, ec) || ec)
    Throw(StatusCode::kIo, "cannot create directory \"", to, "\"",
          ec ? ": " + ec.message() : std::string(" (it exists)"));
  try {
    for (const fs::directory_entry& entry : fs::directory_iterator(from)) {
      if (!entry.is_regular_file()) continue;
      const fs::path target = fs::path(to) / entry.path().filename();
      ec.clear();
      if (entry.path().extension() == kImmutableFileExtension)
        fs::create_hard_link(entry.path(), target, ec);
      if (ec || entry.path().extension() != kImmutableFileExtension)
        fs::copy_file(entry.path(), target);
    }
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(to, ec);
    Throw(StatusCode::kIo, "cannot copy \"", from, "\" to \"", to, "\": ", e.what());
  }
}

}  // namespace dlrm
