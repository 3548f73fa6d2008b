#include "engine/train/fetched_rows.h"

#include <algorithm>

namespace dlrm::train {

void GrowFetchedTable(EmbeddingTable<float>* table, int64_t rows) {
  if (table->num_rows() < rows)
    *table = EmbeddingTable<float>(table->name(), rows + rows / 2, table->dim());
}

void PlaceFetchedRows(const float* values, int64_t count, int32_t width, int32_t col_begin,
                      int64_t first, EmbeddingTable<float>* table) {
  for (int64_t i = 0; i < count; ++i)
    std::copy(values + i * width, values + (i + 1) * width, table->row(first + i) + col_begin);
}

}  // namespace dlrm::train
