// CRC32C (Castagnoli, as iSCSI and ext4 use): the checksum of the engine's files
// (checkpoints, the SSD tier's row records and indexes).
//
// Threading: a pure function. Errors: none.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dlrm {

// CRC32C of data[0, num_bytes), continuing from crc (0 to start).
uint32_t Crc32c(uint32_t crc, const void* data, size_t num_bytes);

}  // namespace dlrm
