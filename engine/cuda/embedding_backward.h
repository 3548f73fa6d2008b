// The embedding backward fused with the sparse optimizers on a CUDA device (FBGEMM's
// "backward + optimizer" TBE kernels, deterministic): every id occurrence of a batch is
// keyed by (table, id) and stably radix-sorted (CUB; the keys take only as many bits as
// the tables' rows and count need: 25 for multihot's 26 tables of 1M rows) with its
// d_pooled offset and coefficient as one 64-bit payload, each run of one key is a touched
// row, and one warp per row (several warps a block, each on its own rows) sums the row's
// gradient over its occurrences in sorted order, then applies the optimizer to the row
// once, the row and its optimizer state asked of L2 before the sum so that the update
// does not wait for memory after it. A row of more than 64 occurrences (zipf ids give a
// table's hottest row a fifth of them) is left to a second kernel, a block of 256 threads
// per row that stages the occurrences' d_pooled rows in shared memory before summing them
// in the same order. No float atomics (an atomic index lists the hot rows; each row is one
// block's alone, so their order changes nothing).
//
// Bits: the CPU (engine/embedding/embedding_bag.cc BackwardAndUpdate, sparse_optimizer.cc)
// groups a table's occurrences by id in (feature, position) order and sums coef * d_pooled
// in that order; the stable sort of the feature-major occurrences by (table, id) gives the
// same order, and every operation is a separately rounded multiply, add, divide or square
// root in the CPU's order (row-wise Adagrad's squared norm in the CPU's 8 interleaved
// partial sums). So tables and optimizer state equal the CPU's bit for bit (tested on a
// device).
//
// Per-step scalars (SparseStepArgs) are read from device memory, so that a captured CUDA
// graph replays any step; a nonzero *skip (a diverged step) makes the update change nothing.
//
// Memory: every pointer in the arguments is device memory borrowed for the call; the
// scratch (keys, sort buffers, CUB's temporary storage) is the object's, grown as needed.
// Thread safety: one object is used by one thread at a time. Run uses one stream; Sort and
// Update may use two, the caller ordering Update after its Sort (an event) and the next
// Sort after that Update.
// Errors: kInvalidArgument for bad sizes, naming them (a batch of more than 2^32 pooled
// values among them); kInternal for CUDA failures.
// A table wider than MaxDim or longer than kMaxDeviceRows is the caller's to refuse up front.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "engine/config/dlrm.pb.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/pooled_embedding.h"

namespace dlrm::cuda {

struct SparseFeatureArgs {
  int32_t table = 0;
  int32_t pooled_offset = 0;  // first column of this feature in a d_pooled row
  int32_t mean = 0;           // 1: MEAN pooling (gradient / bag length)
};

struct SparseTableArgs {
  float* weights = nullptr;  // [num_rows x dim] (FP32 rows)
  int64_t num_rows = 0;
  int32_t dim = 0;
  // The optimizer's state, as the CPU names it: Adagrad sum_sq [rows x dim]; row-wise
  // Adagrad row_sum_sq [rows]; Adam exp_avg, exp_avg_sq [rows x dim]; SGD none.
  float* state0 = nullptr;
  float* state1 = nullptr;
  // A BF16 / FP16 table (half 1 / 2; 0: FP32): its rows [num_rows x dim], updated in fp32
  // and narrowed as its rounding says (stochastic: with half_bits::RoundingWord's bits).
  uint16_t* halves = nullptr;
  int32_t half = 0;
  int32_t stochastic = 0;
  uint64_t rounding_key = 0;  // half_bits::RoundingKey(seed, table index)
  // A shard of a larger table (half_row.h's HalfRounding): its row r, column k draws the
  // bits of the whole table's row row_begin + r, column col_begin + k.
  int64_t row_begin = 0;
  int32_t col_begin = 0;
  // An SSD table's cache (EmbeddingTable::KeyRoundingBy): slot r draws the bits of table
  // row row_keys[r], the row it holds, instead (null: row_begin + r).
  const int64_t* row_keys = nullptr;
};

struct EmbeddingBackwardArgs {
  const SparseFeatureArgs* features = nullptr;  // [num_features]
  int32_t num_features = 0;
  const SparseTableArgs* tables = nullptr;  // [num_tables]
  int32_t num_tables = 0;
  int32_t max_dim = 0;  // the largest table dim
  int64_t batch_size = 0;
  const int64_t* offsets = nullptr;  // [num_features * batch_size + 1], feature-major
  const DeviceId* ids = nullptr;     // [num_ids]
  int32_t id_bits = 32;              // every id is below 2^id_bits (IdBitsFor), <= 32
  const float* weights = nullptr;    // [num_ids] or null (all 1)
  int64_t num_ids = 0;
  const float* d_pooled = nullptr;  // [batch_size x pooled_width]
  int32_t pooled_width = 0;
  const int32_t* skip = nullptr;  // nonzero when the kernel runs: no row changes (or null)
};

// The optimizer of a step and its scalars, as the CPU computes them.
struct SparseStepArgs {
  int32_t kind = 0;  // SGD, Adagrad, row-wise Adagrad, Adam (embedding_backward.cu)
  float lr = 0, eps = 0, beta1 = 0, beta2 = 0, bias1 = 1, bias2 = 1;
  int64_t step = 1;  // the 1-based step: stochastic rounding's counter
};
// `optimizer`'s kind and scalars at learning rate `lr` and 1-based `step`
// (kInvalidArgument if < 1).
SparseStepArgs MakeSparseStepArgs(const config::SparseOptimizerConfig& optimizer, float lr,
                                  int64_t step);

class EmbeddingBackward {
 public:
  // The most warps a block of the few-occurrence rows' kernel has.
  static constexpr int kMaxRowWarpsPerBlock = 8;
  // A block's dynamic shared memory without opting in (several warps a block only within
  // it; past it the kernels opt in).
  static constexpr size_t kDefaultSharedBytes = 48 * 1024;
  static constexpr int kDefaultRowWarps = 4;

  // row_warps: the warps of each block of the few-occurrence rows' kernel (1 to
  // kMaxRowWarpsPerBlock; fewer where their scratch would pass a block's default 48 KiB of
  // shared memory). Only the speed depends on it, never a bit (kInvalidArgument outside).
  explicit EmbeddingBackward(int row_warps = kDefaultRowWarps);

  // The id_bits of tables of at most `max_rows` rows (1 to kMaxDeviceRows): the fewer the
  // bits, the fewer passes the sort makes.
  static int32_t IdBitsFor(int64_t max_rows);
  // The widest table whose row gradient fits a block's shared memory of this many bytes
  // (the device's opt-in limit: 227 KiB on an H100, 163 KiB on an A100).
  static int32_t MaxDim(size_t shared_bytes_per_block);

  // Checks `args`' sizes and sizes every scratch buffer for them, so that a Run of these
  // sizes throws nothing but a launch failure: a step calls this before it enqueues
  // anything that changes state. Allocates only when num_ids grows.
  void Prepare(const EmbeddingBackwardArgs& args);
  // Applies the optimizer step at `step_args` (device memory: MakeSparseStepArgs' result)
  // to every row the batch touched: Prepare, Sort, then Update, on one stream.
  void Run(const EmbeddingBackwardArgs& args, const SparseStepArgs* step_args, cudaStream_t stream);
  // Run's first half, for `args` the caller has Prepare()d (so it throws nothing but a
  // launch failure, and enqueues only, as a CUDA graph's capture needs): keys every
  // occurrence by (table, id), sorts the keys and segments them into touched rows. It
  // reads the batch's offsets, ids and weights, never d_pooled or a table: a step may run
  // it on a second stream beside its forward and backward.
  void Sort(const EmbeddingBackwardArgs& args, cudaStream_t stream);
  // Run's second half: the update of every row the last Sort segmented, for the same
  // batch (`args` as Sort's, d_pooled now computed), on a stream ordered after that Sort.
  void Update(const EmbeddingBackwardArgs& args, const SparseStepArgs* step_args,
              cudaStream_t stream);

 private:
  static int EndBit(const EmbeddingBackwardArgs& args);
  // The warps of UpdateRows' blocks for tables of at most max_dim columns.
  int RowWarps(int32_t max_dim) const;
  void ReserveTemp(int64_t n, int end_bit);
  void SortAndSegment(int64_t n, int end_bit, cudaStream_t stream);

  int row_warps_;
  DeviceBuffer<uint64_t> keys_, sorted_keys_, unique_keys_;
  DeviceBuffer<uint64_t> occurrences_, sorted_occurrences_;  // the sort's payload
  DeviceBuffer<int64_t> segment_begin_;
  DeviceBuffer<int32_t> counts_, num_segments_, hot_;
  DeviceBuffer<uint8_t> cub_temp_;
  size_t shared_bytes_ = kDefaultSharedBytes;  // the update kernels' dynamic shared memory limit
};

}  // namespace dlrm::cuda
