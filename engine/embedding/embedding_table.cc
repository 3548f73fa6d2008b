#include "engine/embedding/embedding_table.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "engine/core/huge_pages.h"
#include "engine/core/philox.h"
#include "engine/core/status.h"

namespace dlrm {
namespace {

// Checked before allocating so that a bad config fails with a message, not bad_alloc or
// a silently wrapped size.
size_t CheckedElementCount(const std::string& name, int64_t num_rows, int32_t dim) {
  if (num_rows <= 0) ThrowInvalid("table '", name, "': num_rows must be > 0, got ", num_rows);
  if (dim <= 0) ThrowInvalid("table '", name, "': dim must be > 0, got ", dim);
  const auto max_elements = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (static_cast<uint64_t>(num_rows) > max_elements / static_cast<uint64_t>(dim))
    ThrowInvalid("table '", name, "': num_rows * dim (", num_rows, " * ", dim, ") is too large");
  return static_cast<size_t>(num_rows) * static_cast<size_t>(dim);
}

void ValidateInitializer(const std::string& name, const config::Initializer& init) {
  switch (init.kind()) {
    case config::Initializer::DEFAULT:
    case config::Initializer::ZEROS: return;
    case config::Initializer::UNIFORM:
      // Written as !(low < high) so that NaN bounds are rejected too.
      if (!std::isfinite(init.low()) || !std::isfinite(init.high()) || !(init.low() < init.high()))
        ThrowInvalid("table '", name, "': initializer.low (", init.low(),
                     ") must be finite and < initializer.high (", init.high(), ")");
      return;
    case config::Initializer::NORMAL:
      if (!std::isfinite(init.mean()))
        ThrowInvalid("table '", name, "': initializer.mean must be finite, got ", init.mean());
      if (!std::isfinite(init.stddev()) || !(init.stddev() >= 0.0f))
        ThrowInvalid("table '", name, "': initializer.stddev must be finite and >= 0, got ",
                     init.stddev());
      return;
  }
  ThrowInvalid("table '", name, "': initializer.kind ", static_cast<int>(init.kind()),
               " is unknown");
}

// Value j of a row is a pure function of (rng, j), so rows can be filled in any order and
// a shard (col_begin) draws exactly the values of the full table.
template <typename T, typename Draw>
void FillRow(T* row, int32_t dim, const CounterRng& rng, int32_t col_begin, Draw draw) {
  for (int32_t j = 0; j < dim; ++j)
    row[j] = static_cast<T>(draw(rng, static_cast<uint64_t>(col_begin + j)));
}

// Calls fill(draw) with the initializer's draw(rng, j); `full_rows` sets DEFAULT's bound.
template <typename Fill>
void WithDraw(const config::Initializer& init, int64_t full_rows, Fill fill) {
  switch (init.kind()) {
    case config::Initializer::ZEROS: return fill([](const CounterRng&, uint64_t) { return 0.0; });
    case config::Initializer::DEFAULT: {
      const double bound = 1.0 / std::sqrt(static_cast<double>(full_rows));
      return fill([bound](const CounterRng& rng, uint64_t j) {
        return -bound + 2.0 * bound * rng.Uniform(j);
      });
    }
    case config::Initializer::UNIFORM: {
      const double low = init.low(), width = static_cast<double>(init.high()) - init.low();
      return fill(
          [low, width](const CounterRng& rng, uint64_t j) { return low + width * rng.Uniform(j); });
    }
    case config::Initializer::NORMAL: {
      const double mean = init.mean(), stddev = init.stddev();
      return fill([mean, stddev](const CounterRng& rng, uint64_t j) {
        return mean + stddev * rng.Normal(j);
      });
    }
  }
}

// Calls fill(draw_row), where draw_row(r, rng, col_begin) stores row r of `table` as the
// initializer draws it from rng (columns from col_begin): in place for FP32 rows, else
// drawn into a scratch row and stored narrowed (quantized, or 16-bit rounded to nearest).
template <typename T, typename Fill>
void WithRowDraw(EmbeddingTable<T>& table, const config::Initializer& init, int64_t full_rows,
                 Fill fill) {
  std::vector<T> scratch(static_cast<size_t>(table.dim()));
  const bool narrow = table.quantized() || table.half();
  WithDraw(init, full_rows, [&](auto draw) {
    fill([&](int64_t r, const CounterRng& rng, int32_t col_begin) {
      T* target = narrow ? scratch.data() : table.row(r);
      FillRow(target, table.dim(), rng, col_begin, draw);
      if (table.quantized())
        QuantizeRow(target, table.dim(), table.precision(),
                    table.codes().data() + r * table.row_bytes());
      if (table.half()) table.WriteRow(r, target);
    });
  });
}

// The generator of the row a DYNAMIC table gives `id`: the stream carries the id's top 20
// bits (above the table index and the stream's own bits), the index its low 44, so every
// (table, id) has its own values.
CounterRng IdRng(uint64_t seed, int32_t table_index, int64_t id) {
  constexpr int kLowBits = 44;
  const auto bits = static_cast<uint64_t>(id);
  const uint64_t stream =
      (kStreamDynamicBase + static_cast<uint64_t>(table_index)) | ((bits >> kLowBits) << kLowBits);
  return CounterRng(seed, stream, bits & ((uint64_t{1} << kLowBits) - 1));
}

}  // namespace

template <typename T>
EmbeddingTable<T>::EmbeddingTable(std::string name, int64_t num_rows, int32_t dim,
                                  TablePrecision precision, TableRounding rounding)
    : name_(std::move(name)), num_rows_(num_rows), dim_(dim), precision_(precision) {
  rounding_.mode = rounding;
  const size_t count = CheckedElementCount(name_, num_rows_, dim_);
  // Reserved (mapped, untouched) first, so the advice applies before the zero-fill faults
  // the pages in. A quantized table has fewer bytes per row than floats: the count's
  // check covers them.
  if (quantized())
    Allocate(&codes_, static_cast<size_t>(num_rows_ * row_bytes()));
  else if (half())
    Allocate(&halves_, count);
  else
    Allocate(&data_, count);
}

template <typename T>
void EmbeddingTable<T>::ReadRow(int64_t r, T* out) const {
  if (quantized()) return DequantizeRow(code_row(r), dim_, precision_, out);
  if (half()) return DecodeHalfRow(half_row(r), dim_, precision_, out);
  std::copy(row(r), row(r) + dim_, out);
}

template <typename T>
void EmbeddingTable<T>::WriteRow(int64_t r, const T* values) {
  DLRM_INTERNAL_CHECK(!quantized());  // read-only rows
  if (half()) {
    const HalfRounding nearest{config::TableConfig::NEAREST, rounding_.seed, rounding_.table};
    return EncodeHalfRow(values, dim_, precision_, nearest, 0, r, half_row(r));
  }
  std::copy(values, values + dim_, row(r));
}

template <typename T>
void EmbeddingTable<T>::StoreRow(int64_t r, const T* values, int64_t step) {
  DLRM_INTERNAL_CHECK(!quantized());  // read-only rows
  if (half()) {
    const int64_t key_row = rounding_rows_ != nullptr ? rounding_rows_[r] : r;
    return EncodeHalfRow(values, dim_, precision_, rounding_, step, key_row, half_row(r));
  }
  std::copy(values, values + dim_, row(r));
}

template <typename T>
void EmbeddingTable<T>::SwapRows(EmbeddingTable* other) {
  DLRM_INTERNAL_CHECK(other != nullptr && other->num_rows_ == num_rows_ && other->dim_ == dim_ &&
                      other->precision_ == precision_);
  data_.swap(other->data_);
  codes_.swap(other->codes_);
  halves_.swap(other->halves_);
}

template <typename T>
template <typename E>
void EmbeddingTable<T>::Allocate(std::vector<E>* storage, size_t count) {
  storage->reserve(count);
  AdviseHugePages(storage->data(), count * sizeof(E));
  storage->resize(count);
}

template <typename T>
void EmbeddingTable<T>::Initialize(const config::Initializer& init, uint64_t seed,
                                   int32_t table_index) {
  InitializeShard(init, seed, table_index, num_rows_, 0, 0);
}

template <typename T>
void EmbeddingTable<T>::InitializeShard(const config::Initializer& init, uint64_t seed,
                                        int32_t table_index, int64_t full_rows, int64_t row_begin,
                                        int32_t col_begin) {
  ValidateInitializer(name_, init);
  if (table_index < 0)
    ThrowInvalid("table '", name_, "': table_index must be >= 0, got ", table_index);
  if (row_begin < 0 || col_begin < 0 || full_rows < row_begin + num_rows_)
    ThrowInvalid("table '", name_, "': shard rows [", row_begin, ", ", row_begin + num_rows_,
                 ") from column ", col_begin, " do not fit a table of ", full_rows, " rows");
  const uint64_t stream = kStreamEmbeddingBase + static_cast<uint64_t>(table_index);
  SetRoundingKey(seed, table_index);
  rounding_.row_begin = row_begin;
  rounding_.col_begin = col_begin;
  WithRowDraw(*this, init, full_rows, [&](auto draw_row) {
    for (int64_t r = 0; r < num_rows_; ++r)
      draw_row(r, CounterRng(seed, stream, static_cast<uint64_t>(row_begin + r)), col_begin);
  });
}

template <typename T>
void EmbeddingTable<T>::InitializeForIds(const config::Initializer& init, uint64_t seed,
                                         int32_t table_index,
                                         const std::vector<std::pair<int64_t, int64_t>>& id_rows) {
  DLRM_INTERNAL_CHECK(!quantized());  // DYNAMIC tables train: FP32, BF16 or FP16 rows
  WithRowDraw(*this, init, num_rows_, [&](auto draw_row) {
    for (const auto& [id, r] : id_rows) {
      DLRM_INTERNAL_CHECK(r >= 0 && r < num_rows_);
      draw_row(r, IdRng(seed, table_index, id), 0);
    }
  });
}

template <typename T>
void EmbeddingTable<T>::InitializeRows(const config::Initializer& init, uint64_t seed,
                                       int32_t table_index, int64_t full_rows,
                                       const std::vector<std::pair<int64_t, int64_t>>& row_slots) {
  DLRM_INTERNAL_CHECK(!quantized());  // SSD tables train: FP32, BF16 or FP16 rows
  const uint64_t stream = kStreamEmbeddingBase + static_cast<uint64_t>(table_index);
  WithRowDraw(*this, init, full_rows, [&](auto draw_row) {
    for (const auto& [r, slot] : row_slots) {
      DLRM_INTERNAL_CHECK(slot >= 0 && slot < num_rows_ && r >= 0 && r < full_rows);
      draw_row(slot, CounterRng(seed, stream, static_cast<uint64_t>(r)), 0);
    }
  });
}

template class EmbeddingTable<float>;
template class EmbeddingTable<double>;

}  // namespace dlrm
