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
// a shard (row_begin, col_begin) draws exactly the values of the full table.
template <typename T, typename Draw>
void FillRows(EmbeddingTable<T>& table, uint64_t seed, int32_t table_index, int64_t row_begin,
              int32_t col_begin, Draw draw) {
  const uint64_t stream = kStreamEmbeddingBase + static_cast<uint64_t>(table_index);
  const int32_t dim = table.dim();
  for (int64_t r = 0; r < table.num_rows(); ++r) {
    const CounterRng rng(seed, stream, static_cast<uint64_t>(row_begin + r));
    T* row = table.row(r);
    for (int32_t j = 0; j < dim; ++j)
      row[j] = static_cast<T>(draw(rng, static_cast<uint64_t>(col_begin + j)));
  }
}

}  // namespace

template <typename T>
EmbeddingTable<T>::EmbeddingTable(std::string name, int64_t num_rows, int32_t dim)
    : name_(std::move(name)), num_rows_(num_rows), dim_(dim) {
  const size_t count = CheckedElementCount(name_, num_rows_, dim_);
  // Reserved (mapped, untouched) first, so the advice applies before the zero-fill faults
  // the pages in.
  data_.reserve(count);
  AdviseHugePages(data_.data(), count * sizeof(T));
  data_.resize(count);
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
  switch (init.kind()) {
    case config::Initializer::ZEROS: std::fill(data_.begin(), data_.end(), T(0)); return;
    case config::Initializer::DEFAULT: {
      const double bound = 1.0 / std::sqrt(static_cast<double>(full_rows));
      FillRows(*this, seed, table_index, row_begin, col_begin,
               [bound](const CounterRng& rng, uint64_t j) {
                 return -bound + 2.0 * bound * rng.Uniform(j);
               });
      return;
    }
    case config::Initializer::UNIFORM: {
      const double low = init.low(), width = static_cast<double>(init.high()) - init.low();
      FillRows(
          *this, seed, table_index, row_begin, col_begin,
          [low, width](const CounterRng& rng, uint64_t j) { return low + width * rng.Uniform(j); });
      return;
    }
    case config::Initializer::NORMAL: {
      const double mean = init.mean(), stddev = init.stddev();
      FillRows(*this, seed, table_index, row_begin, col_begin,
               [mean, stddev](const CounterRng& rng, uint64_t j) {
                 return mean + stddev * rng.Normal(j);
               });
      return;
    }
  }
}

template class EmbeddingTable<float>;
template class EmbeddingTable<double>;

}  // namespace dlrm
