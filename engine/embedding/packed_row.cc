#include "engine/embedding/packed_row.h"

#include <algorithm>
#include <cstring>

#include "engine/core/status.h"

namespace dlrm {
namespace {

size_t StateWidth(const std::vector<float>& buffer, const EmbeddingTable<float>& table) {
  return buffer.size() / static_cast<size_t>(table.num_rows());
}

}  // namespace

int64_t PackedWeightWidth(TablePrecision precision, int32_t dim) {
  DLRM_INTERNAL_CHECK(!IsQuantized(precision));
  return IsHalf(precision) ? (int64_t{dim} + 1) / 2 : dim;
}

int64_t PackedRowWidth(const EmbeddingTable<float>& table, const StateBufferList& state) {
  int64_t width = PackedWeightWidth(table.precision(), table.dim());
  for (const auto& [name, buffer] : state)
    width += static_cast<int64_t>(StateWidth(*buffer, table));
  return width;
}

float* PackRow(const EmbeddingTable<float>& table, const StateBufferList& state, int64_t row,
               float* out) {
  const int64_t weights = PackedWeightWidth(table.precision(), table.dim());
  if (table.half()) {         // the 16-bit words as they are, two to a float
    out[weights - 1] = 0.0f;  // an odd dim's last float has an unused upper half
    std::memcpy(out, table.half_row(row), static_cast<size_t>(table.dim()) * sizeof(uint16_t));
  } else {
    std::copy(table.row(row), table.row(row) + table.dim(), out);
  }
  out += weights;
  for (const auto& [name, buffer] : state) {
    const size_t w = StateWidth(*buffer, table);
    const float* from = buffer->data() + static_cast<size_t>(row) * w;
    out = std::copy(from, from + w, out);
  }
  return out;
}

const float* UnpackRow(const float* in, const StateBufferList& state, int64_t row,
                       EmbeddingTable<float>* table) {
  if (table->half())
    std::memcpy(table->half_row(row), in, static_cast<size_t>(table->dim()) * sizeof(uint16_t));
  else
    std::copy(in, in + table->dim(), table->row(row));
  in += PackedWeightWidth(table->precision(), table->dim());
  for (const auto& [name, buffer] : state) {
    const size_t w = StateWidth(*buffer, *table);
    std::copy(in, in + w, buffer->data() + static_cast<size_t>(row) * w);
    in += w;
  }
  return in;
}

void PackRows(const EmbeddingTable<float>& table, const StateBufferList& state,
              const std::vector<int64_t>& rows, std::vector<float>* out) {
  out->resize(rows.size() * static_cast<size_t>(PackedRowWidth(table, state)));
  float* at = out->data();
  for (const int64_t row : rows) at = PackRow(table, state, row, at);
}

void UnpackRows(const float* in, const StateBufferList& state, const std::vector<int64_t>& rows,
                EmbeddingTable<float>* table) {
  for (const int64_t row : rows) in = UnpackRow(in, state, row, table);
}

void PackedWeights(const float* in, TablePrecision precision, int32_t dim, float* out) {
  if (!IsHalf(precision)) {
    std::copy(in, in + dim, out);
    return;
  }
  const auto* bytes = reinterpret_cast<const unsigned char*>(in);
  for (int32_t k = 0; k < dim; ++k) {
    uint16_t word;
    std::memcpy(&word, bytes + k * sizeof(uint16_t), sizeof word);
    out[k] = FloatFromHalf(word, precision);
  }
}

}  // namespace dlrm
