// DynamicTables (model/dynamic_tables.h), the id translation of DYNAMIC and SSD tables:
// the SSD tier's prefetch stage (rows of the next batch read from the store while a step
// computes are the ones the next resolve takes, and the caches end bit for bit as without
// it), and resolves taken back (a failed one, or a step's) leaving everything as it was.
#include "engine/model/dynamic_tables.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/config/config.h"
#include "engine/core/status.h"
#include "engine/embedding/dynamic_rows.h"
#include "engine/embedding/sparse_optimizer.h"
#include "engine/model/dlrm_model.h"
#include "tests/support/test_support.h"

namespace dlrm {
namespace {

// SmallConfigText's model, Adam, with t1 (25 rows) on the SSD tier in a cache of 8 rows.
config::DlrmConfig Config(const std::string& dir) {
  config::DlrmConfig c = ParseConfigText(testing::SmallConfigText("sparse_optimizer { adam {} }"));
  config::TableConfig* t1 = c.mutable_model()->mutable_tables(1);
  t1->mutable_ssd()->set_cache_bytes(SsdCacheBytes(c, 1, 8));
  c.set_ssd_dir(dir);
  return c;
}

// The model's host state, and its translation: what the Engine's ModelState holds.
struct Host {
  explicit Host(const config::DlrmConfig& c)
      : model(c),
        optimizer(
            MakeSparseOptimizer<float>(c.sparse_optimizer(), {{40, 4}, {ResidentRows(c, 1), 4}})),
        tables(c) {}
  DlrmModel<float> model;
  std::unique_ptr<SparseOptimizer<float>> optimizer;
  DynamicTables tables;
};

TEST(SsdReadAhead, TheNextResolveTakesTheRowsReadAheadAndEndsTheSame) {
  const std::string dir = testing::TempDir("ssd_read_ahead");
  const config::DlrmConfig config = Config(dir);
  Host ahead(config), plain(config);
  std::vector<OwnedBatch> batches;
  std::vector<ValidatedBatch> valid;
  for (uint64_t salt = 0; salt < 40; ++salt)  // batches of 2: at most 6 rows of t1
    batches.push_back(testing::SmallBatch(2, salt, false));
  for (const OwnedBatch& b : batches)
    valid.push_back(ValidateBatch(b.view(), 4, ahead.model.feature_specs(), true));
  // A stand-in for training: each slot a step uses gets +1 in its first value, so a row
  // read back stale would show.
  auto train = [](Host& host, const ValidatedBatch& rows) {
    for (int64_t b = 0; b < rows.view.batch_size; ++b)
      for (int64_t i = rows.bag_begin(1, b); i < rows.bag_end(1, b); ++i)
        host.model.tables()[1].row(rows.view.ids[i])[0] += 1.0f;
  };
  for (size_t i = 0; i < valid.size(); ++i) {
    // Each resolve marks its rows dirty, so evicted rows are written back and read again.
    const ValidatedBatch& rows = ahead.tables.ResolveForStep(
        valid[i], static_cast<int64_t>(i), &ahead.model.tables(), ahead.optimizer.get(), nullptr);
    if (i + 1 < valid.size()) ahead.tables.ReadAheadForNext(valid[i + 1]);  // as the step runs
    train(ahead, rows);
    train(plain,
          plain.tables.ResolveForStep(valid[i], static_cast<int64_t>(i), &plain.model.tables(),
                                      plain.optimizer.get(), nullptr));
    const auto& a = ahead.model.tables()[1].data();
    const auto& p = plain.model.tables()[1].data();
    ASSERT_EQ(std::memcmp(a.data(), p.data(), a.size() * sizeof(float)), 0) << "step " << i;
  }
  EXPECT_GT(ahead.tables.ssd(1).rows_read_ahead(), 0);
  EXPECT_EQ(plain.tables.ssd(1).rows_read_ahead(), 0);
  EXPECT_GT(ahead.tables.rows(1).stats().evicted, 0);
}

// A step taken back leaves the cache's dirty marks as they were: a checkpoint after it
// writes no row to the store that an engine which never took the step would not.
TEST(DynamicTablesTest, AStepTakenBackLeavesTheSsdCachesDirtyMarks) {
  const std::string dir = testing::TempDir("ssd_roll_back");
  Host host(Config(dir));
  const OwnedBatch batch = testing::SmallBatch(2, 7, false);
  const ValidatedBatch valid = ValidateBatch(batch.view(), 4, host.model.feature_specs(), true);
  RowBatch predicted;  // brings the batch's rows into the cache, clean
  host.tables.ResolveForPredict(valid, 0, &host.model.tables(), host.optimizer.get(), &predicted);
  host.tables.ResolveForStep(valid, 0, &host.model.tables(), host.optimizer.get(), nullptr);
  host.tables.RollBackStep(&host.model.tables(), host.optimizer.get());
  EXPECT_FALSE(host.tables.rows(1).Snapshot().ids.empty());  // still cached
  host.tables.FlushAndCopyStore(dir + "/copy", &host.model.tables(), host.optimizer.get());
  for (const uint64_t word : host.tables.ssd(1).stored_words()) EXPECT_EQ(word, 0u);
}

// An optimizer whose ResetRow fails once `fail` is set (a stand-in for a failure part way
// through initializing a step's admitted rows, such as an allocation).
class ResetFails : public SparseOptimizer<float> {
 public:
  explicit ResetFails(std::unique_ptr<SparseOptimizer<float>> inner) : inner_(std::move(inner)) {}
  void UpdateRow(int32_t table, int64_t row, float* weights, const float* grad, int32_t dim,
                 float lr, int64_t step) override {
    inner_->UpdateRow(table, row, weights, grad, dim, lr, step);
  }
  bool RowUpdateIsFinite(int32_t table, int64_t row, const float* weights, const float* grad,
                         int32_t dim, float lr, int64_t step) const override {
    return inner_->RowUpdateIsFinite(table, row, weights, grad, dim, lr, step);
  }
  bool HasRowState() const override { return inner_->HasRowState(); }
  void PrefetchState(int32_t table, int64_t row) const override {
    inner_->PrefetchState(table, row);
  }
  void ResetRow(int32_t table, int64_t row) override {
    if (fail) Throw(StatusCode::kInternal, "ResetRow failed");
    inner_->ResetRow(table, row);
  }
  std::vector<std::pair<std::string, std::vector<float>*>> StateBuffers(int32_t table) override {
    return inner_->StateBuffers(table);
  }
  bool fail = false;

 private:
  std::unique_ptr<SparseOptimizer<float>> inner_;
};

// A DYNAMIC table's resolve that fails after its admissions were decided takes them back:
// the ids, the rows' values and their optimizer state are as before the call.
TEST(DynamicTablesTest, AResolveThatFailsInitializingRowsChangesNothing) {
  config::DlrmConfig c = ParseConfigText(testing::SmallConfigText("sparse_optimizer { adam {} }"));
  c.mutable_model()->mutable_tables(0)->set_kind(config::TableConfig::DYNAMIC);
  ValidateConfig(c);
  DlrmModel<float> model(c);
  ResetFails optimizer(MakeSparseOptimizer<float>(c.sparse_optimizer(),
                                                  {{StateRows(c, 0), 4}, {StateRows(c, 1), 4}}));
  DynamicTables tables(c);
  const auto resolve = [&](uint64_t salt, int64_t step) {
    const OwnedBatch batch = testing::SmallBatch(4, salt, false);
    tables.ResolveForStep(ValidateBatch(batch.view(), 4, model.feature_specs(), true), step,
                          &model.tables(), &optimizer, nullptr);
  };
  resolve(1, 0);
  const DynamicRowsSnapshot ids = tables.rows(0).Snapshot();
  const std::vector<float> values = model.tables()[0].data();
  const std::vector<float> state = *optimizer.StateBuffers(0)[0].second;
  optimizer.fail = true;
  testing::ExpectError([&] { resolve(2, 1); }, StatusCode::kInternal, "ResetRow failed");
  const DynamicRowsSnapshot after = tables.rows(0).Snapshot();
  EXPECT_EQ(after.ids, ids.ids);
  EXPECT_EQ(after.rows, ids.rows);
  EXPECT_EQ(after.stats.admitted, ids.stats.admitted);
  EXPECT_EQ(model.tables()[0].data(), values);
  EXPECT_EQ(*optimizer.StateBuffers(0)[0].second, state);
  EXPECT_TRUE(tables.ChangedByLastResolve().empty());
  optimizer.fail = false;
  resolve(2, 1);
  EXPECT_GT(tables.rows(0).Snapshot().ids.size(), ids.ids.size());
}

}  // namespace
}  // namespace dlrm
