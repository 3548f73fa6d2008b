// A row's packed form, the one layout every copy of a row outside its table uses (the SSD
// tier's store, a DYNAMIC step's saved rows): the row's dim weights (as floats, widened
// where the table's rows are BF16 / FP16: unpacking gives the same bits back), then its
// slice of each optimizer state buffer in StateBuffers order. Each buffer holds buffer
// size / the table's rows values per row.
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

// Floats in one packed row of table with these optimizer state buffers.
int64_t PackedRowWidth(const EmbeddingTable<float>& table, const StateBufferList& state);
// Copies row's weights and state into out; returns the end of what it wrote.
float* PackRow(const EmbeddingTable<float>& table, const StateBufferList& state, int64_t row,
               float* out);
// Copies a packed row from in into row's weights and state; returns the end of what it read.
const float* UnpackRow(const float* in, const StateBufferList& state, int64_t row,
                       EmbeddingTable<float>* table);

}  // namespace dlrm
