// The AVX2 kernel of the embedding-bag forward in float: one bag's rows summed in
// registers (a 64-column block at a time) and stored once, instead of a load, add and
// store of the output per row. Callers check CpuHasAvx2Fma() and dim % 8 == 0 first; the
// portable loop of embedding_bag.cc serves every other case.
//
// The adds happen in the portable loop's order (row by row, from zero; a weighted row is
// multiplied, then added, never fused), so both paths give the same bits.
#pragma once

#include <cstdint>

namespace dlrm {

// out[0, dim) = sum over j < count of w_j * rows[j][0, dim) (rows of floats) (w_j = 1 if weights is
// NULL), divided by count if mean and count > 0. While adding row j it prefetches rows[j +
// prefetch_distance] when that index is below `available` (the rows after this bag belong to the
// next bags of the same pass).
void PoolBagAvx2(const void* const* rows, int64_t count, const float* weights, bool mean,
                 int32_t dim, float* out, int64_t available, int64_t prefetch_distance);

}  // namespace dlrm
