// Embedding-bag kernels on the reference models' tables and batch shapes:
//  BM_EmbeddingForward: pooled lookup of a whole batch, the batch's rows split over the
//    benchmark's threads as the engine splits chunks over its pool; /int8 the same from
//    tables of row-wise INT8 codes (issue 16's serving tables), /bf16 from BF16 rows;
//  BM_EmbeddingBackwardUpdate: the fused backward (sort by id, per-row gradient sum,
//    optimizer update) with SGD and row-wise Adagrad on the engine's thread pool; /bf16
//    on BF16 rows (each widened, updated, narrowed to nearest).
// Ids are Zipf(1.2) (as `dlrm bench`) or uniform over each table, the cache-hostile case
// to read against BM_RandomGather. Tables hold a cheap pattern instead of the engine's
// Philox initialization, which takes a minute for the multihot tables and changes no
// timing.
//
// Bytes processed: forward, the rows read (ids x the row's bytes: dim x 4, dim x 2 for
// BF16, or dim + 8 for INT8); backward, the pooled gradient
// read per id plus the read and write of each distinct row touched (and of its
// accumulator for row-wise Adagrad).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_set>
#include <vector>

#include "bench/micro/micro_bench.h"
#include "engine/config/config.h"
#include "engine/core/thread_pool.h"
#include "engine/data/batch.h"
#include "engine/embedding/embedding_bag.h"
#include "engine/embedding/embedding_table.h"
#include "engine/embedding/half_row.h"
#include "engine/embedding/quantized_row.h"
#include "engine/embedding/sparse_optimizer.h"
#include "tools/bench_data.h"

namespace dlrm::bench {
namespace {

// Distinct batches cycled through, so that one iteration does not find the previous
// iteration's rows in cache more than real traffic would.
constexpr int64_t kNumBatches = 8;
constexpr float kLearningRate = 0.01f;
constexpr float kGradScale = 1e-3f;

struct Tables {
  std::vector<EmbeddingTable<float>> tables;
  std::vector<TableShape> shapes;
  std::vector<SparseFeatureSpec> specs;
  std::unique_ptr<EmbeddingBagCollection<float>> bags;
};

struct BatchSet {
  std::vector<OwnedBatch> owned;
  std::vector<ValidatedBatch> batches;  // views into owned
  std::vector<int64_t> row_bytes;       // per batch: bytes of the rows its ids read
  std::vector<int64_t> unique_bytes;    // per batch: bytes of its distinct rows
  std::vector<int64_t> unique_rows;     // per batch: its distinct (table, row) pairs
  std::vector<float> d_pooled;          // [batch_size x pooled_width]
};

// The pattern row by row, quantized or narrowed (the values an FP32 table holds, as codes
// or 16-bit values).
void FillNarrow(EmbeddingTable<float>* table, uint64_t seed) {
  std::vector<float> row(static_cast<size_t>(table->dim()));
  for (int64_t r = 0; r < table->num_rows(); ++r) {
    FillPattern(row.data(), table->dim(), 0.01f, seed + static_cast<uint64_t>(r));
    if (table->half())
      table->StoreRow(r, row.data(), 0);
    else
      QuantizeRow(row.data(), table->dim(), table->precision(),
                  table->codes().data() + r * table->row_bytes());
  }
}

std::unique_ptr<Tables> MakeTables(const config::ModelConfig& model,
                                   TablePrecision precision = config::TableConfig::FP32) {
  auto t = std::make_unique<Tables>();
  t->tables.reserve(model.tables_size());
  for (int i = 0; i < model.tables_size(); ++i) {
    const auto& tc = model.tables(i);
    t->tables.emplace_back(tc.name(), tc.num_rows(), tc.dim(), precision);
    std::vector<float>& data = t->tables.back().data();
    if (IsQuantized(precision) || IsHalf(precision))
      FillNarrow(&t->tables.back(), static_cast<uint64_t>(i));
    else
      FillPattern(data.data(), static_cast<int64_t>(data.size()), 0.01f, static_cast<uint64_t>(i));
    t->shapes.push_back({tc.num_rows(), tc.dim()});
  }
  // The same binding as DlrmModel: features' pooled columns in feature order.
  std::vector<FeatureBinding> bindings;
  int32_t width = 0;
  for (const auto& feature : model.sparse_features()) {
    const int table = FindTable(model, feature.table());
    bindings.push_back({table, width, feature.pooling() == config::SparseFeatureConfig::MEAN});
    t->specs.push_back({table, model.tables(table).num_rows()});
    width += model.tables(table).dim();
  }
  t->bags = std::make_unique<EmbeddingBagCollection<float>>(&t->tables, bindings, width);
  return t;
}

std::unique_ptr<BatchSet> MakeBatches(const ReferenceModel& ref, const Tables& tables,
                                      double zipf) {
  const config::ModelConfig& model = ref.config.model();
  auto set = std::make_unique<BatchSet>();
  const tools::BenchDataGenerator generator(
      tools::BenchDataSpecFor(model, ref.batch_size, ref.bag_size, zipf, /*seed=*/1));
  set->owned = generator.Batches(kNumBatches, MaxThreads());
  for (const OwnedBatch& owned : set->owned) {
    set->batches.push_back(
        ValidateBatch(owned.view(), model.num_dense_features(), tables.specs, true));
    const ValidatedBatch& vb = set->batches.back();
    int64_t row_bytes = 0, unique_bytes = 0;
    std::unordered_set<uint64_t> seen;  // (table << 40) | row: rows < 2^40
    for (int32_t f = 0; f < vb.view.num_sparse; ++f) {
      const int32_t table = tables.specs[f].table;
      const int64_t dim_bytes = tables.tables[table].row_bytes();
      const int64_t begin = vb.bag_begin(f, 0), end = vb.bag_begin(f + 1, 0);
      row_bytes += (end - begin) * dim_bytes;
      for (int64_t i = begin; i < end; ++i) {
        if (seen.insert((static_cast<uint64_t>(table) << 40) |
                        static_cast<uint64_t>(vb.view.ids[i]))
                .second)
          unique_bytes += dim_bytes;
      }
    }
    set->row_bytes.push_back(row_bytes);
    set->unique_bytes.push_back(unique_bytes);
    set->unique_rows.push_back(static_cast<int64_t>(seen.size()));
  }
  set->d_pooled.resize(static_cast<size_t>(ref.batch_size * tables.bags->pooled_width()));
  FillPattern(set->d_pooled.data(), static_cast<int64_t>(set->d_pooled.size()), kGradScale, 7);
  return set;
}

void Forward(benchmark::State& state, std::shared_ptr<Lazy<Tables>> lazy_tables,
             std::shared_ptr<Lazy<BatchSet>> lazy_batches) {
  const Tables& tables = lazy_tables->Get();
  const BatchSet& set = lazy_batches->Get();
  const int64_t B = set.batches[0].view.batch_size;
  // This thread's share of every batch, as the engine's chunks are shared by its pool.
  const int64_t b0 = SplitBegin(B, state.threads(), state.thread_index());
  const int64_t b1 = SplitBegin(B, state.threads(), state.thread_index() + 1);
  std::vector<float> pooled(static_cast<size_t>((b1 - b0) * tables.bags->pooled_width()));
  int64_t next = 0, ids = 0, bytes = 0;
  for (auto _ : state) {
    const int64_t i = next++ % kNumBatches;
    tables.bags->Forward(set.batches[i], b0, b1, pooled.data());
    benchmark::DoNotOptimize(pooled.data());
    benchmark::ClobberMemory();
    // Every bag has the same size, so a share of the rows is a share of the ids.
    ids += set.batches[i].view.num_ids * (b1 - b0) / B;
    bytes += set.row_bytes[i] * (b1 - b0) / B;
  }
  state.SetItemsProcessed(ids);
  state.SetBytesProcessed(bytes);
}

void BackwardUpdate(benchmark::State& state, std::shared_ptr<Lazy<Tables>> lazy_tables,
                    std::shared_ptr<Lazy<BatchSet>> lazy_batches,
                    config::SparseOptimizerConfig optimizer_config, int64_t state_bytes_per_row) {
  Tables& tables = lazy_tables->Get();
  const BatchSet& set = lazy_batches->Get();
  const auto optimizer = MakeSparseOptimizer<float>(optimizer_config, tables.shapes);
  ThreadPool pool(static_cast<int>(state.range(0)));
  int64_t next = 0, ids = 0, bytes = 0, rows = 0, step = 0;
  for (auto _ : state) {
    const int64_t i = next++ % kNumBatches;
    tables.bags->BackwardAndUpdate(set.batches[i], set.d_pooled.data(), *optimizer, kLearningRate,
                                   ++step, &pool);
    benchmark::ClobberMemory();
    const int64_t num_ids = set.batches[i].view.num_ids;
    const int64_t grad_bytes = set.row_bytes[i];  // one pooled-gradient slice per id
    ids += num_ids;
    rows += set.unique_rows[i];
    bytes += grad_bytes + 2 * set.unique_bytes[i] + 2 * state_bytes_per_row * set.unique_rows[i];
  }
  state.SetItemsProcessed(ids);
  state.SetBytesProcessed(bytes);
  state.counters["rows/s"] =
      benchmark::Counter(static_cast<double>(rows), benchmark::Counter::kIsRate);
}

}  // namespace

void RegisterEmbeddingBenchmarks(const std::vector<ReferenceModel>& models) {
  config::SparseOptimizerConfig sgd;
  sgd.mutable_sgd();
  sgd.set_learning_rate(kLearningRate);
  config::SparseOptimizerConfig rowwise;
  rowwise.mutable_rowwise_adagrad();
  rowwise.set_learning_rate(kLearningRate);
  struct Optimizer {
    const char* name;
    config::SparseOptimizerConfig config;
    int64_t state_bytes_per_row;
  };
  const Optimizer optimizers[] = {{"sgd", sgd, 0}, {"rowwise_adagrad", rowwise, sizeof(float)}};

  for (const ReferenceModel& ref : models) {
    const config::ModelConfig model = ref.config.model();
    auto tables = std::make_shared<Lazy<Tables>>([model] { return MakeTables(model); });
    auto int8 = std::make_shared<Lazy<Tables>>(
        [model] { return MakeTables(model, config::TableConfig::INT8); });
    auto bf16 = std::make_shared<Lazy<Tables>>(
        [model] { return MakeTables(model, config::TableConfig::BF16); });
    for (const double zipf : {1.2, 0.0}) {
      const std::string ids = zipf > 0 ? "zipf1.2" : "uniform";
      auto batches = std::make_shared<Lazy<BatchSet>>(
          [ref, tables, zipf] { return MakeBatches(ref, tables->Get(), zipf); });
      auto int8_batches = std::make_shared<Lazy<BatchSet>>(
          [ref, int8, zipf] { return MakeBatches(ref, int8->Get(), zipf); });
      auto bf16_batches = std::make_shared<Lazy<BatchSet>>(
          [ref, bf16, zipf] { return MakeBatches(ref, bf16->Get(), zipf); });
      const std::string shape = ref.name + "/" + ids;
      for (const auto& [name, t, b] :
           {std::tuple("BM_EmbeddingForward/", tables, batches),
            std::tuple("BM_EmbeddingForward/int8/", int8, int8_batches),
            std::tuple("BM_EmbeddingForward/bf16/", bf16, bf16_batches)}) {
        auto* fwd = benchmark::RegisterBenchmark((name + shape).c_str(), Forward, t, b);
        fwd->UseRealTime()->Threads(1);
        if (MaxThreads() > 1) fwd->Threads(MaxThreads());
      }
      for (const Optimizer& opt : optimizers) {
        for (const auto& [name, t, b] :
             {std::tuple("BM_EmbeddingBackwardUpdate/", tables, batches),
              std::tuple("BM_EmbeddingBackwardUpdate/bf16/", bf16, bf16_batches)}) {
          auto* bwd =
              benchmark::RegisterBenchmark((name + shape + "/" + opt.name).c_str(), BackwardUpdate,
                                           t, b, opt.config, opt.state_bytes_per_row);
          bwd->UseRealTime()->ArgName("pool_threads")->Arg(1);
          if (MaxThreads() > 1) bwd->Arg(MaxThreads());
        }
      }
    }
  }
}

}  // namespace dlrm::bench
