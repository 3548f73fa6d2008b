// The model both distributed-training tests train: 3 small tables (t0 read by features f0
// and f3, so their occurrences interleave; f2 MEAN-pooled), dim 8, every table forced to
// one sharding type over `servers` embedding servers.
#pragma once

#include <string>

#include "engine/config/config.h"
#include "engine/config/dlrm.pb.h"

namespace dlrm::testing {

inline config::DlrmConfig ShardedTestConfig(config::ShardingConfig::Type type,
                                            const std::string& dense_optimizer,
                                            const std::string& sparse_optimizer, int32_t servers) {
  config::DlrmConfig c;
  auto* m = c.mutable_model();
  m->set_num_dense_features(4);
  const int rows[] = {60, 50, 40};
  for (int t = 0; t < 3; ++t) {
    auto* tc = m->add_tables();
    tc->set_name("t" + std::to_string(t));
    tc->set_num_rows(rows[t]);
    tc->set_dim(8);
  }
  const char* tables[] = {"t0", "t1", "t2", "t0"};
  for (int f = 0; f < 4; ++f) {
    auto* sf = m->add_sparse_features();
    sf->set_name("f" + std::to_string(f));
    sf->set_table(tables[f]);
    if (f == 2) sf->set_pooling(config::SparseFeatureConfig::MEAN);
  }
  for (int s : {16, 8}) m->mutable_bottom_mlp()->add_layer_sizes(s);
  for (int s : {16, 1}) m->mutable_top_mlp()->add_layer_sizes(s);
  auto* d = c.mutable_dense_optimizer();
  d->set_learning_rate(0.05f);
  if (dense_optimizer == "adagrad") d->mutable_adagrad();
  if (dense_optimizer == "adam") d->mutable_adam();
  auto* so = c.mutable_sparse_optimizer();
  so->set_learning_rate(0.05f);
  if (sparse_optimizer == "adagrad") so->mutable_adagrad();
  if (sparse_optimizer == "rowwise_adagrad") so->mutable_rowwise_adagrad();
  if (sparse_optimizer == "adam") so->mutable_adam();
  c.set_seed(5);
  c.set_num_threads(2);
  c.set_reduction_chunk_rows(16);
  auto* sh = c.mutable_sharding();
  sh->set_min_column_block(4);  // so that dim 8 splits into column blocks
  sh->set_servers_per_group(servers);
  sh->set_split_fraction(0.01f);  // small tables still get split over every server
  for (int t = 0; t < 3; ++t) {
    auto* opt = sh->add_tables();
    opt->set_table("t" + std::to_string(t));
    opt->add_allowed_types(type);
  }
  ValidateConfig(c);
  return c;
}

// c with every table's rows in `precision`: FP32 (c unchanged), or BF16 / FP16 rounded
// stochastically (the mode whose random bits a shard must draw as the whole table does).
inline config::DlrmConfig WithTablePrecision(config::DlrmConfig c,
                                             config::TableConfig::Precision precision) {
  if (precision == config::TableConfig::FP32) return c;
  for (auto& table : *c.mutable_model()->mutable_tables()) {
    table.set_precision(precision);
    table.set_rounding(config::TableConfig::STOCHASTIC);
  }
  ValidateConfig(c);
  return c;
}

}  // namespace dlrm::testing
