// Directories an engine owns for a while (issue 14's SSD tier keeps its working row store
// in one): a fresh directory of its own, removed with everything in it when the owner is
// destroyed. A process killed with SIGKILL leaves it behind; nothing reads it again.
//
// Ownership: a ScratchDir owns its directory. Threading: immutable after construction.
// Errors: kIo naming the parent directory when the directory cannot be made; removal on
// destruction is best effort (a destructor does not throw).
#pragma once

#include <string>

namespace dlrm {

class ScratchDir {
 public:
  // Makes <parent>/<prefix>XXXXXX (unique, mode 0700), creating parent when missing.
  ScratchDir(const std::string& parent, const std::string& prefix);
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The system's directory for temporary files: $TMPDIR, else /tmp.
std::string TempDirectory();

// The extension of files that are never changed once written (the SSD tier's sealed row
// segments, embedding/row_store.h): a copy may hard-link them.
inline constexpr const char* kImmutableFileExtension = ".seg";

// Copies the regular files of directory `from` into `to` (made, and must not exist),
// hard-linking those named kImmutableFileExtension where the filesystem allows, so a copy of a
// large store is quick and takes no space. kIo naming the directories when a file could not be
// copied; `to` is removed again then.
void CopyDirectoryLinking(const std::string& from, const std::string& to);

}  // namespace dlrm
