// Rows of a device array copied to and from a packed list of rows in device memory: what a
// DYNAMIC table's admissions need (device_tables.h: the fresh rows the host made copied
// in over the rows they replace, those kept to be put back after a failed step).
//
// Units are 16-bit words, so one kernel moves FP32 rows (two words a value), 16-bit rows
// and optimizer state alike. A move covers rows[i] of `array` (rows of `width` words, row r
// at r * width) and packed row i of `packed` (rows of `packed_stride` words, the row's part
// at `packed_offset`): the packed layout of engine/embedding/packed_row.h, in words.
//
// Memory: every pointer is device memory borrowed for the launch; rows [n] are row indices
// of `array`. Threading: ordered by `stream`. Errors: kInternal naming a failed launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dlrm::cuda {

struct RowMove {
  uint16_t* array = nullptr;
  int64_t width = 0;  // words a row, in the array and in the packed part
  uint16_t* packed = nullptr;
  int64_t packed_stride = 0;
  int64_t packed_offset = 0;
  const int64_t* rows = nullptr;
  int64_t n = 0;
};

// packed row i's part = array row rows[i], for every i.
void LaunchGatherRows(const RowMove& move, cudaStream_t stream);
// array row rows[i] = packed row i's part, for every i (rows distinct).
void LaunchScatterRows(const RowMove& move, cudaStream_t stream);

}  // namespace dlrm::cuda
