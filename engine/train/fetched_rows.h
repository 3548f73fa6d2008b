// The compact tables a trainer pools fetched rows from: row i of a table's is the i-th of
// the part's distinct ids (sorted) of that model table, which the part's bags are
// renumbered into before pooling. Both trainers fill them the same way: the data-parallel
// one with the embedding servers' answers (data_parallel_trainer.h), the Neo one with the
// rows of row-wise pieces other trainers hold (model_parallel_trainer.h).
//
// Ownership: the caller's tables. Threading: the caller's. Errors: none; callers check the
// sizes they were sent before placing.
#pragma once

#include <cstdint>

#include "engine/embedding/embedding_table.h"

namespace dlrm::train {

// Room for `rows` rows in *table, reallocated only to grow (by half again): the renumbered
// ids stay below the part's distinct count, and a table reallocated every step (its size
// following the ids) would fault its pages in afresh.
void GrowFetchedTable(EmbeddingTable<float>* table, int64_t rows);

// values [count x width] into table rows [first, first + count), from column col_begin.
void PlaceFetchedRows(const float* values, int64_t count, int32_t width, int32_t col_begin,
                      int64_t first, EmbeddingTable<float>* table);

}  // namespace dlrm::train
