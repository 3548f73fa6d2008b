// For the harnesses that feed checkpoint files (fuzz_checkpoint, fuzz_manifest): the CRC
// re-sealing that lets a mutation get past the checksum. Separate from fuzz_support.h,
// which the harnesses without the checkpoint layer include too.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "engine/checkpoint/checkpoint_file.h"

namespace dlrm::fuzz {

// Recomputes the CRC32C trailer of a CheckpointWriter file (4 bytes of CRC, then
// "DLRMEND!"), so that a mutation reaches the header, metadata and tensors instead of
// being caught by the checksum alone.
inline void SealCheckpointFile(std::string* file) {
  constexpr size_t kTrailer = 4 + 8;
  if (file->size() < kTrailer) return;
  const size_t body = file->size() - kTrailer;
  const uint32_t crc = Crc32c(0, file->data(), body);
  std::memcpy(&(*file)[body], &crc, sizeof crc);
}

}  // namespace dlrm::fuzz
