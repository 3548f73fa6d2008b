#include "engine/embedding/packed_row.h"

#include <algorithm>

namespace dlrm {
namespace {

size_t StateWidth(const std::vector<float>& buffer, const EmbeddingTable<float>& table) {
  return buffer.size() / static_cast<size_t>(table.num_rows());
}

}  // namespace

int64_t PackedRowWidth(const EmbeddingTable<float>& table, const StateBufferList& state) {
  int64_t width = table.dim();
  for (const auto& [name, buffer] : state)
    width += static_cast<int64_t>(StateWidth(*buffer, table));
  return width;
}

float* PackRow(const EmbeddingTable<float>& table, const StateBufferList& state, int64_t row,
               float* out) {
  table.ReadRow(row, out);  // widened where the rows are 16-bit: exact
  out += table.dim();
  for (const auto& [name, buffer] : state) {
    const size_t w = StateWidth(*buffer, table);
    const float* from = buffer->data() + static_cast<size_t>(row) * w;
    out = std::copy(from, from + w, out);
  }
  return out;
}

const float* UnpackRow(const float* in, const StateBufferList& state, int64_t row,
                       EmbeddingTable<float>* table) {
  table->WriteRow(row, in);  // narrowed back where 16-bit: the row's own bits
  in += table->dim();
  for (const auto& [name, buffer] : state) {
    const size_t w = StateWidth(*buffer, *table);
    std::copy(in, in + w, buffer->data() + static_cast<size_t>(row) * w);
    in += w;
  }
  return in;
}

}  // namespace dlrm
