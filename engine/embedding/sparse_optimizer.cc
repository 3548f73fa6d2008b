#include "engine/embedding/sparse_optimizer.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "engine/config/config.h"
#include "engine/core/finite.h"
#include "engine/core/prefetch.h"
#include "engine/core/status.h"

namespace dlrm {
namespace {

// ---- argument checks (hyperparameters: config.h) ----------------------------------

void ValidateShapes(const std::vector<TableShape>& tables) {
  for (size_t t = 0; t < tables.size(); ++t) {
    if (tables[t].num_rows < 0)  // 0: a table without state (quantized, read-only)
      ThrowInvalid("sparse optimizer: tables[", t, "].num_rows must be >= 0, got ",
                   tables[t].num_rows);
    if (tables[t].dim <= 0)
      ThrowInvalid("sparse optimizer: tables[", t, "].dim must be > 0, got ", tables[t].dim);
  }
}

void CheckTableIndex(int32_t table, size_t num_tables) {
  if (table < 0 || static_cast<size_t>(table) >= num_tables)
    Throw(StatusCode::kOutOfRange, "sparse optimizer: table ", table, " is outside [0, ",
          num_tables, ")");
}

// One state buffer per table with values_per_row values per row, allocated up front so
// that concurrent UpdateRow calls for different rows only touch their own slices.
template <typename T>
class TableStates {
 public:
  TableStates(const std::vector<TableShape>& tables, bool per_element, T initial)
      : per_element_(per_element), initial_(initial) {
    buffers_.reserve(tables.size());
    for (const TableShape& shape : tables) {
      const int64_t width = per_element ? shape.dim : 1;
      dims_.push_back(shape.dim);
      buffers_.emplace_back(static_cast<size_t>(shape.num_rows * width), initial);
    }
  }

  // State of (table, row) after checking that the caller's dim matches the table's: a
  // mismatch would silently index another row's state.
  T* Row(int32_t table, int64_t row, int32_t dim, int64_t width) {
    return const_cast<T*>(std::as_const(*this).Row(table, row, dim, width));
  }
  const T* Row(int32_t table, int64_t row, int32_t dim, int64_t width) const {
    DLRM_INTERNAL_CHECK(table >= 0 && static_cast<size_t>(table) < dims_.size());
    DLRM_INTERNAL_CHECK(dim == dims_[table]);
    CheckRow(table, row, width);
    return buffers_[table].data() + row * width;
  }
  void Reset(int32_t table, int64_t row) {
    DLRM_INTERNAL_CHECK(table >= 0 && static_cast<size_t>(table) < dims_.size());
    const int64_t width = per_element_ ? dims_[table] : 1;
    CheckRow(table, row, width);
    T* state = buffers_[table].data() + row * width;
    std::fill(state, state + width, initial_);
  }
  // For prefetching only: no check (the caller's ids are validated), nothing read.
  void Prefetch(int32_t table, int64_t row) const {
    const int64_t width = per_element_ ? dims_[table] : 1;
    PrefetchLines(buffers_[table].data() + row * width, sizeof(T) * static_cast<size_t>(width));
  }
  std::vector<T>* buffer(int32_t table) {
    CheckTableIndex(table, buffers_.size());
    return &buffers_[table];
  }

 private:
  // A row the table's state holds: a quantized table's holds none (StateRows), and no
  // update may reach it.
  void CheckRow(int32_t table, int64_t row, int64_t width) const {
    DLRM_INTERNAL_CHECK(row >= 0 &&
                        (row + 1) * width <= static_cast<int64_t>(buffers_[table].size()));
  }

  bool per_element_;  // dim values per row, else one
  T initial_;
  std::vector<int32_t> dims_;
  std::vector<std::vector<T>> buffers_;
};

// ---- the optimizers ------------------------------------------------------------------

// sum of g[k]^2 as 8 interleaved partial sums (k mod 8) added in a fixed tree. A single
// running sum is a chain of dependent adds the compiler may not reorder; this order it
// vectorizes, and being fixed it gives the same bits on every machine and thread.
template <typename T>
T SquaredNorm(const T* g, int32_t dim) {
  T part[8] = {};
  int32_t k = 0;
  for (; k + 8 <= dim; k += 8) {
    for (int j = 0; j < 8; ++j) part[j] += g[k + j] * g[k + j];
  }
  for (int j = 0; k < dim; ++k, ++j) part[j] += g[k] * g[k];
  return ((part[0] + part[4]) + (part[2] + part[6])) + ((part[1] + part[5]) + (part[3] + part[7]));
}

template <typename T>
class SparseSgd final : public SparseOptimizer<T> {
 public:
  explicit SparseSgd(size_t num_tables) : num_tables_(num_tables) {}

  void UpdateRow(int32_t, int64_t, T* weights, const T* grad, int32_t dim, float lr,
                 int64_t) override {
    const T lr_t = static_cast<T>(lr);
    for (int32_t k = 0; k < dim; ++k) weights[k] -= lr_t * grad[k];
  }
  bool RowUpdateIsFinite(int32_t, int64_t, const T* weights, const T* grad, int32_t dim, float lr,
                         int64_t) const override {
    const T lr_t = static_cast<T>(lr);
    FiniteCheck<T> check;
    for (int32_t k = 0; k < dim; ++k) check.Add(weights[k] - lr_t * grad[k]);
    return check.ok();
  }
  bool HasRowState() const override { return false; }
  void PrefetchState(int32_t, int64_t) const override {}
  void ResetRow(int32_t table, int64_t) override { CheckTableIndex(table, num_tables_); }

  std::vector<std::pair<std::string, std::vector<T>*>> StateBuffers(int32_t table) override {
    CheckTableIndex(table, num_tables_);
    return {};
  }

 private:
  size_t num_tables_;
};

template <typename T>
class SparseAdagrad final : public SparseOptimizer<T> {
 public:
  SparseAdagrad(const config::SparseAdagradConfig& c, const std::vector<TableShape>& tables)
      : eps_(static_cast<T>(c.eps())),
        sum_sq_(tables, /*per_element=*/true, static_cast<T>(c.initial_accumulator())) {}

  void UpdateRow(int32_t table, int64_t row, T* weights, const T* grad, int32_t dim, float lr,
                 int64_t) override {
    T* sum_sq = sum_sq_.Row(table, row, dim, dim);
    const T lr_t = static_cast<T>(lr);
    for (int32_t k = 0; k < dim; ++k) weights[k] = Element(weights[k], grad[k], lr_t, &sum_sq[k]);
  }
  bool RowUpdateIsFinite(int32_t table, int64_t row, const T* weights, const T* grad, int32_t dim,
                         float lr, int64_t) const override {
    const T* sum_sq = sum_sq_.Row(table, row, dim, dim);
    const T lr_t = static_cast<T>(lr);
    FiniteCheck<T> check;
    for (int32_t k = 0; k < dim; ++k) {
      T s = sum_sq[k];
      check.Add(Element(weights[k], grad[k], lr_t, &s));
      check.Add(s);
    }
    return check.ok();
  }
  bool HasRowState() const override { return true; }
  void PrefetchState(int32_t table, int64_t row) const override { sum_sq_.Prefetch(table, row); }
  void ResetRow(int32_t table, int64_t row) override { sum_sq_.Reset(table, row); }

  std::vector<std::pair<std::string, std::vector<T>*>> StateBuffers(int32_t table) override {
    return {{"sum_sq", sum_sq_.buffer(table)}};
  }

 private:
  // One element's new weight; *sum_sq: its accumulator, updated.
  T Element(T w, T g, T lr_t, T* sum_sq) const {
    *sum_sq += g * g;
    return w - lr_t * g / (std::sqrt(*sum_sq) + eps_);
  }

  T eps_;
  TableStates<T> sum_sq_;
};

template <typename T>
class SparseRowwiseAdagrad final : public SparseOptimizer<T> {
 public:
  SparseRowwiseAdagrad(const config::SparseRowwiseAdagradConfig& c,
                       const std::vector<TableShape>& tables)
      : eps_(static_cast<T>(c.eps())),
        row_sum_sq_(tables, /*per_element=*/false, static_cast<T>(c.initial_accumulator())) {}

  void UpdateRow(int32_t table, int64_t row, T* weights, const T* grad, int32_t dim, float lr,
                 int64_t) override {
    T* h = row_sum_sq_.Row(table, row, dim, 1);
    *h = NewSum(*h, grad, dim);
    const T lr_t = static_cast<T>(lr);
    const T denom = std::sqrt(*h) + eps_;
    for (int32_t k = 0; k < dim; ++k) weights[k] -= lr_t * grad[k] / denom;
  }
  bool RowUpdateIsFinite(int32_t table, int64_t row, const T* weights, const T* grad, int32_t dim,
                         float lr, int64_t) const override {
    const T h = NewSum(*row_sum_sq_.Row(table, row, dim, 1), grad, dim);
    const T lr_t = static_cast<T>(lr);
    const T denom = std::sqrt(h) + eps_;
    FiniteCheck<T> check;
    check.Add(h);
    for (int32_t k = 0; k < dim; ++k) check.Add(weights[k] - lr_t * grad[k] / denom);
    return check.ok();
  }
  bool HasRowState() const override { return true; }
  void PrefetchState(int32_t table, int64_t row) const override {
    row_sum_sq_.Prefetch(table, row);
  }
  void ResetRow(int32_t table, int64_t row) override { row_sum_sq_.Reset(table, row); }

  std::vector<std::pair<std::string, std::vector<T>*>> StateBuffers(int32_t table) override {
    return {{kRowSumSqState, row_sum_sq_.buffer(table)}};
  }

 private:
  // The row's accumulator after adding its gradient's mean square.
  static T NewSum(T h, const T* grad, int32_t dim) {
    return h + SquaredNorm(grad, dim) / static_cast<T>(dim);
  }

  T eps_;
  TableStates<T> row_sum_sq_;
};

// Lazy Adam: rows not touched in a step keep their moments (no decay), but the bias
// correction follows the global step, as TensorFlow's LazyAdam and FBGEMM do.
template <typename T>
class SparseAdam final : public SparseOptimizer<T> {
 public:
  SparseAdam(const config::SparseAdamConfig& c, const std::vector<TableShape>& tables)
      : beta1_(static_cast<T>(c.beta1())),
        beta2_(static_cast<T>(c.beta2())),
        eps_(static_cast<T>(c.eps())),
        exp_avg_(tables, /*per_element=*/true, T(0)),
        exp_avg_sq_(tables, /*per_element=*/true, T(0)) {}

  void UpdateRow(int32_t table, int64_t row, T* weights, const T* grad, int32_t dim, float lr,
                 int64_t step) override {
    T* m = exp_avg_.Row(table, row, dim, dim);
    T* v = exp_avg_sq_.Row(table, row, dim, dim);
    const Scalars c = ScalarsFor(lr, step);
    for (int32_t k = 0; k < dim; ++k) weights[k] = Element(c, weights[k], grad[k], &m[k], &v[k]);
  }
  bool RowUpdateIsFinite(int32_t table, int64_t row, const T* weights, const T* grad, int32_t dim,
                         float lr, int64_t step) const override {
    const T* m = exp_avg_.Row(table, row, dim, dim);
    const T* v = exp_avg_sq_.Row(table, row, dim, dim);
    const Scalars c = ScalarsFor(lr, step);
    FiniteCheck<T> check;
    for (int32_t k = 0; k < dim; ++k) {
      T mk = m[k], vk = v[k];
      check.Add(Element(c, weights[k], grad[k], &mk, &vk));
      check.Add(mk);
      check.Add(vk);
    }
    return check.ok();
  }
  bool HasRowState() const override { return true; }
  void PrefetchState(int32_t table, int64_t row) const override {
    exp_avg_.Prefetch(table, row);
    exp_avg_sq_.Prefetch(table, row);
  }
  void ResetRow(int32_t table, int64_t row) override {
    exp_avg_.Reset(table, row);
    exp_avg_sq_.Reset(table, row);
  }

  std::vector<std::pair<std::string, std::vector<T>*>> StateBuffers(int32_t table) override {
    return {{"exp_avg", exp_avg_.buffer(table)}, {"exp_avg_sq", exp_avg_sq_.buffer(table)}};
  }

 private:
  struct Scalars {
    T lr, bias1, bias2;
  };
  Scalars ScalarsFor(float lr, int64_t step) const {
    DLRM_INTERNAL_CHECK(step >= 1);
    // Computed in double: beta^t underflows gracefully and 1 - beta^t keeps its digits.
    const auto t = static_cast<double>(step);
    return {static_cast<T>(lr), static_cast<T>(1.0 - std::pow(static_cast<double>(beta1_), t)),
            static_cast<T>(1.0 - std::pow(static_cast<double>(beta2_), t))};
  }
  // One element's new weight; *m, *v: its moments, updated.
  T Element(const Scalars& c, T w, T g, T* m, T* v) const {
    *m = beta1_ * *m + (T(1) - beta1_) * g;
    *v = beta2_ * *v + (T(1) - beta2_) * g * g;
    return w - c.lr * (*m / c.bias1) / (std::sqrt(*v / c.bias2) + eps_);
  }

  T beta1_, beta2_, eps_;
  TableStates<T> exp_avg_;
  TableStates<T> exp_avg_sq_;
};

}  // namespace

template <typename T>
std::unique_ptr<SparseOptimizer<T>> MakeSparseOptimizer(const config::SparseOptimizerConfig& config,
                                                        const std::vector<TableShape>& tables) {
  RequireNonNegative("sparse_optimizer.learning_rate", config.learning_rate());
  ValidateShapes(tables);
  switch (config.kind_case()) {
    case config::SparseOptimizerConfig::kAdagrad: {
      const auto& c = config.adagrad();
      RequirePositive("sparse_optimizer.adagrad.eps", c.eps());
      RequireNonNegative("sparse_optimizer.adagrad.initial_accumulator", c.initial_accumulator());
      return std::make_unique<SparseAdagrad<T>>(c, tables);
    }
    case config::SparseOptimizerConfig::kRowwiseAdagrad: {
      const auto& c = config.rowwise_adagrad();
      RequirePositive("sparse_optimizer.rowwise_adagrad.eps", c.eps());
      RequireNonNegative("sparse_optimizer.rowwise_adagrad.initial_accumulator",
                         c.initial_accumulator());
      return std::make_unique<SparseRowwiseAdagrad<T>>(c, tables);
    }
    case config::SparseOptimizerConfig::kAdam: {
      const auto& c = config.adam();
      RequireUnitInterval("sparse_optimizer.adam.beta1", c.beta1());
      RequireUnitInterval("sparse_optimizer.adam.beta2", c.beta2());
      RequirePositive("sparse_optimizer.adam.eps", c.eps());
      return std::make_unique<SparseAdam<T>>(c, tables);
    }
    case config::SparseOptimizerConfig::kSgd:
    case config::SparseOptimizerConfig::KIND_NOT_SET:
      return std::make_unique<SparseSgd<T>>(tables.size());
  }
  ThrowInvalid("sparse_optimizer: unknown kind ", static_cast<int>(config.kind_case()));
}

template std::unique_ptr<SparseOptimizer<float>> MakeSparseOptimizer<float>(
    const config::SparseOptimizerConfig&, const std::vector<TableShape>&);
template std::unique_ptr<SparseOptimizer<double>> MakeSparseOptimizer<double>(
    const config::SparseOptimizerConfig&, const std::vector<TableShape>&);

}  // namespace dlrm
