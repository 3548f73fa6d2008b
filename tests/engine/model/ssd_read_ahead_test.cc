// The SSD tier's prefetch stage (model/dynamic_tables.h, ReadAheadForNext): rows of the
// next batch read from the store while a step computes are the ones the next resolve
// takes, and the caches end bit for bit as without it.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "engine/config/config.h"
#include "engine/embedding/dynamic_rows.h"
#include "engine/embedding/sparse_optimizer.h"
#include "engine/model/dlrm_model.h"
#include "engine/model/dynamic_tables.h"
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

}  // namespace
}  // namespace dlrm
