// A row's packed form, the one layout every copy of a row outside its table uses (the SSD
// tier's store, a DYNAMIC step's saved rows), in floats: the row's weights as stored (dim
// floats, or a BF16 / FP16 row's dim 16-bit words two to a float, the last one's upper
// half zero), then its slice of each optimizer state buffer in StateBuffers order. Each
// buffer holds buffer size / the table's rows values per row.
// Ownership: none kept; the caller's table, buffers and arrays.
// Threading: none of its own.
// Errors: none; row must be a row of the table and in/out must hold PackedRowWidth floats.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/embedding/embedding_table.h"

namespace dlrm {

using StateBufferList = std::vector<std::pair<std::string, std::vector<float>*>>;

// Floats a packed row's weights take: dim, or (dim + 1) / 2 for BF16 / FP16 rows.
int64_t PackedWeightWidth(TablePrecision precision, int32_t dim);
// Floats in one packed row of table with these optimizer state buffers.
int64_t PackedRowWidth(const EmbeddingTable<float>& table, const StateBufferList& state);
// out[0, dim) = the weights of packed row `in` of a table of this precision and dim, as
// floats (widened where 16-bit).
void PackedWeights(const float* in, TablePrecision precision, int32_t dim, float* out);
// Copies row's weights and state into out; returns the end of what it wrote.
float* PackRow(const EmbeddingTable<float>& table, const StateBufferList& state, int64_t row,
               float* out);
// Copies a packed row from in into row's weights and state; returns the end of what it read.
const float* UnpackRow(const float* in, const StateBufferList& state, int64_t row,
                       EmbeddingTable<float>* table);
// *out = rows[i]'s packed rows one after the other (resized to hold them).
void PackRows(const EmbeddingTable<float>& table, const StateBufferList& state,
              const std::vector<int64_t>& rows, std::vector<float>* out);
// The packed rows in, one after the other, into rows[i]'s weights and state.
void UnpackRows(const float* in, const StateBufferList& state, const std::vector<int64_t>& rows,
                EmbeddingTable<float>* table);

}  // namespace dlrm
