// The embedding-bag forward on a CUDA device: every bag of every sparse feature of a batch
// pooled in ONE kernel launch (TorchRec/FBGEMM's table-batched forward), sum or mean,
// optional per-id weights, variable and empty bags.
//
// Bits: each output element is the bag's rows summed in id order with separate multiply
// and add (no FMA), then divided by the bag's length for MEAN: the order and operations
// of the CPU's portable loop (engine/embedding/embedding_bag.cc), so on the same inputs
// the two give the same bits (tested on a device). A quantized serving table's bag
// (INT8 / INT4 codes, engine/embedding/quantized_row.h) is pooled from its codes as the
// CPU's PoolQuantizedBag forms it: sum_j (w_j * scale_j) * code_jk, then plus
// sum_j w_j * bias_j, each operation rounded separately.
//
// Memory: every pointer in PooledForwardArgs is device memory, borrowed for the launch;
// ids must lie in their tables' rows (validated on the host, as the CPU path does).
// Thread safety: launches are ordered by their stream; nothing here keeps state.
#pragma once

#include <cstdint>

namespace dlrm::cuda {

// A batch's row ids on the device: 32 bits, half the bytes of the host's int64 ids to pin,
// copy and read. The CUDA backend holds no table of more than kMaxDeviceRows rows, so an
// id validated against its table always fits.
using DeviceId = uint32_t;
inline constexpr int64_t kMaxDeviceRows = int64_t{1} << 32;

// One sparse feature: which table it reads and where its pooled vector goes in a row of
// the output.
struct FeatureSpec {
  const float* table = nullptr;  // [rows x dim], row-major (FP32 rows)
  int32_t dim = 0;
  int32_t out_offset = 0;            // first column of this feature in an output row
  int32_t mean = 0;                  // 1: MEAN pooling, 0: SUM
  const uint16_t* halves = nullptr;  // [rows x dim] of a BF16 / FP16 table (half != 0)
  int32_t half = 0;                  // 0: FP32 rows, 1: BF16, 2: FP16 (widened exactly)
  // A quantized table's rows (quant_bits != 0): rows x row_bytes, each the codes then the
  // row's fp16 scale and bias (StoredRowBytes, quantized_bits.h).
  const uint8_t* codes = nullptr;
  int32_t quant_bits = 0;  // 8: INT8 codes, 4: INT4 (two a byte, low nibble first); 0: none
  int32_t row_bytes = 0;
};

struct PooledForwardArgs {
  const FeatureSpec* features = nullptr;  // [num_features]
  int32_t num_features = 0;
  int64_t batch_size = 0;
  // Bag (f, b) is ids[offsets[f * B + b] .. offsets[f * B + b + 1]): the batch's lengths
  // (feature-major) as prefix sums, [num_features * B + 1].
  const int64_t* offsets = nullptr;
  const DeviceId* ids = nullptr;
  const float* weights = nullptr;  // like ids, or null (all 1)
  float* out = nullptr;            // [B x out_width]; columns no feature covers are left
  int32_t out_width = 0;
};

// Enqueues the forward on `stream` (a cudaStream_t; 0 is the default stream). kInternal
// naming the launch if the runtime refuses it; kInvalidArgument for negative sizes.
void LaunchPooledForward(const PooledForwardArgs& args, void* stream);

}  // namespace dlrm::cuda
